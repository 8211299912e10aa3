package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// tinyTimeout returns the i-th of the timeouts, 0 to 2.15 ms, that end a
// create's ctx before its transaction is sent, while it is in flight (etcd
// syncing its entry) or after it was answered.
func tinyTimeout(i int) time.Duration { return time.Duration(i%44) * 50 * time.Microsecond }

// The timed-out tests make at least minTimedOut calls, and more, up to
// maxTimedOut, until wantLate of them were reported done after their ctx
// ended: the case they are about.
const (
	minTimedOut = 200
	maxTimedOut = 2000
	wantLate    = 5
)

// TestATimedOutCreateIsReportedDoneNotLeaked creates addresses with ctx
// deadlines shorter than a create takes. A create whose deadline passes
// while its transaction is in flight may still be applied; the store must
// then report it as done, so every create that returned an error has left
// no record, and every one that succeeded has its record, right after the
// call and once the store settled.
func TestATimedOutCreateIsReportedDoneNotLeaked(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	c := startCluster(t, 1)
	s, err := New(c.newClient(t), WithPrefix("/readback"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "timed-out"}
	created := map[netip.Addr]int64{} // the successes, with their revisions
	var failed []netip.Addr
	late := 0 // reported done after their ctx ended
	for i := 0; i < maxTimedOut && (i < minTimedOut || late < wantLate); i++ {
		a := v4(i + 1)
		cctx, cancel := context.WithTimeout(ctx, tinyTimeout(i))
		recs, err := s.CreateAddresses(cctx, []ipaddress.IPAddress{{Addr: a, Parent: owner}})
		if err == nil && cctx.Err() != nil {
			late++
		}
		cancel()
		got, gerr := s.GetAddress(ctx, a)
		switch {
		case errors.Is(err, store.ErrOutcomeUnknown):
			// Every answer comes back here: a create fails only when its
			// ctx ended before it was sent, which is no unknown.
			t.Fatalf("create %d (timeout %v) of %s: %v, its outcome unknown with no answer lost", i, tinyTimeout(i), a, err)
		case err != nil && !errors.Is(gerr, store.ErrNotFound):
			t.Fatalf("create %d (timeout %v) of %s failed (%v), but its record exists: %+v, %v", i, tinyTimeout(i), a, err, got, gerr)
		case err != nil:
			failed = append(failed, a)
		case gerr != nil || got.Revision != recs[0].Revision || got.Parent != owner:
			t.Fatalf("create %d of %s succeeded at revision %d, but reads %+v, %v", i, a, recs[0].Revision, got, gerr)
		default:
			created[a] = recs[0].Revision
		}
	}
	if late < wantLate {
		t.Fatalf("only %d of %d creates were reported done after their ctx ended: the test did not exercise the case", late, len(created)+len(failed))
	}
	t.Logf("%d creates succeeded (%d after their ctx ended, %d read back), %d failed", len(created), late, s.readBacks.Load(), len(failed))

	// Settle: a create through the same client is ordered after every
	// entry its earlier requests put in the leader's log; then no create
	// reported failed may have been applied late.
	last := v4(maxTimedOut + 1)
	mustCreate(t, ctx, s, last)
	all, err := s.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		if r.Addr == last {
			continue
		}
		if rev, ok := created[r.Addr]; !ok || rev != r.Revision {
			t.Errorf("after settling, %s has a record at revision %d; its create returned %v", r.Addr, r.Revision, func() any {
				if ok {
					return fmt.Sprintf("revision %d", rev)
				}
				return "an error"
			}())
		}
	}
	if len(all) != len(created)+1 {
		t.Errorf("after settling: %d records, want the %d created and %s", len(all), len(created), last)
	}
}

// TestATimedOutAllocationIsReportedOrFree runs AllocateNext on the etcd
// store with ctx deadlines shorter than an allocation takes. The caller must
// be told of every address allocated to it: an allocation that returned an
// error leaves its owner with no address (else the address leaks until
// repair), one that succeeded leaves it exactly the address returned.
func TestATimedOutAllocationIsReportedOrFree(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	c := startCluster(t, 1)
	s, err := New(c.newClient(t), WithPrefix("/readback-alloc"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "kubernetes", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}}); err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	held := map[ipaddress.ParentRef]netip.Addr{} // the successes
	calls, late := 0, 0
	for ; calls < maxTimedOut && (calls < minTimedOut || late < wantLate); calls++ {
		owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("svc-%d", calls)}
		cctx, cancel := context.WithTimeout(ctx, tinyTimeout(calls))
		rec, err := a.AllocateNext(cctx, ipaddress.IPv4, owner)
		if err == nil && cctx.Err() != nil {
			late++
		}
		cancel()
		got, oerr := s.AddressesOf(ctx, owner)
		if oerr != nil {
			t.Fatal(oerr)
		}
		switch {
		case errors.Is(err, store.ErrOutcomeUnknown):
			t.Fatalf("AllocateNext for %s: %v, its outcome unknown with no answer lost", owner, err)
		case err != nil && len(got) > 0:
			t.Fatalf("AllocateNext for %s failed (%v), but %s is allocated to it", owner, err, got[0].Addr)
		case err == nil && (len(got) != 1 || got[0].Addr != rec.Addr):
			t.Fatalf("AllocateNext for %s returned %s, but it holds %+v", owner, rec.Addr, got)
		case err == nil:
			held[owner] = rec.Addr
		}
	}
	if late < wantLate {
		t.Fatalf("only %d of %d allocations were reported done after their ctx ended: the test did not exercise the case", late, calls)
	}
	t.Logf("%d of %d allocations succeeded (%d after their ctx ended, %d read back)", len(held), calls, late, s.readBacks.Load())

	// Settle as in TestATimedOutCreateIsReportedDoneNotLeaked, then every
	// record must be one that a caller was handed.
	if _, err := a.AllocateNext(ctx, ipaddress.IPv4, ipaddress.ParentRef{Resource: "services", Name: "last"}); err != nil {
		t.Fatal(err)
	}
	all, err := s.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var leaked []string
	for _, r := range all {
		if addr, ok := held[r.Parent]; r.Parent.Name != "last" && (!ok || addr != r.Addr) {
			leaked = append(leaked, fmt.Sprintf("%s to %s", r.Addr, r.Parent))
		}
	}
	slices.Sort(leaked)
	if len(leaked) > 0 || len(all) != len(held)+1 {
		t.Errorf("after settling: %d records for %d allocations handed out (and the last); allocated to no one told: %v", len(all), len(held), leaked)
	}
}
