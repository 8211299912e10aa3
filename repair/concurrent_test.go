package repair_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/internal/stress"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// onEvent is an Observer (metrics) that runs hook on the first event of
// kind k: what another apiserver may do while the pass is between its two
// steps.
type onEvent struct {
	k    repair.Kind
	hook func()
	done bool
}

func (o *onEvent) RepairEvent(e repair.Event) {
	if e.Kind == o.k && !o.done {
		o.done = true
		o.hook()
	}
}
func (o *onEvent) RepairDone(repair.Report, error) {}

// SPEC §1/§3 (an address is held by at most one owner) with §6 (a record
// whose parent does not hold the address is deleted; a consumer address
// without a record gets one): when the record of an address a consumer
// holds names another owner, the pass hands it to the consumer in one
// write. Were it deleted and created again, a dynamic allocation by
// another allocator in between would take the consumer's address: two
// owners.
func TestWrongReferenceReplacementLeavesNoGapForAnotherOwner(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	// svc a holds 10.96.0.1 (its truth), but the record names svc b,
	// which exists and holds nothing.
	e.allocate("10.96.0.1", svc("b"))
	e.clock.Advance(time.Hour)
	other, err := allocator.New(e.ctx, e.st, allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var taken ipaddress.IPAddress
	obs := &onEvent{k: repair.WrongReference, hook: func() {
		// Another apiserver serves a dynamic request meanwhile.
		taken, _ = other.AllocateNext(e.ctx, ipaddress.IPv4, svc("d"))
	}}
	r := &repair.Repairer{Allocator: e.a, Now: e.clock.Now, Observer: obs,
		Consumers: repair.NewStatic(consumer(svc("a"), "10.96.0.1"), consumer(svc("b")))}
	rep, err := r.Run(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range rep.Events {
		t.Log(ev)
	}
	rec, ok := e.record("10.96.0.1")
	if !ok || rec.Parent != svc("a") {
		t.Fatalf("10.96.0.1, held by consumer %s, now recorded for %+v (found %v); a concurrent AllocateNext got %s: two owners", svc("a"), rec.Parent, ok, taken.Addr)
	}
}

// SPEC §6 with context cancellation: a pass cut short must not leave the
// store worse than it found it. Cancelled right after handing a wrongly
// referenced record to its holder, the pass leaves the address recorded.
func TestCancelledPassDoesNotFreeAnAddressAConsumerHolds(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	e.allocate("10.96.0.1", svc("b"))
	e.clock.Advance(time.Hour)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	obs := &onEvent{k: repair.WrongReference, hook: cancel}
	r := &repair.Repairer{Allocator: e.a, Now: e.clock.Now, Observer: obs,
		Consumers: repair.NewStatic(consumer(svc("a"), "10.96.0.1"), consumer(svc("b")))}
	_, err := r.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	if _, ok := e.record("10.96.0.1"); !ok {
		got, aerr := e.a.AllocateNext(e.ctx, ipaddress.IPv4, svc("d"))
		t.Fatalf("cancelled pass left 10.96.0.1, held by consumer %s, without a record; AllocateNext then returns %s (%v)", svc("a"), got.Addr, aerr)
	}
}

// deletingOnExists is the embedder's consumer source; while the pass asks
// it about a record's parent, an operator deletes CIDR name (another
// apiserver does, in real life).
type deletingOnExists struct {
	*repair.Static
	a    *allocator.Allocator
	name string
}

func (d deletingOnExists) Exists(ctx context.Context, ref ipaddress.ParentRef) (bool, error) {
	err := d.a.DeleteCIDR(ctx, d.name)
	if err != nil && !errors.Is(err, allocator.ErrDeletionBlocked) {
		return false, err
	}
	return d.Static.Exists(ctx, ref)
}

// SPEC §6 (a consumer address without a record gets one; out of range
// only if in no CIDR) and §4 (a Terminating CIDR is not removed while an
// address inside it is held): a CIDR marked Terminating during the pass
// still gets the consumer's address recorded inside it, so that it is not
// removed with the address inside once its other addresses go.
func TestRepairInsideACIDRTurnedTerminatingDuringThePassAdoptsTheAddress(t *testing.T) {
	e := newEnv(t, map[string][]string{"old": {"10.0.0.0/24"}})
	e.allocate("10.0.0.9", svc("keep"))   // blocks old's removal for now
	e.allocate("10.0.0.200", svc("gone")) // a leak: makes the pass ask Exists
	e.clock.Advance(time.Hour)
	r := &repair.Repairer{Allocator: e.a, Now: e.clock.Now,
		Consumers: deletingOnExists{repair.NewStatic(consumer(svc("keep"), "10.0.0.9"), consumer(svc("c"), "10.0.0.5")), e.a, "old"}}
	rep, err := r.Run(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range rep.Events {
		t.Log(ev)
	}
	if c, err := e.a.GetCIDR("old"); err != nil || !c.Terminating {
		t.Fatalf("old = %+v, %v; want Terminating", c, err)
	}
	_, recorded := e.record("10.0.0.5")
	// keep releases its address: old goes if nothing else holds it.
	if err := e.a.Release(e.ctx, netip.MustParseAddr("10.0.0.9")); err != nil {
		t.Fatal(err)
	}
	_, cerr := e.st.GetCIDR(e.ctx, "old")
	if !recorded || errors.Is(cerr, store.ErrNotFound) {
		t.Fatalf("10.0.0.5, held by consumer %s inside Terminating CIDR old, recorded=%v; events %v; after the last other release old is gone=%v: the consumer's address is orphaned",
			svc("c"), recorded, rep.Events, errors.Is(cerr, store.ErrNotFound))
	}
}

// cancelOnExists cancels the pass's context while it is asked about a
// record's parent: the apiserver shutting down mid-pass.
type cancelOnExists struct {
	*repair.Static
	cancel context.CancelFunc
}

func (c cancelOnExists) Exists(ctx context.Context, ref ipaddress.ParentRef) (bool, error) {
	c.cancel()
	return c.Static.Exists(ctx, ref)
}

type kinds struct{ seen []repair.Event }

func (k *kinds) RepairEvent(e repair.Event)      { k.seen = append(k.seen, e) }
func (k *kinds) RepairDone(repair.Report, error) {}

// SPEC §7 (repair errors by type) with cancellation: a pass whose context
// ends is stopped, not failing on addresses; the observer must not count
// the cancellation as repair errors ("unknown"), and the pass must return
// the typed context error.
func TestCancelledPassCountsNoRepairErrors(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	e.allocate("10.96.0.5", svc("gone"))
	e.clock.Advance(time.Hour)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	obs := &kinds{}
	r := &repair.Repairer{Allocator: e.a, Now: e.clock.Now, Observer: obs,
		Consumers: cancelOnExists{repair.NewStatic(consumer(svc("later"), "10.96.0.7")), cancel}}
	rep, err := r.Run(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	t.Log(rep.Events)
	for _, ev := range obs.seen {
		if ev.ErrorType() != "" {
			t.Errorf("cancellation observed as a repair error of type %q: %v", ev.ErrorType(), ev)
		}
	}
}

// Context cancellation: a pass whose context ends before it has acted on
// everything it found must say so with the typed context error, not nil
// (which the observer's RepairDone and a caller read as "pass completed"),
// also when the context ends during its last item.
func TestCancelledPassReturnsTheContextError(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	e.allocate("10.96.0.5", svc("gone"))
	e.clock.Advance(time.Hour)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	r := &repair.Repairer{Allocator: e.a, Now: e.clock.Now, Consumers: cancelOnExists{repair.NewStatic(), cancel}}
	rep, err := r.Run(ctx)
	_, still := e.record("10.96.0.5")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v (events %v, leak still recorded: %v), want an error matching context.Canceled", err, rep.Events, still)
	}
}

// releasingOnExists releases addr while the pass asks about a record's
// parent: another apiserver deleting a service meanwhile.
type releasingOnExists struct {
	*repair.Static
	a    *allocator.Allocator
	addr netip.Addr
	once *sync.Once
}

func (r releasingOnExists) Exists(ctx context.Context, ref ipaddress.ParentRef) (bool, error) {
	var err error
	r.once.Do(func() { err = r.a.Release(ctx, r.addr) })
	if err != nil {
		return false, err
	}
	return r.Static.Exists(ctx, ref)
}

// SPEC §6 and §4, the same gap from the other side: the address is in two
// Terminating CIDRs; the first (by name) is removed during the pass, since
// no record held the consumer's address. The pass must record the address
// in the other, or that one goes too and the consumer's address is
// orphaned.
func TestRepairAdoptsIntoAnyTerminatingCIDRStillHoldingTheAddress(t *testing.T) {
	e := newEnv(t, map[string][]string{"a-old": {"10.0.0.0/24"}, "b-old": {"10.0.0.0/16"}})
	e.allocate("10.0.0.9", svc("short")) // holds a-old (and b-old)
	e.allocate("10.0.5.5", svc("keep"))  // holds b-old
	e.allocate("10.0.9.9", svc("gone"))  // a leak: makes the pass ask Exists
	for _, n := range []string{"b-old", "a-old"} {
		if err := e.a.DeleteCIDR(e.ctx, n); !errors.Is(err, allocator.ErrDeletionBlocked) {
			t.Fatalf("DeleteCIDR(%s) = %v", n, err)
		}
	}
	e.clock.Advance(time.Hour)
	r := &repair.Repairer{Allocator: e.a, Now: e.clock.Now,
		Consumers: releasingOnExists{repair.NewStatic(consumer(svc("keep"), "10.0.5.5"), consumer(svc("c"), "10.0.0.5")), e.a, netip.MustParseAddr("10.0.0.9"), &sync.Once{}}}
	rep, err := r.Run(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range rep.Events {
		t.Log(ev)
	}
	_, recorded := e.record("10.0.0.5")
	if err := e.a.Release(e.ctx, netip.MustParseAddr("10.0.5.5")); err != nil {
		t.Fatal(err)
	}
	_, cerr := e.st.GetCIDR(e.ctx, "b-old")
	if !recorded || errors.Is(cerr, store.ErrNotFound) {
		t.Fatalf("10.0.0.5, held by consumer c inside Terminating CIDR b-old: recorded=%v, events %v; b-old removed=%v: orphaned", recorded, rep.Events, errors.Is(cerr, store.ErrNotFound))
	}
}

// takingOnList is the embedder's consumer source; once the pass has
// listed the records, and before it gets the consumers, the address
// addr is allocated to owner (a consumer deleted meanwhile released it,
// and another took it). gone is whether the listed consumers are
// deleted by the time the pass asks.
type takingOnList struct {
	*repair.Static
	a     *allocator.Allocator
	addr  netip.Addr
	owner ipaddress.ParentRef
	gone  bool
}

func (l takingOnList) List(ctx context.Context) ([]repair.Consumer, error) {
	if _, err := l.a.Allocate(ctx, l.addr, l.owner); err != nil {
		return nil, err
	}
	return l.Static.List(ctx)
}

func (l takingOnList) Exists(ctx context.Context, ref ipaddress.ParentRef) (bool, error) {
	if l.gone {
		return false, nil
	}
	return l.Static.Exists(ctx, ref)
}

// SPEC §6: "two consumers on one address → report already allocated".
// A listed consumer whose unrecorded address another owner takes before
// the pass restores it is such a second holder only if it still exists:
// one deleted since the listing (its address released and reused) is no
// holder, and the pass reports nothing of it.
func TestRepairReportsAnAddressTakenSinceTheListingOnlyWhileItsConsumerExists(t *testing.T) {
	for _, gone := range []bool{false, true} {
		e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/24"}})
		addr := netip.MustParseAddr("10.96.0.7")
		cs := takingOnList{Static: repair.NewStatic(consumer(svc("old"), addr.String())), a: e.a, addr: addr, owner: svc("new"), gone: gone}
		rep, err := (&repair.Repairer{Allocator: e.a, Consumers: cs, Now: e.clock.Now}).Run(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := 1
		if gone {
			want = 0
		}
		if n := rep.Count(repair.Duplicate); n != want || len(rep.Events) != want {
			t.Errorf("consumer deleted since the listing: %v; events %v, want %d Duplicate", gone, rep.Events, want)
		}
		if r, ok := e.record(addr.String()); !ok || r.Parent != svc("new") {
			t.Errorf("consumer deleted: %v; %s = %+v, %v, want kept for %s", gone, addr, r, ok, svc("new"))
		}
	}
}

// SPEC §1/§3 with §6 over the memory store, two allocators sharing it: see
// stress.RepairRestoreRace.
func TestRepairRestoresRacingAnotherAllocatorRecordEachAddressOnce(t *testing.T) {
	stress.RepairRestoreRace(t, 20, func(int) (store.Store, store.Store, func()) {
		st := memory.New()
		return st, st, func() {}
	})
}
