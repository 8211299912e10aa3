package allocator_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// Uniqueness: ReleaseRecords frees a record only if the store still holds
// it as listed. Of the records an owner was listed with, one released
// since is ErrNotFound, one released and given to another owner since is
// ErrConflict and stays that owner's; a record that is no address's is
// refused as invalid, and one given twice is released once.
func TestReleaseRecordsFreesOnlyRecordsStillHeldAsListed(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"kubernetes=10.96.0.0/24"})
	listed := heldByOld(t, a)
	gone, moved := ip("10.96.0.6"), ip("10.96.0.7")
	if err := a.Release(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, moved); err != nil {
		t.Fatal(err)
	}
	mustStatic(t, a, moved.String(), "web")

	recs := slices.Concat(listed, []ipaddress.IPAddress{{Parent: svc("old")}, listed[0]})
	errs := a.ReleaseRecords(ctx, recs)
	if len(errs) != len(recs) {
		t.Fatalf("ReleaseRecords of %d records gave %d outcomes", len(recs), len(errs))
	}
	for i, want := range []error{nil, store.ErrNotFound, store.ErrConflict, nil, ipaddress.ErrInvalid, store.ErrNotFound} {
		if got := errs[i]; (want == nil) != (got == nil) || !errors.Is(got, want) {
			t.Errorf("record %d (%s of %s): %v, want %v", i, recs[i].Addr, recs[i].Parent, got, want)
		}
	}
	for _, addr := range []netip.Addr{ip("10.96.0.5"), gone, ip("10.96.0.8")} {
		if _, err := st.GetAddress(ctx, addr); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s after ReleaseRecords: %v, want it free", addr, err)
		}
	}
	if rec, err := st.GetAddress(ctx, moved); err != nil || rec.Parent != svc("web") {
		t.Errorf("%s, given to web after the listing: %+v, %v; want it web's", moved, rec, err)
	}
}

// failingDelete is a store whose conditional delete of one address fails,
// as a store that cannot be reached for one write.
type failingDelete struct {
	store.Store
	addr netip.Addr
	err  error
}

func (s *failingDelete) DeleteAddressAt(ctx context.Context, addr netip.Addr, rev int64) (ipaddress.IPAddress, int64, error) {
	if addr == s.addr {
		return ipaddress.IPAddress{}, 0, s.err
	}
	return s.Store.DeleteAddressAt(ctx, addr, rev)
}

// A release that fails does not stop the others, in ReleaseRecords and in
// ReleaseOwner (a pod's teardown frees all it can): the failure is that
// record's outcome, and ReleaseOwner returns what it released with it.
func TestReleaseRecordsGoesOnPastAFailedRelease(t *testing.T) {
	ctx := context.Background()
	other, st := newAllocator(t, []string{"kubernetes=10.96.0.0/24"})
	failed := errors.New("store unreachable")
	stuck := ip("10.96.0.6")
	a, err := allocator.New(ctx, &failingDelete{Store: st, addr: stuck, err: failed})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	held := []netip.Addr{ip("10.96.0.5"), stuck, ip("10.96.0.7")}
	for _, addr := range held {
		mustStatic(t, other, addr.String(), "old")
	}
	recs, err := a.AddressesOf(ctx, svc("old"))
	if err != nil {
		t.Fatal(err)
	}
	if errs := a.ReleaseRecords(ctx, recs[:2]); errs[0] != nil || !errors.Is(errs[1], failed) {
		t.Fatalf("ReleaseRecords(%s, %s) = %v; want nil and %v", recs[0].Addr, recs[1].Addr, errs, failed)
	}
	released, err := a.ReleaseOwner(ctx, svc("old"))
	if !errors.Is(err, failed) || !slices.Equal(released, []netip.Addr{held[2]}) {
		t.Fatalf("ReleaseOwner(old) = %v, %v; want [%s] and %v", released, err, held[2], failed)
	}
	for _, addr := range []netip.Addr{held[0], held[2]} {
		if _, err := st.GetAddress(ctx, addr); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s: %v, want it released", addr, err)
		}
	}
	if _, err := st.GetAddress(ctx, stuck); err != nil {
		t.Errorf("%s, whose release failed: %v, want it held", stuck, err)
	}
}

// ReleaseRecords changes nothing once its context has ended, nor on a
// closed allocator: every record gets that error.
func TestReleaseRecordsOnAnEndedContextOrAClosedAllocatorReleasesNothing(t *testing.T) {
	a, st := newAllocator(t, []string{"kubernetes=10.96.0.0/24"})
	mustStatic(t, a, "10.96.0.5", "old")
	mustStatic(t, a, "10.96.0.6", "old")
	recs, err := a.AddressesOf(context.Background(), svc("old"))
	if err != nil {
		t.Fatal(err)
	}
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want error
		then func()
	}{
		{"ended context", ended, context.Canceled, func() {}},
		{"closed allocator", context.Background(), allocator.ErrClosed, func() { _ = a.Close() }},
	} {
		tc.then()
		errs := a.ReleaseRecords(tc.ctx, recs)
		for i, err := range errs {
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: record %d (%s): %v, want %v", tc.name, i, recs[i].Addr, err, tc.want)
			}
		}
		for _, r := range recs {
			if _, err := st.GetAddress(context.Background(), r.Addr); err != nil {
				t.Errorf("%s: %s: %v, want it held", tc.name, r.Addr, err)
			}
		}
	}
}

// SPEC §4: a record released through ReleaseRecords re-checks the
// Terminating CIDR it held, which goes with its last address.
func TestReleaseRecordsLetsATerminatingCIDRGo(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"kubernetes=10.96.0.0/24", "old=10.97.0.0/24"})
	mustStatic(t, a, "10.97.0.5", "web")
	recs, err := a.AddressesOf(ctx, svc("web"))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCIDR(ctx, "old"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(old) holding 10.97.0.5: %v, want ErrDeletionBlocked", err)
	}
	if errs := a.ReleaseRecords(ctx, recs); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if c, err := st.GetCIDR(ctx, "old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("CIDR old after its last address was released: %+v, %v; want it removed", c, err)
	}
}

// RestoreRecords gives each record Restore's outcome (SPEC §3, §4): the
// address written back to its owner, ErrAllocated when another owner holds
// it, ErrTerminating when only a Terminating CIDR holds it, ErrInvalid for
// an owner Allocate refuses; the others are written all the same.
func TestRestoreRecordsGivesEachRecordRestoresOutcome(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"kubernetes=10.96.0.0/24", "old=10.97.0.0/24"})
	mustStatic(t, a, "10.96.0.6", "web")
	mustStatic(t, a, "10.97.0.5", "keep")
	if err := a.DeleteCIDR(ctx, "old"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(old) holding 10.97.0.5: %v, want ErrDeletionBlocked", err)
	}
	recs := []ipaddress.IPAddress{
		{Addr: ip("10.96.0.5"), Parent: svc("a")},
		{Addr: ip("10.96.0.6"), Parent: svc("b")},
		{Addr: ip("10.97.0.9"), Parent: svc("c")},
		{Addr: ip("10.96.0.7"), Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default"}}, // no name
		{Addr: ip("10.96.0.8"), Parent: svc("d")},
	}
	errs := a.RestoreRecords(ctx, recs)
	for i, want := range []error{nil, allocator.ErrAllocated, allocator.ErrTerminating, ipaddress.ErrInvalid, nil} {
		if got := errs[i]; (want == nil) != (got == nil) || !errors.Is(got, want) {
			t.Errorf("%s of %s: %v, want %v", recs[i].Addr, recs[i].Parent, got, want)
		}
	}
	for i, want := range []ipaddress.ParentRef{svc("a"), svc("web"), {}, {}, svc("d")} {
		rec, err := st.GetAddress(ctx, recs[i].Addr)
		if want == (ipaddress.ParentRef{}) {
			if !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: %+v, %v; want no record", recs[i].Addr, rec, err)
			}
		} else if err != nil || rec.Parent != want {
			t.Errorf("%s: %+v, %v; want it %s's", recs[i].Addr, rec, err, want)
		}
	}
}

// Uniqueness: ReplaceRecords gives a record to its new owner only if the
// store still holds it as listed, the address never free in between. Of
// an owner's records, one released since is ErrNotFound, one released and
// given to another since is ErrConflict and stays that one's; an owner
// Allocate refuses is ErrInvalid, and so is every record when the owners
// do not match the records one for one.
func TestReplaceRecordsGivesOnlyRecordsStillHeldAsListed(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"kubernetes=10.96.0.0/24"})
	listed := heldByOld(t, a)
	for _, errs := range [][]error{
		a.ReplaceRecords(ctx, listed, []ipaddress.ParentRef{svc("new")}),
		a.ReplaceRecords(ctx, listed[:1], nil),
	} {
		for i, err := range errs {
			if !errors.Is(err, ipaddress.ErrInvalid) {
				t.Errorf("ReplaceRecords with owners not one for one: record %d: %v, want ErrInvalid", i, err)
			}
		}
	}
	if err := a.Release(ctx, listed[1].Addr); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, listed[2].Addr); err != nil {
		t.Fatal(err)
	}
	mustStatic(t, a, listed[2].Addr.String(), "web")

	to := []ipaddress.ParentRef{svc("new"), svc("new"), svc("new"), {Resource: "services", Namespace: "default"}}
	errs := a.ReplaceRecords(ctx, listed, to)
	for i, want := range []error{nil, store.ErrNotFound, store.ErrConflict, ipaddress.ErrInvalid} {
		if got := errs[i]; (want == nil) != (got == nil) || !errors.Is(got, want) {
			t.Errorf("%s to %s: %v, want %v", listed[i].Addr, to[i], got, want)
		}
	}
	for addr, want := range map[netip.Addr]ipaddress.ParentRef{listed[0].Addr: svc("new"), listed[2].Addr: svc("web"), listed[3].Addr: svc("old")} {
		if rec, err := st.GetAddress(ctx, addr); err != nil || rec.Parent != want {
			t.Errorf("%s after ReplaceRecords: %+v, %v; want it %s's", addr, rec, err, want)
		}
	}
	if _, err := st.GetAddress(ctx, listed[1].Addr); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("%s, released before ReplaceRecords: %v, want it free", listed[1].Addr, err)
	}
}

// heldByOld allocates 10.96.0.5-8 to services/default/old and returns its
// records as AddressesOf lists them, in address order.
func heldByOld(t *testing.T, a *allocator.Allocator) []ipaddress.IPAddress {
	t.Helper()
	for _, addr := range []string{"10.96.0.5", "10.96.0.6", "10.96.0.7", "10.96.0.8"} {
		mustStatic(t, a, addr, "old")
	}
	listed, err := a.AddressesOf(context.Background(), svc("old"))
	if err != nil || len(listed) != 4 {
		t.Fatalf("AddressesOf(old) = %+v, %v", listed, err)
	}
	slices.SortFunc(listed, func(x, y ipaddress.IPAddress) int { return x.Addr.Compare(y.Addr) })
	return listed
}
