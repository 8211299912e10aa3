package etcd

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
)

// Several allocators over one etcd, each with its own client, racing for
// the addresses of overlapping CIDRs (dynamic and static, with releases):
// once each has applied the last write, every one's Usage (what the
// metrics package's gauges show) is the store's truth, prefix by prefix,
// with no count left behind by a lost race or an address in flight.
func TestUsageOfAllocatorsSharingEtcdIsTheStoresTruth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded etcd")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	as := newAllocators(t, ctx, startCluster(t, 1), "/usage", 3, nil)
	var last int64
	for _, c := range []struct {
		name     string
		prefixes []string
	}{
		{"wide", []string{"10.0.0.0/26", "fd00::/122"}},
		{"narrow", []string{"10.0.0.0/28"}},
		{"same", []string{"10.0.0.0/28"}},
	} {
		var ps []netip.Prefix
		for _, p := range c.prefixes {
			ps = append(ps, netip.MustParsePrefix(p))
		}
		got, err := as[0].CreateCIDR(ctx, c.name, ps...)
		if err != nil {
			t.Fatal(err)
		}
		last = got.Revision
	}
	for _, a := range as {
		if err := a.WaitRevision(ctx, last); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i, a := range as {
		wg.Go(func() {
			for n := range 40 {
				owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("a%d-%d", i, n)}
				var rec ipaddress.IPAddress
				var err error
				switch n % 4 {
				case 0:
					rec, err = a.Allocate(ctx, netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + n%14)}), owner)
				case 1:
					rec, _, err = a.AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{})
				default:
					rec, err = a.AllocateNext(ctx, ipaddress.IPv4, owner)
				}
				if err != nil {
					continue // taken or full: the race is the point
				}
				if n%3 == 0 {
					if err := a.Release(ctx, rec.Addr); err != nil {
						t.Errorf("release %s: %v", rec.Addr, err)
					}
				}
			}
		})
	}
	wg.Wait()
	// One more write, seen by all: every earlier one is applied too.
	fence, err := as[1].CreateCIDR(ctx, "fence", netip.MustParsePrefix("192.168.0.0/30"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := as[0].Store().ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		t.Fatal("nothing allocated: the test proves nothing")
	}
	for i, a := range as {
		if err := a.WaitRevision(ctx, fence.Revision); err != nil {
			t.Fatal(err)
		}
		for _, c := range a.CIDRs() {
			u, err := a.Usage(c.Name)
			if err != nil {
				t.Fatal(err)
			}
			for _, pu := range u.Prefixes {
				used := uint64(0)
				for _, r := range recs {
					if cidrset.HostContains(pu.Prefix, r.Addr) {
						used++
					}
				}
				size, _ := cidrset.Size(pu.Prefix).Uint64()
				gotUsed, _ := pu.Used.Uint64()
				gotFree, _ := pu.Free.Uint64()
				if gotUsed != used || gotFree != size-used {
					t.Errorf("allocator %d, %s %s: used %d free %d; the store holds %d of %d", i, c.Name, pu.Prefix, gotUsed, gotFree, used, size)
				}
			}
		}
	}
}
