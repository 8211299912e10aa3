package memory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// BenchmarkCreateDelete is the store's share of one allocation and release.
func BenchmarkCreateDelete(b *testing.B) {
	ctx := context.Background()
	st := memory.New()
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "bench"}
	// A store of realistic size: maps that empty and refill on every
	// iteration behave differently.
	fill := make([]ipaddress.IPAddress, 1<<16)
	for i := range fill {
		fill[i] = ipaddress.IPAddress{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprint("svc-", i)}}
	}
	if _, err := st.CreateAddresses(ctx, fill); err != nil {
		b.Fatal(err)
	}
	recs := make([]ipaddress.IPAddress, 1)
	b.ReportAllocs()
	for b.Loop() {
		recs[0] = ipaddress.IPAddress{Addr: netip.AddrFrom4([4]byte{10, 0, 0, 1}), Parent: owner}
		if _, err := st.CreateAddresses(ctx, recs); err != nil {
			b.Fatal(err)
		}
		if _, _, err := st.DeleteAddress(ctx, recs[0].Addr); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCreateDeleteLocked is the store's share of one allocation and
// release by an allocator over it (store.Locked), in a store of a million
// records spread over a /12, each allocation for a new owner: the lookups
// miss the cache as they do in a full range.
func BenchmarkCreateDeleteLocked(b *testing.B) {
	ctx := context.Background()
	st := memory.New()
	const held, span = 1 << 20, 1 << 21
	c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	if err != nil {
		b.Fatal(err)
	}
	fence := store.Fence{CIDR: c.Name, Revision: c.Revision}
	addrAt := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}) }
	// Every other address of the span is held; the free ones are used in
	// a random order.
	batch := make([]ipaddress.IPAddress, 0, 4096)
	for i := 0; i < span; i += 2 {
		batch = append(batch, ipaddress.IPAddress{Addr: addrAt(i), Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("held-%026d", i)}})
		if len(batch) == cap(batch) {
			if _, err := st.CreateAddresses(ctx, batch); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	free := rand.New(rand.NewPCG(1, 2)).Perm(held)
	owners := make([]*ipaddress.ValidParentRef, 1024)
	for i := range owners {
		owners[i] = checked(ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("cycle-%026d", i)})
	}
	mu := st.Mutex()
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		addr := addrAt(2*free[i%held] + 1)
		mu.Lock()
		if _, _, err := st.CreateAddressLocked(addr, owners[i%len(owners)], fence, nil); err != nil {
			b.Fatal(err)
		}
		if _, err := st.DeleteAddressLocked(addr, nil); err != nil {
			b.Fatal(err)
		}
		mu.Unlock()
		i++
	}
}
