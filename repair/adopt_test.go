package repair_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// lostInsideTerminating builds a Terminating CIDR "old" (10.0.0.0/24),
// held by one record, and n consumers whose addresses inside it have no
// record: what a pass sees after a store lost records while the CIDR was
// being deleted. It returns the consumers, the held one first.
func lostInsideTerminating(t *testing.T, ctx context.Context, a *allocator.Allocator, n int) []repair.Consumer {
	t.Helper()
	if _, err := a.CreateCIDR(ctx, "old", netip.MustParsePrefix("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, netip.MustParseAddr("10.0.0.1"), svc("held")); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCIDR(ctx, "old"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(old) = %v, want blocked by 10.0.0.1", err)
	}
	cs := []repair.Consumer{consumer(svc("held"), "10.0.0.1")}
	for i := range n {
		cs = append(cs, consumer(svc(fmt.Sprintf("lost-%d", i)), fmt.Sprintf("10.0.0.%d", 10+i)))
	}
	return cs
}

// checkAdopted checks that every consumer of cs past the first holds its
// address through a record inside "old", reported Repaired as waiting for
// it, and returns the revisions of those records.
func checkAdopted(t *testing.T, ctx context.Context, st store.Store, rep repair.Report, cs []repair.Consumer) map[int64]int {
	t.Helper()
	if got := rep.Count(repair.Repaired); got != len(cs)-1 || len(rep.Events) != len(cs)-1 {
		t.Fatalf("want %d Repaired events and no other, got %d: %v", len(cs)-1, got, rep.Events)
	}
	for _, ev := range rep.Events {
		if !strings.Contains(ev.Message, "inside Terminating CIDR old") {
			t.Errorf("event %q does not say the address now holds Terminating CIDR old", ev.Message)
		}
	}
	revs := map[int64]int{}
	for _, c := range cs[1:] {
		r, err := st.GetAddress(ctx, netip.MustParseAddr(c.Addrs[0]))
		if err != nil || r.Parent != c.Ref {
			t.Fatalf("%s of %s: record %+v, %v; want it recorded for its consumer", c.Addrs[0], c.Ref, r, err)
		}
		revs[r.Revision]++
	}
	if _, err := st.GetCIDR(ctx, "old"); err != nil {
		t.Fatalf("CIDR old after the pass: %v, want it kept for the adopted addresses", err)
	}
	return revs
}

// SPEC §6 with §4, at scale: a pass that adopts many lost records into a
// Terminating CIDR writes them up to 64 in one fenced write, as it writes
// back records inside live CIDRs, not one write each.
func TestRepairAdoptsLostRecordsIntoATerminatingCIDRInBatches(t *testing.T) {
	e := newEnv(t, nil)
	cs := lostInsideTerminating(t, e.ctx, e.a, 100)
	e.clock.Advance(time.Hour)

	rep := e.run(false, cs...)

	revs := checkAdopted(t, e.ctx, e.st, rep, cs)
	if len(revs) != 2 {
		t.Errorf("100 adopted records carry %d revisions, want 2: writes of 64 and 36", len(revs))
	}
}

// passOverLostInsideTerminating runs a pass over the records of
// lostInsideTerminating(n), on an allocator over wrap's store around a
// memory store, an hour after the records were written.
func passOverLostInsideTerminating(t *testing.T, n int, wrap func(*memory.Store) store.Store) ([]repair.Consumer, repair.Report) {
	t.Helper()
	ctx := context.Background()
	clk := &clock{now: time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)}
	st := wrap(memory.New(memory.WithClock(clk.Now)))
	a, err := allocator.New(ctx, st, allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); st.Close() })
	cs := lostInsideTerminating(t, ctx, a, n)
	clk.Advance(time.Hour)
	rep, err := (&repair.Repairer{Allocator: a, Consumers: repair.NewStatic(cs...), Now: clk.Now}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range rep.Events {
		t.Log(ev)
	}
	return cs, rep
}

// takingOnBatch is the memory store, except that just before its first
// create of more than one record, the batch's last address is recorded
// for owner thief: another writer took it after the pass listed the
// records, and the store refuses the batch as a whole.
type takingOnBatch struct {
	*memory.Store
	once  sync.Once
	taken netip.Addr
	err   error
}

func (s *takingOnBatch) CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...store.Fence) ([]ipaddress.IPAddress, error) {
	if len(recs) > 1 {
		s.once.Do(func() {
			s.taken = recs[len(recs)-1].Addr
			_, s.err = s.Store.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: s.taken, Parent: svc("thief")}}, fences...)
		})
	}
	return s.Store.CreateAddresses(ctx, recs, fences...)
}

// A batched adoption the store refuses as a whole (here: one address was
// taken since the listing) leaves no other record unadopted: each is
// adopted on its own, and the taken address is reported held twice.
func TestRepairAdoptsEachRecordOfARefusedBatchOnItsOwn(t *testing.T) {
	ctx := context.Background()
	var st *takingOnBatch
	cs, rep := passOverLostInsideTerminating(t, 10, func(m *memory.Store) store.Store {
		st = &takingOnBatch{Store: m}
		return st
	})
	if st.err != nil || !st.taken.IsValid() {
		t.Fatalf("taking an address under the batch: %v (taken %v)", st.err, st.taken)
	}
	revs := map[int64]bool{}
	for _, c := range cs[1:] {
		addr := netip.MustParseAddr(c.Addrs[0])
		rec, err := st.GetAddress(ctx, addr)
		if addr == st.taken {
			if err != nil || rec.Parent != svc("thief") {
				t.Errorf("%s: record %+v, %v; want the thief's, untouched", addr, rec, err)
			}
			continue
		}
		if err != nil || rec.Parent != c.Ref {
			t.Fatalf("%s of %s: record %+v, %v; want it adopted on its own after the batch was refused", addr, c.Ref, rec, err)
		}
		revs[rec.Revision] = true
	}
	if len(revs) != 9 {
		t.Errorf("9 records adopted one by one carry %d revisions, want 9", len(revs))
	}
	if rep.Count(repair.Repaired) != 9 || rep.Count(repair.Duplicate) != 1 || len(rep.Events) != 10 {
		t.Errorf("events %v; want 9 Repaired and the taken address Duplicate", rep.Events)
	}
	if _, err := st.GetCIDR(ctx, "old"); err != nil {
		t.Fatalf("CIDR old after the pass: %v, want it kept", err)
	}
}

// unknownOnBatch is the memory store, except that a create of more than
// one record, once applied, answers that its outcome is unknown: the
// answer of a store whose server took the write and lost the reply.
type unknownOnBatch struct{ *memory.Store }

func (s unknownOnBatch) CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...store.Fence) ([]ipaddress.IPAddress, error) {
	out, err := s.Store.CreateAddresses(ctx, recs, fences...)
	if err == nil && len(recs) > 1 {
		return nil, fmt.Errorf("create of %d records: reply lost: %w", len(recs), store.ErrOutcomeUnknown)
	}
	return out, err
}

// A batched adoption whose outcome the store cannot tell is reported for
// each of its records, with that error, as a single adoption's is: not
// taken for a refusal, whose fallback would find the records held by
// their own consumers and report nothing.
func TestRepairReportsABatchedAdoptionOfUnknownOutcome(t *testing.T) {
	_, rep := passOverLostInsideTerminating(t, 10, func(m *memory.Store) store.Store { return unknownOnBatch{m} })
	if rep.Count(repair.Failed) != 10 || len(rep.Events) != 10 {
		t.Fatalf("events %v; want the 10 adoptions reported Failed", rep.Events)
	}
	for _, ev := range rep.Events {
		if !errors.Is(ev.Err, store.ErrOutcomeUnknown) {
			t.Errorf("event %v: error %v, want it to match store.ErrOutcomeUnknown", ev, ev.Err)
		}
	}
}
