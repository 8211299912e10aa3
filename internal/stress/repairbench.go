package stress

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
)

// RepairLeaks is the body of the stores' repair benchmarks: each
// operation is one repair pass over a's store that finds leaks records of
// owners no consumer has and deletes them. The records are written before
// each pass, off the clock, 64 a write; a must serve 10.0.0.0/16.
func RepairLeaks(b *testing.B, a *allocator.Allocator, leaks int) {
	ctx := context.Background()
	r := &repair.Repairer{Allocator: a, Consumers: repair.NewStatic(), LeakGrace: -1}
	recs := make([]ipaddress.IPAddress, leaks)
	for i := range recs {
		recs[i] = ipaddress.IPAddress{
			Addr:   netip.AddrFrom4([4]byte{10, 0, byte(1 + i/256), byte(i)}),
			Parent: ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: fmt.Sprint("gone-", i)},
		}
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for batch := range slices.Chunk(recs, 64) {
			if _, err := a.Store().CreateAddresses(ctx, batch); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if rep, err := r.Run(ctx); err != nil || rep.Count(repair.Leak) != leaks {
			b.Fatalf("a pass over %d leaks: %d deleted, %v", leaks, rep.Count(repair.Leak), err)
		}
	}
}
