package repair_test

import (
	"context"
	"errors"
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

// clock is a fake clock shared by the store (which stamps records) and
// the repairer (which measures their age).
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

type env struct {
	t     *testing.T
	ctx   context.Context
	clock *clock
	st    *memory.Store
	a     *allocator.Allocator
}

func newEnv(t *testing.T, cidrs map[string][]string) *env {
	t.Helper()
	ctx := context.Background()
	clk := &clock{now: time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)}
	st := memory.New(memory.WithClock(clk.Now))
	a, err := allocator.New(ctx, st, allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); st.Close() })
	e := &env{t: t, ctx: ctx, clock: clk, st: st, a: a}
	for name, ps := range cidrs {
		var prefixes []netip.Prefix
		for _, p := range ps {
			prefixes = append(prefixes, netip.MustParsePrefix(p))
		}
		if _, err := a.CreateCIDR(ctx, name, prefixes...); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func svc(name string) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: name}
}

func (e *env) allocate(addr string, owner ipaddress.ParentRef) {
	e.t.Helper()
	if _, err := e.a.Allocate(e.ctx, netip.MustParseAddr(addr), owner); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) record(addr string) (ipaddress.IPAddress, bool) {
	e.t.Helper()
	r, err := e.st.GetAddress(e.ctx, netip.MustParseAddr(addr))
	if errors.Is(err, store.ErrNotFound) {
		return r, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return r, true
}

func (e *env) records() int {
	e.t.Helper()
	recs, err := e.st.ListAddresses(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(recs)
}

func (e *env) run(dry bool, cs ...repair.Consumer) repair.Report {
	e.t.Helper()
	r := &repair.Repairer{Allocator: e.a, Consumers: repair.NewStatic(cs...), Now: e.clock.Now, DryRun: dry}
	rep, err := r.Run(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ev := range rep.Events {
		e.t.Log(ev)
	}
	return rep
}

func only(t *testing.T, rep repair.Report, k repair.Kind) repair.Event {
	t.Helper()
	if len(rep.Events) != 1 || rep.Events[0].Kind != k {
		t.Fatalf("want exactly one %s event, got %v", k, rep.Events)
	}
	return rep.Events[0]
}

func consumer(ref ipaddress.ParentRef, addrs ...string) repair.Consumer {
	return repair.Consumer{Ref: ref, Addrs: addrs}
}

// Row 1: consumer address not parsable → report.
func TestConsumerAddressNotParsableIsReported(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	for _, bad := range []string{"10.96.0.300", "010.96.0.1", "2001:db8:0:0::1", "::ffff:10.96.0.1", "fe80::1%eth0", ""} {
		rep := e.run(false, consumer(svc("bad"), bad))
		ev := only(t, rep, repair.Invalid)
		if ev.Addr != bad || ev.Ref != svc("bad") || ev.Err == nil || !errors.Is(ev.Err, ipaddress.ErrInvalid) {
			t.Errorf("%q: event %+v", bad, ev)
		}
		if ev.ErrorType() != "invalid" {
			t.Errorf("ErrorType = %q", ev.ErrorType())
		}
	}
	if n := e.records(); n != 0 {
		t.Errorf("%d records created for invalid addresses", n)
	}
}

// Row 1, and the rule that repair frees no address a consumer holds: an
// address a consumer lists in a legacy spelling is reported Invalid, and its
// record is kept, whether it names that consumer or another.
func TestAnAddressHeldInALegacySpellingKeepsItsRecord(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/24", "fd00::/64"}})
	e.allocate("10.96.0.5", svc("legacy"))
	e.allocate("fd00::5", svc("legacy"))
	e.allocate("fd00::7", svc("legacy"))
	e.allocate("10.96.0.6", svc("other"))
	e.clock.Advance(time.Hour)
	rep := e.run(false, consumer(svc("legacy"), "010.096.000.005", "FD00::5", "fd00::00007", "10.96.0.06"), consumer(svc("other")))
	for _, ev := range rep.Events {
		if ev.Kind != repair.Invalid {
			t.Errorf("unexpected %s event: %v", ev.Kind, ev)
		}
	}
	if n := len(rep.Events); n != 4 {
		t.Errorf("%d events, want the 4 Invalid ones", n)
	}
	for _, a := range []string{"10.96.0.5", "fd00::5", "fd00::7", "10.96.0.6"} {
		if _, ok := e.record(a); !ok {
			t.Errorf("the record of %s, held in a legacy spelling, was deleted", a)
		}
	}
}

// Row 2: consumer address outside every CIDR → ClusterIPOutOfRange.
func TestConsumerAddressOutsideEveryCIDRIsReportedClusterIPOutOfRange(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	// 10.96.0.0 and 10.96.0.15 are the network and broadcast addresses:
	// host containment says no CIDR offers them.
	for _, out := range []string{"192.168.0.1", "10.96.0.16", "10.96.0.0", "10.96.0.15", "2001:db8::1"} {
		rep := e.run(false, consumer(svc("x"), out))
		ev := only(t, rep, repair.OutOfRange)
		if ev.Addr != out || !strings.Contains(ev.Message, "ClusterIPOutOfRange") || ev.Kind.Reason() != "ClusterIPOutOfRange" {
			t.Errorf("%s: %+v", out, ev)
		}
		if ev.ErrorType() != "outOfRange" {
			t.Errorf("ErrorType = %q", ev.ErrorType())
		}
	}
	if n := e.records(); n != 0 {
		t.Errorf("%d records created for out-of-range addresses", n)
	}
}

// Row 3: consumer address without a record → create it, "not allocated;
// repairing". Also in the reserved lower band, and inside a Terminating
// CIDR (whose removal then waits for it).
func TestConsumerAddressWithoutRecordIsCreatedNotAllocatedRepairing(t *testing.T) {
	e := newEnv(t, map[string][]string{
		"kubernetes": {"10.96.0.0/24"}, // lower band .1-.16
		"old":        {"192.96.0.0/24"},
	})
	e.allocate("192.96.0.7", svc("keep")) // holds "old" while it is deleted
	if err := e.a.DeleteCIDR(e.ctx, "old"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(old) = %v", err)
	}
	rep := e.run(false,
		consumer(svc("kubernetes"), "10.96.0.1"),            // lower band
		consumer(svc("dns"), "10.96.0.200"),                 // upper band
		consumer(svc("keep"), "192.96.0.7"),                 // consistent
		consumer(svc("legacy"), "192.96.0.9"),               // only in a Terminating CIDR
		consumer(svc("dual"), "10.96.0.201", "10.96.0.201"), // listed twice: once
	)
	if got := rep.Count(repair.Repaired); got != 4 || len(rep.Events) != 4 {
		t.Fatalf("want 4 Repaired events, got %v", rep.Events)
	}
	for _, c := range []struct {
		addr string
		ref  ipaddress.ParentRef
	}{{"10.96.0.1", svc("kubernetes")}, {"10.96.0.200", svc("dns")}, {"192.96.0.9", svc("legacy")}, {"10.96.0.201", svc("dual")}} {
		r, ok := e.record(c.addr)
		if !ok || r.Parent != c.ref {
			t.Errorf("%s: record %+v, %v; want held by %s", c.addr, r, ok, c.ref)
		}
	}
	for _, ev := range rep.Events {
		if !strings.Contains(ev.Message, "is not allocated; repairing") || ev.ErrorType() != "repair" {
			t.Errorf("event %+v", ev)
		}
	}
	// The repaired address in the Terminating CIDR holds it: releasing the
	// other one does not let it go.
	if err := e.a.Release(e.ctx, netip.MustParseAddr("192.96.0.7")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.GetCIDR("old"); err != nil {
		t.Fatalf("old removed while 192.96.0.9 is held: %v", err)
	}
	// A second pass finds nothing to do.
	if rep := e.run(false, consumer(svc("kubernetes"), "10.96.0.1"), consumer(svc("dns"), "10.96.0.200"),
		consumer(svc("legacy"), "192.96.0.9"), consumer(svc("dual"), "10.96.0.201")); !rep.Clean() {
		t.Errorf("second pass: %v", rep.Events)
	}
}

// Row 4: record whose parent is missing and which is older than 60 s →
// delete ("appears to have leaked: cleaning up"); younger → check again
// later.
func TestRecordWithMissingParentIsDeletedAfterGraceLeak(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	e.allocate("10.96.0.1", svc("kubernetes"))
	e.allocate("10.96.0.5", svc("gone"))
	e.clock.Advance(20 * time.Second)
	cs := []repair.Consumer{consumer(svc("kubernetes"), "10.96.0.1")}

	rep := e.run(false, cs...)
	ev := only(t, rep, repair.LeakPending)
	if ev.Addr != "10.96.0.5" || ev.Ref != svc("gone") || ev.ErrorType() != "" {
		t.Errorf("event %+v", ev)
	}
	// The memory store stamps whole seconds: the record may be a second
	// younger than its stamp says, and is treated as if it were; but the
	// age reported is the stamp's (never below zero for a new record).
	if ev.Age < 20*time.Second || ev.Age >= 21*time.Second || strings.Contains(ev.Message, "created -") {
		t.Errorf("Age %v (%q), want the stamp's 20 s", ev.Age, ev.Message)
	}
	if rep.RetryAfter <= 40*time.Second || rep.RetryAfter > 42*time.Second {
		t.Errorf("RetryAfter = %v, want about 41s", rep.RetryAfter)
	}
	if _, ok := e.record("10.96.0.5"); !ok {
		t.Fatal("young record deleted")
	}

	e.clock.Advance(41 * time.Second) // 60 s past the end of its second: not older than the grace yet
	only(t, e.run(false, cs...), repair.LeakPending)

	e.clock.Advance(time.Second)
	rep = e.run(false, cs...)
	ev = only(t, rep, repair.Leak)
	if ev.Addr != "10.96.0.5" || !strings.Contains(ev.Message, "appears to have leaked: cleaning up") || ev.ErrorType() != "leak" {
		t.Errorf("event %+v", ev)
	}
	if rep.RetryAfter != 0 {
		t.Errorf("RetryAfter = %v", rep.RetryAfter)
	}
	if _, ok := e.record("10.96.0.5"); ok {
		t.Error("leaked record kept")
	}
	if _, ok := e.record("10.96.0.1"); !ok {
		t.Error("held record deleted")
	}
}

// Row 5: record whose parent does not hold that address → delete ("wrong
// reference"). A young one waits for the grace period: its parent may not
// have been updated yet with an address just allocated to it.
func TestRecordWhoseParentDoesNotHoldItIsDeletedWrongReference(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.0.0.0/16"}})
	e.allocate("10.0.1.1", svc("test-svc"))
	e.allocate("10.0.1.2", svc("test-svc"))
	cs := []repair.Consumer{consumer(svc("test-svc"), "10.0.1.1")}

	only(t, e.run(false, cs...), repair.WrongReferencePending)
	e.clock.Advance(2 * time.Minute)
	rep := e.run(false, cs...)
	ev := only(t, rep, repair.WrongReference)
	if ev.Addr != "10.0.1.2" || ev.Ref != svc("test-svc") || !strings.Contains(ev.Message, "wrong reference") || ev.Kind.Reason() != "IPAddressWrongReference" {
		t.Errorf("event %+v", ev)
	}
	if _, ok := e.record("10.0.1.2"); ok {
		t.Error("wrongly referenced record kept")
	}
	if _, ok := e.record("10.0.1.1"); !ok {
		t.Error("held record deleted")
	}
}

// A record naming the wrong owner of an address another consumer holds:
// deleted as a wrong reference, then re-created for the holder, in one pass.
func TestRecordOfWrongOwnerIsReplacedForTheHolder(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.0.0.0/16"}})
	e.allocate("10.0.1.1", svc("other"))
	e.clock.Advance(2 * time.Minute)
	rep := e.run(false, consumer(svc("other")), consumer(svc("real"), "10.0.1.1"))
	if len(rep.Events) != 2 || rep.Events[0].Kind != repair.WrongReference || rep.Events[1].Kind != repair.Repaired {
		t.Fatalf("events %v", rep.Events)
	}
	if r, ok := e.record("10.0.1.1"); !ok || r.Parent != svc("real") {
		t.Errorf("record %+v, %v", r, ok)
	}
}

// Row 6: two consumers on one address → report "already allocated",
// change nothing.
func TestTwoConsumersOnOneAddressAlreadyAllocatedChangesNothing(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.0.0.0/16"}})
	e.allocate("10.0.1.1", svc("test-svc2"))
	e.clock.Advance(2 * time.Minute)
	cs := []repair.Consumer{
		consumer(svc("test-svc"), "10.0.1.1", "10.0.1.3"), // 10.0.1.3 held twice too, no record
		consumer(svc("test-svc2"), "10.0.1.1", "10.0.1.3"),
	}
	rep := e.run(false, cs...)
	if rep.Count(repair.Duplicate) != 2 || len(rep.Events) != 2 {
		t.Fatalf("events %v", rep.Events)
	}
	for _, ev := range rep.Events {
		if !strings.Contains(ev.Message, "already allocated") || len(ev.Holders) != 2 || ev.ErrorType() != "duplicate" {
			t.Errorf("event %+v", ev)
		}
	}
	if r, ok := e.record("10.0.1.1"); !ok || r.Parent != svc("test-svc2") {
		t.Errorf("record changed: %+v %v", r, ok)
	}
	if _, ok := e.record("10.0.1.3"); ok {
		t.Error("record created for a duplicate")
	}
}

// A dry run reports what a real pass would do, and changes nothing.
func TestDryRunChangesNothing(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	e.allocate("10.96.0.1", svc("kubernetes"))
	e.allocate("10.96.0.5", svc("gone"))
	e.allocate("10.96.0.6", svc("kubernetes"))
	e.allocate("10.96.0.7", svc("wrong"))
	e.clock.Advance(2 * time.Minute)
	cs := []repair.Consumer{
		consumer(svc("kubernetes"), "10.96.0.1"),
		consumer(svc("dns"), "10.96.0.10", "10.96.0.6"), // missing; held by a wrong record
		consumer(svc("bad"), "nonsense", "192.168.1.1"),
		consumer(svc("a"), "10.96.0.12"),
		consumer(svc("b"), "10.96.0.12"),
		consumer(svc("wrong")),
		consumer(svc("real"), "10.96.0.7"),
	}
	before, _ := e.st.ListAddresses(e.ctx)
	dry := e.run(true, cs...)
	after, _ := e.st.ListAddresses(e.ctx)
	if len(before) != len(after) {
		t.Fatalf("dry run changed the records: %d → %d", len(before), len(after))
	}
	for i := range before {
		if before[i] != after[i] {
			t.Fatalf("dry run changed %v to %v", before[i], after[i])
		}
	}
	if !dry.DryRun {
		t.Error("report not marked DryRun")
	}
	// The real pass finds the same.
	real := e.run(false, cs...)
	if len(real.Events) != len(dry.Events) {
		t.Fatalf("dry run found %d, real pass %d", len(dry.Events), len(real.Events))
	}
	for i := range real.Events {
		d, r := dry.Events[i], real.Events[i]
		if d.Kind != r.Kind || d.Addr != r.Addr || d.Ref != r.Ref {
			t.Errorf("event %d: dry %v, real %v", i, d, r)
		}
		if changes := d.Kind == repair.Repaired || d.Kind == repair.Leak || d.Kind == repair.WrongReference; changes != d.DryRun {
			t.Errorf("event %v: DryRun = %v", d, d.DryRun)
		}
	}
	for _, k := range []repair.Kind{repair.Leak, repair.WrongReference, repair.Repaired, repair.Invalid, repair.OutOfRange, repair.Duplicate} {
		if real.Count(k) == 0 {
			t.Errorf("no %s event", k)
		}
	}
	if r, ok := e.record("10.96.0.6"); !ok || r.Parent != svc("dns") {
		t.Errorf("10.96.0.6: %+v %v", r, ok)
	}
}

type recorder struct {
	events []repair.Event
	done   int
	err    error
}

func (r *recorder) RepairEvent(e repair.Event)            { r.events = append(r.events, e) }
func (r *recorder) RepairDone(_ repair.Report, err error) { r.done++; r.err = err }

// The observer sees every finding of real passes, none of dry runs.
func TestObserverSeesRealPassesOnly(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	obs := &recorder{}
	r := &repair.Repairer{Allocator: e.a, Consumers: repair.NewStatic(consumer(svc("x"), "10.96.0.3", "bad")), Now: e.clock.Now, Observer: obs, DryRun: true}
	if _, err := r.Run(e.ctx); err != nil {
		t.Fatal(err)
	}
	if len(obs.events) != 0 || obs.done != 0 {
		t.Fatalf("dry run observed: %v", obs.events)
	}
	r.DryRun = false
	if _, err := r.Run(e.ctx); err != nil {
		t.Fatal(err)
	}
	if len(obs.events) != 2 || obs.done != 1 || obs.err != nil {
		t.Fatalf("observed %v, done %d, err %v", obs.events, obs.done, obs.err)
	}
}

type failing struct{ repair.Consumers }

func (failing) List(context.Context) ([]repair.Consumer, error) {
	return nil, errors.New("apiserver down")
}

// A pass that cannot list the consumers fails and changes nothing.
func TestListErrorFailsThePass(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	e.allocate("10.96.0.5", svc("x"))
	e.clock.Advance(time.Hour)
	obs := &recorder{}
	r := &repair.Repairer{Allocator: e.a, Consumers: failing{}, Now: e.clock.Now, Observer: obs}
	if _, err := r.Run(e.ctx); err == nil || !strings.Contains(err.Error(), "apiserver down") {
		t.Fatalf("Run = %v", err)
	}
	if obs.done != 1 || obs.err == nil {
		t.Errorf("observer: done %d err %v", obs.done, obs.err)
	}
	if _, ok := e.record("10.96.0.5"); !ok {
		t.Error("record deleted by a failed pass")
	}
}

type lateConsumers struct {
	*repair.Static
	late ipaddress.ParentRef
}

func (l lateConsumers) Exists(ctx context.Context, ref ipaddress.ParentRef) (bool, error) {
	if ref == l.late {
		return true, nil
	}
	return l.Static.Exists(ctx, ref)
}

// A record whose parent was not listed but exists (created after the
// listing) is left for the next pass, however old.
func TestParentCreatedAfterListingIsNotALeak(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	e.allocate("10.96.0.5", svc("late"))
	e.clock.Advance(time.Hour)
	r := &repair.Repairer{Allocator: e.a, Consumers: lateConsumers{repair.NewStatic(), svc("late")}, Now: e.clock.Now}
	rep, err := r.Run(e.ctx)
	if err != nil || !rep.Clean() {
		t.Fatalf("Run = %v, %v", rep.Events, err)
	}
}

// reallocating is a consumer source that, asked whether the leaked owner
// exists, first lets the address go to someone else: the record the pass
// listed is replaced while the pass runs.
type reallocating struct {
	*repair.Static
	e     *env
	addr  string
	taker ipaddress.ParentRef
}

func (r reallocating) Exists(ctx context.Context, ref ipaddress.ParentRef) (bool, error) {
	if err := r.e.a.Release(ctx, netip.MustParseAddr(r.addr)); err != nil {
		return false, err
	}
	r.e.allocate(r.addr, r.taker)
	return false, nil
}

// A leak is cleaned up only if the store still holds the very record the
// pass listed: the delete is conditional on its revision, so an address
// released and allocated again meanwhile keeps its new owner.
// A stamp of whole seconds stands for any time in its second: a record must
// not be taken for older than it can be, or a short grace would delete it
// younger than the grace.
func TestAWholeSecondStampIsNotTakenForOlderThanTheRecordCanBe(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	e.clock.Advance(900 * time.Millisecond)
	e.allocate("10.96.0.5", svc("gone")) // stamped with the whole second, 900 ms earlier
	e.clock.Advance(300 * time.Millisecond)
	r := &repair.Repairer{Allocator: e.a, Consumers: repair.NewStatic(), Now: e.clock.Now, LeakGrace: time.Second}
	rep, err := r.Run(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	only(t, rep, repair.LeakPending)
	if _, ok := e.record("10.96.0.5"); !ok {
		t.Fatal("a record 300 ms old was deleted under a grace of 1 s")
	}
}

// A negative LeakGrace is no grace at all: a leak and a wrong reference
// are cleaned up by the first pass, whatever the record's age, even one
// stamped in the pass's own second (which the rule above would otherwise
// take for up to a second younger than now).
func TestNoGraceCleansUpARecordOfThisVerySecond(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	e.clock.Advance(400 * time.Millisecond)
	e.allocate("10.96.0.5", svc("gone"))
	e.allocate("10.96.0.6", svc("moved"))
	r := &repair.Repairer{Allocator: e.a, Consumers: repair.NewStatic(consumer(svc("moved"), "10.96.0.7")),
		Now: e.clock.Now, LeakGrace: -1}
	rep, err := r.Run(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range rep.Events {
		if ev.Kind == repair.LeakPending || ev.Kind == repair.WrongReferencePending {
			t.Errorf("with no grace: %v", ev)
		}
	}
	for _, addr := range []string{"10.96.0.5", "10.96.0.6"} {
		if _, ok := e.record(addr); ok {
			t.Errorf("%s kept by a pass with no grace", addr)
		}
	}
	if rep.RetryAfter != 0 {
		t.Errorf("RetryAfter %v with no grace, want 0", rep.RetryAfter)
	}
}

func TestLeakReallocatedDuringThePassIsKept(t *testing.T) {
	e := newEnv(t, map[string][]string{"kubernetes": {"10.96.0.0/28"}})
	e.allocate("10.96.0.5", svc("gone"))
	e.clock.Advance(time.Hour)
	r := &repair.Repairer{Allocator: e.a, Consumers: reallocating{repair.NewStatic(), e, "10.96.0.5", svc("new")}, Now: e.clock.Now}
	if _, err := r.Run(e.ctx); err != nil {
		t.Fatal(err)
	}
	rec, ok := e.record("10.96.0.5")
	if !ok || rec.Parent != svc("new") {
		t.Fatalf("record of 10.96.0.5 = %+v, %v; want it held by the new owner", rec, ok)
	}
}

// countingObserver counts the allocation attempts that failed.
type countingObserver struct {
	mu     sync.Mutex
	failed []allocator.AllocationEvent
}

func (o *countingObserver) Allocated(ev allocator.AllocationEvent) {
	if ev.Err != nil {
		o.mu.Lock()
		o.failed = append(o.failed, ev)
		o.mu.Unlock()
	}
}

// Repairing an address that only a Terminating CIDR holds is no failed
// allocation: the allocator's error metrics must not count one.
func TestRepairInsideATerminatingCIDRCountsNoAllocationError(t *testing.T) {
	ctx := context.Background()
	obs := &countingObserver{}
	a, err := allocator.New(ctx, memory.New(), allocator.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "old", netip.MustParsePrefix("192.96.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, netip.MustParseAddr("192.96.0.7"), svc("keep")); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCIDR(ctx, "old"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(old) = %v", err)
	}
	r := &repair.Repairer{Allocator: a, Consumers: repair.NewStatic(consumer(svc("keep"), "192.96.0.7"), consumer(svc("legacy"), "192.96.0.9"))}
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	only(t, rep, repair.Repaired)
	if len(obs.failed) != 0 {
		t.Fatalf("the repair counted failed allocations: %+v", obs.failed)
	}
}

// SPEC §1: a ParentRef needs Resource and Name (DNS names). Every write
// path of the allocator (Allocate, Restore) refuses an invalid owner; a
// repair pass must not store a record whose parent no allocation could
// have named, not even by handing a wrongly owned record to a consumer
// that holds the address.
func TestRepairNeverStoresARecordWithAnInvalidParent(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	st := memory.New(memory.WithClock(func() time.Time { return now }))
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "kubernetes", netip.MustParsePrefix("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	x := netip.MustParseAddr("10.0.0.7")
	if _, err := a.Allocate(ctx, x, svc("gone")); err != nil {
		t.Fatal(err)
	}
	bad := []ipaddress.ParentRef{
		{Resource: "", Namespace: "default", Name: "no-resource"},
		{Resource: "services", Namespace: "default", Name: "Not_A_DNS_Name"},
	}
	for _, ref := range bad {
		if err := ref.Validate(); err == nil {
			t.Fatalf("%+v is valid", ref)
		}
		// What the allocator says about this owner anywhere else.
		if _, err := a.Restore(ctx, netip.MustParseAddr("10.0.0.9"), ref); err == nil {
			t.Fatalf("Restore accepted owner %+v", ref)
		}
	}
	for _, ref := range bad {
		// The wrongly owned record, again if the last pass deleted it.
		if _, err := st.GetAddress(ctx, x); errors.Is(err, store.ErrNotFound) {
			if _, err := a.Allocate(ctx, x, svc("gone")); err != nil {
				t.Fatal(err)
			}
		}
		rec, err := st.GetAddress(ctx, x)
		if err != nil {
			t.Fatal(err)
		}
		r := &repair.Repairer{Allocator: a, LeakGrace: -1,
			Consumers: repair.NewStatic(repair.Consumer{Ref: ref, Addrs: []string{x.String()}})}
		rep, err := r.Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got, gerr := st.GetAddress(ctx, x)
		if gerr == nil && got.Parent.Validate() != nil {
			t.Errorf("repair stored %s for parent %+v (invalid: %v), taken from %+v; events %v",
				x, got.Parent, got.Parent.Validate(), rec.Parent, rep.Events)
		}
	}
}
