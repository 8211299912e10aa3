package bolt_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/bolt"
)

// benchAllocator returns an allocator over a new file with a /16.
func benchAllocator(b *testing.B) *allocator.Allocator {
	b.Helper()
	ctx := context.Background()
	st, err := bolt.Open(tempPathB(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	a, err := allocator.New(ctx, st, allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = a.Close() })
	if _, err := a.CreateCIDR(ctx, "bench", netip.MustParsePrefix("10.0.0.0/16")); err != nil {
		b.Fatal(err)
	}
	return a
}

func tempPathB(b *testing.B) string { return b.TempDir() + "/bench.db" }

// BenchmarkAllocateNextRelease is one AllocateNext and one Release per
// operation: two synced write transactions.
func BenchmarkAllocateNextRelease(b *testing.B) {
	ctx := context.Background()
	a := benchAllocator(b)
	b.ReportAllocs()
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "bench", Name: "serial"}
	for b.Loop() {
		rec, err := a.AllocateNext(ctx, ipaddress.IPv4, owner)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Release(ctx, rec.Addr); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocateNextReleaseParallel is the same from many goroutines
// at once, each for its own owner: GOMAXPROCS × per-proc of them, as many
// pods starting on one node at once. Their writes share commits (group
// commit), so the time per operation falls as callers are added.
func BenchmarkAllocateNextReleaseParallel(b *testing.B) {
	for _, perProc := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("per-proc=%d", perProc), func(b *testing.B) {
			ctx := context.Background()
			a := benchAllocator(b)
			b.ReportAllocs()
			var n atomic.Int64
			b.SetParallelism(perProc)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				owner := ipaddress.ParentRef{Resource: "services", Namespace: "bench", Name: fmt.Sprintf("p%d", n.Add(1))}
				for pb.Next() {
					rec, err := a.AllocateNext(ctx, ipaddress.IPv4, owner)
					if err != nil {
						b.Error(err)
						return
					}
					if err := a.Release(ctx, rec.Addr); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
