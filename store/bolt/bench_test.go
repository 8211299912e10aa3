package bolt_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/internal/stress"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
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

// BenchmarkReleaseOwner is a network plugin's teardown of a dual-stack pod
// on one node: the pair allocated (AllocateDualStack, one synced write),
// then given back by owner (ReleaseOwner).
//
//	go test -run x -bench ReleaseOwner -benchtime 500x ./store/bolt/
func BenchmarkReleaseOwner(b *testing.B) {
	ctx := context.Background()
	a := benchAllocator(b)
	if _, err := a.UpdateCIDR(ctx, "bench", netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00::/112")); err != nil {
		b.Fatal(err)
	}
	owner := ipaddress.ParentRef{Resource: "pods", Namespace: "bench", Name: "pod"}
	for b.Loop() {
		if _, _, err := a.AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{}); err != nil {
			b.Fatal(err)
		}
		if got, err := a.ReleaseOwner(ctx, owner); err != nil || len(got) != 2 {
			b.Fatalf("ReleaseOwner = %v, %v; want a pair", got, err)
		}
	}
}

// BenchmarkRepairLeaks is a repair pass that finds 1,000 leaked records
// (their owners gone) and deletes them, on one node (stress.RepairLeaks).
//
//	go test -run '^$' -bench RepairLeaks -benchtime 5x ./store/bolt/
func BenchmarkRepairLeaks(b *testing.B) {
	stress.RepairLeaks(b, benchAllocator(b), 1000)
}

// BenchmarkRepairLostRecords is a repair pass that writes back the
// records of 1,000 addresses their consumers hold, which the store lost, on
// one node (stress.RepairLostRecords).
//
//	go test -run '^$' -bench RepairLostRecords -benchtime 5x ./store/bolt/
func BenchmarkRepairLostRecords(b *testing.B) {
	stress.RepairLostRecords(b, benchAllocator(b), 1000)
}

// BenchmarkRepairAdoptions is a repair pass that writes back the records
// of 1,000 addresses inside a Terminating CIDR, which the store lost, on
// one node (stress.RepairAdoptions).
//
//	go test -run '^$' -bench RepairAdoptions -benchtime 5x ./store/bolt/
func BenchmarkRepairAdoptions(b *testing.B) {
	stress.RepairAdoptions(b, benchAllocator(b), 1000)
}

// BenchmarkRepairHandOvers is a repair pass that gives 1,000 records of
// owners gone to the consumers holding their addresses, on one node
// (stress.RepairHandOvers).
//
//	go test -run '^$' -bench RepairHandOvers -benchtime 5x ./store/bolt/
func BenchmarkRepairHandOvers(b *testing.B) {
	stress.RepairHandOvers(b, func(int) *allocator.Allocator { return benchAllocator(b) }, 1000)
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

// BenchmarkColdStart is a restart over a file holding n addresses: Open,
// then allocator.New, which reads every record into its index (a network
// plugin starting on a node that already runs pods). Each address has
// its own owner, with a 32-byte name.
func BenchmarkColdStart(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("addresses=%d", n), func(b *testing.B) {
			ctx := context.Background()
			path := tempPathB(b)
			fillForColdStart(b, path, n)
			for b.Loop() { // b.Loop starts the timer: the fill is not counted
				st, err := bolt.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				a, err := allocator.New(ctx, st)
				if err != nil {
					b.Fatal(err)
				}
				if used := a.FamilyUsage(ipaddress.IPv4).Used; used.Lo != uint64(n) {
					b.Fatalf("index holds %v addresses, want %d", used, n)
				}
				_ = a.Close()
				_ = st.Close()
			}
		})
	}
}

// fillForColdStart writes n addresses of a /12 to a new file at path, in
// batches, each for its own owner.
func fillForColdStart(b *testing.B, path string, n int) {
	b.Helper()
	ctx := context.Background()
	st, err := bolt.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/12")}})
	if err != nil {
		b.Fatal(err)
	}
	first := netip.MustParseAddr("10.0.0.1")
	batch := make([]ipaddress.IPAddress, 0, 10_000)
	for i, a := 0, first; i < n; i, a = i+1, a.Next() {
		batch = append(batch, ipaddress.IPAddress{Addr: a, Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("svc-%028d", i)}})
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := st.CreateAddresses(ctx, batch, store.Fence{CIDR: "c", Revision: c.Revision}); err != nil {
				b.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}
