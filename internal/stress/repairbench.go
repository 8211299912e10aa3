package stress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
)

// RepairLeaks is the body of the stores' repair benchmarks of leaks: each
// operation is one repair pass over a's store that finds n records of
// owners no consumer has and deletes them. The records are written before
// each pass, off the clock, 64 a write; a must serve 10.0.0.0/16.
func RepairLeaks(b *testing.B, a *allocator.Allocator, n int) {
	ctx := context.Background()
	r := &repair.Repairer{Allocator: a, Consumers: repair.NewStatic(), LeakGrace: -1}
	recs := make([]ipaddress.IPAddress, n)
	for i := range recs {
		recs[i] = ipaddress.IPAddress{Addr: benchAddr(i), Parent: benchOwner(i)}
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for batch := range slices.Chunk(recs, 64) {
			if _, err := a.Store().CreateAddresses(ctx, slices.Clone(batch)); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		if rep, err := r.Run(ctx); err != nil || rep.Count(repair.Leak) != n {
			b.Fatalf("a pass over %d leaks: %d deleted, %v", n, rep.Count(repair.Leak), err)
		}
	}
}

// RepairLostRecords is the body of the stores' repair benchmarks of lost
// records: each operation is one repair pass over a's store, which holds
// no record of the n addresses its consumers hold, that writes them back.
// The records are deleted before each pass, off the clock; a must serve
// 10.0.0.0/16.
func RepairLostRecords(b *testing.B, a *allocator.Allocator, n int) {
	ctx := context.Background()
	consumers := make([]repair.Consumer, n)
	for i := range consumers {
		consumers[i] = repair.Consumer{Ref: benchOwner(i), Addrs: []string{benchAddr(i).String()}}
	}
	r := &repair.Repairer{Allocator: a, Consumers: repair.NewStatic(consumers...)}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		loseRecords(b, a, ipaddress.ParentRef{})
		b.StartTimer()
		if rep, err := r.Run(ctx); err != nil || rep.Count(repair.Repaired) != n {
			b.Fatalf("a pass over %d lost records: %d written back, %v", n, rep.Count(repair.Repaired), err)
		}
	}
}

// RepairAdoptions is RepairLostRecords inside a Terminating CIDR: a's
// CIDR "bench" (10.0.0.0/16) is deleted while one more address, held by
// its own consumer, blocks it, and each pass writes the n lost records
// back as adopted, so that the CIDR's removal waits for them.
func RepairAdoptions(b *testing.B, a *allocator.Allocator, n int) {
	ctx := context.Background()
	consumers := make([]repair.Consumer, n, n+1)
	for i := range consumers {
		consumers[i] = repair.Consumer{Ref: benchOwner(i), Addrs: []string{benchAddr(i).String()}}
	}
	holder := repair.Consumer{Ref: benchOwner(n), Addrs: []string{benchAddr(n).String()}}
	if _, err := a.Allocate(ctx, benchAddr(n), holder.Ref); err != nil {
		b.Fatal(err)
	}
	if err := a.DeleteCIDR(ctx, "bench"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		b.Fatalf("DeleteCIDR(bench) = %v, want it blocked by %s", err, benchAddr(n))
	}
	r := &repair.Repairer{Allocator: a, Consumers: repair.NewStatic(append(consumers, holder)...)}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		loseRecords(b, a, holder.Ref)
		b.StartTimer()
		if rep, err := r.Run(ctx); err != nil || rep.Count(repair.Repaired) != n {
			b.Fatalf("a pass over %d lost records inside a Terminating CIDR: %d adopted, %v", n, rep.Count(repair.Repaired), err)
		}
	}
}

// loseRecords releases every record of a's store but those of keep, as a
// store that lost them would hold them.
func loseRecords(b *testing.B, a *allocator.Allocator, keep ipaddress.ParentRef) {
	ctx := context.Background()
	recs, err := a.Store().ListAddresses(ctx)
	if err != nil {
		b.Fatal(err)
	}
	recs = slices.DeleteFunc(recs, func(r ipaddress.IPAddress) bool { return r.Parent == keep })
	for i, err := range a.ReleaseRecords(ctx, recs) {
		if err != nil {
			b.Fatalf("releasing %s: %v", recs[i].Addr, err)
		}
	}
}

// RepairHandOvers is the body of the stores' repair benchmarks of
// hand-overs: each operation is one repair pass over the store of a new
// allocator (fresh(i), serving 10.0.0.0/16), holding n records of owners
// gone, written off the clock 64 a write, whose addresses consumers hold:
// the pass gives each record to its consumer. A new store each time, as a
// record a hand-over wrote may be one a batch does not replace (see
// store.RecordsReplacer).
func RepairHandOvers(b *testing.B, fresh func(i int) *allocator.Allocator, n int) {
	ctx := context.Background()
	consumers := make([]repair.Consumer, n)
	recs := make([]ipaddress.IPAddress, n)
	for i := range consumers {
		consumers[i] = repair.Consumer{Ref: benchOwner(i), Addrs: []string{benchAddr(i).String()}}
		recs[i] = ipaddress.IPAddress{Addr: benchAddr(i), Parent: ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: fmt.Sprint("gone-", i)}}
	}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		a := fresh(i)
		for batch := range slices.Chunk(recs, 64) {
			if _, err := a.Store().CreateAddresses(ctx, slices.Clone(batch)); err != nil {
				b.Fatal(err)
			}
		}
		r := &repair.Repairer{Allocator: a, Consumers: repair.NewStatic(consumers...), LeakGrace: -1}
		b.StartTimer()
		if rep, err := r.Run(ctx); err != nil || rep.Count(repair.Repaired) != n {
			b.Fatalf("a pass over %d records to hand over: %d handed over, %v", n, rep.Count(repair.Repaired), err)
		}
	}
}

// benchAddr is the i-th address of the repair benchmarks, in 10.0.1.0 and
// up.
func benchAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(1 + i/256), byte(i)}) }

// benchOwner is the owner of the i-th address of the repair benchmarks.
func benchOwner(i int) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: fmt.Sprint("p-", i)}
}
