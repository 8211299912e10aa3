package etcd

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
)

// TestWatchManyAddresses writes NETIPAM_ETCD_BIG address records (for
// example 1000000) straight into etcd and times the paginated snapshot of
// Watch, an allocator's start and the owner index's over it. It is skipped
// unless the variable is set: a million records take a few minutes to write
// here.
func TestWatchManyAddresses(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("NETIPAM_ETCD_BIG"))
	if n <= 0 {
		t.Skip("set NETIPAM_ETCD_BIG=<addresses> to run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c := startCluster(t, 1, func(cfg *embed.Config) {
		cfg.UnsafeNoFsync = true // only loading is sped up; reads are the same
		cfg.QuotaBackendBytes = 8 << 30
	})
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/big"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "big", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	const perTxn, writers = 128, 8
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for base := w * perTxn; base < n; base += writers * perTxn {
				ops := make([]clientv3.Op, 0, perTxn)
				for i := base; i < min(base+perTxn, n); i++ {
					a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
					val := encodeRecord(ipaddress.IPAddress{Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("svc-%d", i)}, Created: time.Now()})
					ops = append(ops, clientv3.OpPut(s.addrKey(a), string(val)))
				}
				if _, err := cli.Txn(ctx).Then(ops...).Commit(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("wrote %d records in %v", n, time.Since(start).Round(time.Millisecond))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := newModel()
	start = time.Now()
	if err := s.Watch(ctx, m); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if _, _, addrs := m.state(); len(addrs) != n {
		t.Fatalf("snapshot holds %d addresses, want %d", len(addrs), n)
	}
	runtime.ReadMemStats(&after)
	t.Logf("Watch snapshot of %d addresses in %d pages: %v (%.0f MB allocated while listing)", n, (n+defaultPageSize-1)/defaultPageSize, took.Round(time.Millisecond), float64(after.TotalAlloc-before.TotalAlloc)/(1<<20))

	start = time.Now()
	a, err := allocator.New(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	t.Logf("allocator.New over %d addresses: %v", n, time.Since(start).Round(time.Millisecond))
	rec, err := a.AllocateNext(ctx, ipaddress.IPv4, ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "one-more"})
	if err != nil {
		t.Fatal(err)
	}
	i := int(rec.Addr.As4()[1])<<16 | int(rec.Addr.As4()[2])<<8 | int(rec.Addr.As4()[3])
	if i < n {
		t.Fatalf("AllocateNext gave %s, which the snapshot held", rec.Addr)
	}

	// The owner index: built by the first AddressesOf, from a listing with
	// values; what it keeps is live heap.
	runtime.GC()
	runtime.ReadMemStats(&before)
	start = time.Now()
	recs, err := s.AddressesOf(ctx, ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "svc-7"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("AddressesOf: %v, %v", recs, err)
	}
	took = time.Since(start)
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("first AddressesOf over %d addresses (builds the owner index): %v, %.0f bytes of live heap an address",
		n, took.Round(time.Millisecond), float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n))
	start = time.Now()
	if _, err := s.AddressesOf(ctx, rec.Parent); err != nil {
		t.Fatal(err)
	}
	t.Logf("next AddressesOf: %v", time.Since(start).Round(time.Microsecond))
}
