package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// revisionWatcher keeps the revision of the snapshot a store's Watch
// starts with.
type revisionWatcher struct{ rev int64 }

func (w *revisionWatcher) Reset(s store.Snapshot) { w.rev = s.Revision }
func (*revisionWatcher) Apply(store.Event)        {}

// writtenState is what a dry run must leave as it found it: the store's
// revision and records, owner's records, and the usage of every CIDR, in
// a form that two of compare with ==.
func writtenState(t *testing.T, a *allocator.Allocator, st *memory.Store, owner ipaddress.ParentRef) string {
	t.Helper()
	ctx := context.Background()
	var w revisionWatcher
	wctx, cancel := context.WithCancel(ctx)
	err := st.Watch(wctx, &w) // the memory store gives the snapshot before it returns
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	recs, err := st.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(recs, func(x, y ipaddress.IPAddress) int { return x.Addr.Compare(y.Addr) })
	owned, err := a.AddressesOf(ctx, owner)
	if err != nil {
		t.Fatal(err)
	}
	var usage []allocator.CIDRUsage
	for _, c := range a.CIDRs() {
		u, err := a.Usage(c.Name)
		if err != nil {
			t.Fatal(err)
		}
		usage = append(usage, u)
	}
	return fmt.Sprintf("revision %d\nrecords %v\n%s holds %v\nusage %v", w.rev, recs, owner, owned, usage)
}

// wroteNothing fails t if the state changed since before, which
// writtenState gave.
func wroteNothing(t *testing.T, what string, before string, a *allocator.Allocator, st *memory.Store, owner ipaddress.ParentRef) {
	t.Helper()
	if after := writtenState(t, a, st, owner); after != before {
		t.Errorf("%s wrote:\nbefore:\n%s\nafter:\n%s", what, before, after)
	}
}

// sameError fails t unless the dry run's error and the real call's are
// alike: both nil, or both want with one message.
func sameError(t *testing.T, what string, dry, real, want error) {
	t.Helper()
	switch {
	case want == nil && (dry != nil || real != nil):
		t.Errorf("%s: dry run %v, real call %v; want no error", what, dry, real)
	case want != nil && (!errors.Is(dry, want) || !errors.Is(real, want)):
		t.Errorf("%s: dry run %v, real call %v; want both %v", what, dry, real, want)
	case dry != nil && real != nil && dry.Error() != real.Error():
		t.Errorf("%s: the dry run says %q, the real call %q", what, dry, real)
	}
}

// The dry run of AllocateDualStack answers, pair or error, what the real
// call then does, and writes nothing; on an error both addresses are zero.
func TestDryRunAllocateDualStackWritesNothingAndAnswersAsTheCallWould(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"c=10.0.0.0/28,fd00::/124"}, allocator.WithStrategy(allocator.Sequential()))
	mustStatic(t, a, "10.0.0.5", "taken")
	mustStatic(t, a, "fd00::5", "taken")
	for i, c := range []struct {
		name   string
		v4, v6 netip.Addr
		want   error // nil: a pair, with the static addresses given
	}{
		{name: "a dynamic pair"},
		{name: "a static IPv4 and a dynamic IPv6", v4: ip("10.0.0.9")},
		{name: "a dynamic IPv4 and a static IPv6", v6: ip("fd00::9")},
		{name: "a static pair", v4: ip("10.0.0.10"), v6: ip("fd00::a")},
		{name: "a static IPv6 out of range", v4: ip("10.0.0.11"), v6: ip("fd00::10"), want: allocator.ErrNotInRange},
		{name: "a static IPv4 the store holds", v4: ip("10.0.0.5"), want: allocator.ErrAllocated},
		{name: "a static IPv6 the store holds", v4: ip("10.0.0.11"), v6: ip("fd00::5"), want: allocator.ErrAllocated},
		{name: "an IPv6 address as the IPv4 one", v4: ip("fd00::11"), want: allocator.ErrInvalid},
		{name: "an IPv4 address as the IPv6 one", v4: ip("10.0.0.11"), v6: ip("10.0.0.12"), want: allocator.ErrInvalid},
		{name: "an IPv4-mapped IPv6 address", v6: ip("::ffff:10.0.0.12"), want: allocator.ErrInvalid},
	} {
		owner := svc(fmt.Sprintf("o-%d", i))
		before := writtenState(t, a, st, owner)
		g4, g6, err := a.DryRun().AllocateDualStack(ctx, owner, c.v4, c.v6)
		wroteNothing(t, c.name, before, a, st, owner)
		r4, r6, rerr := a.AllocateDualStack(ctx, owner, c.v4, c.v6)
		sameError(t, c.name, err, rerr, c.want)
		if c.want != nil {
			if g4.IsValid() || g6.IsValid() {
				t.Errorf("%s: the dry run answered %s, %s with %v; want both zero", c.name, g4, g6, err)
			}
			continue
		}
		if !g4.Is4() || !g6.Is6() || (c.v4.IsValid() && g4 != c.v4) || (c.v6.IsValid() && g6 != c.v6) {
			t.Errorf("%s: the dry run answered %s, %s", c.name, g4, g6)
		}
		if g4 != r4.Addr || g6 != r6.Addr {
			t.Errorf("%s: the dry run answered %s, %s; the real call then allocated %s, %s", c.name, g4, g6, r4.Addr, r6.Addr)
		}
	}
	// The wrong family is a FieldError for "address", as documented.
	var fe *ipaddress.FieldError
	if _, _, err := a.DryRun().AllocateDualStack(ctx, svc("w"), ip("fd00::11"), netip.Addr{}); !errors.As(err, &fe) || fe.Field != "address" {
		t.Errorf("dry run with an IPv6 address as the IPv4 one: %v, want a FieldError for \"address\"", err)
	}
}

// Both or neither: when the IPv6 family cannot serve the pair, no CIDR
// serving it (ErrMismatch) or every address taken (ErrFull), the dry run
// answers the real call's error and no address, a static IPv4 one given
// or not, and writes nothing.
func TestDryRunAllocateDualStackAnswersNeitherWhenOneFamilyFails(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, cidr string
		want       error
	}{
		{"no IPv6 CIDR", "c=10.0.0.0/28", allocator.ErrMismatch},
		{"IPv6 full", "c=10.0.0.0/28,fd00::/125", allocator.ErrFull},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, st := newAllocator(t, []string{c.cidr}, allocator.WithStrategy(allocator.Sequential()))
			if c.want == allocator.ErrFull {
				fill(t, a, ipaddress.IPv6, "fill")
			}
			for _, v4 := range []netip.Addr{{}, ip("10.0.0.3")} {
				owner := svc("late")
				before := writtenState(t, a, st, owner)
				g4, g6, err := a.DryRun().AllocateDualStack(ctx, owner, v4, netip.Addr{})
				wroteNothing(t, "a failing dry run", before, a, st, owner)
				if g4.IsValid() || g6.IsValid() {
					t.Errorf("dry run with IPv4 %s = %s, %s, %v; want both zero", v4, g4, g6, err)
				}
				_, _, rerr := a.AllocateDualStack(ctx, owner, v4, netip.Addr{})
				sameError(t, fmt.Sprintf("static IPv4 %s", v4), err, rerr, c.want)
			}
		})
	}
}

// The dry run of EnsureDualStack answers the pair the real call then
// returns, writing nothing: an owner holding neither family gets the pair
// AllocateDualStack would choose; holding one, it and the other family's
// next; holding both, of several of a family, the one of lowest revision,
// then of lowest address.
func TestDryRunEnsureDualStackWritesNothingAndAnswersAsTheCallWould(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"c=10.0.0.0/28,fd00::/124"}, allocator.WithStrategy(allocator.Sequential()))
	check := func(what string, owner ipaddress.ParentRef, want4, want6 netip.Addr) {
		t.Helper()
		before := writtenState(t, a, st, owner)
		g4, g6, err := a.DryRun().EnsureDualStack(ctx, owner)
		wroteNothing(t, what, before, a, st, owner)
		if err != nil || !g4.Is4() || !g6.Is6() || (want4.IsValid() && g4 != want4) || (want6.IsValid() && g6 != want6) {
			t.Errorf("%s: the dry run answered %s, %s, %v; want %s, %s", what, g4, g6, err, want4, want6)
		}
		r4, r6, err := a.EnsureDualStack(ctx, owner)
		if err != nil || r4.Addr != g4 || r6.Addr != g6 {
			t.Errorf("%s: the dry run answered %s, %s; the real call then returned %s, %s, %v", what, g4, g6, r4.Addr, r6.Addr, err)
		}
	}
	next4, _ := a.DryRun().AllocateNext(ctx, ipaddress.IPv4, svc("none"))
	next6, _ := a.DryRun().AllocateNext(ctx, ipaddress.IPv6, svc("none"))
	check("holding neither", svc("none"), next4, next6)

	held4, err := a.EnsureNext(ctx, ipaddress.IPv4, svc("v4-only"))
	if err != nil {
		t.Fatal(err)
	}
	check("holding IPv4 only", svc("v4-only"), held4.Addr, netip.Addr{})
	held6, err := a.EnsureNext(ctx, ipaddress.IPv6, svc("v6-only"))
	if err != nil {
		t.Fatal(err)
	}
	check("holding IPv6 only", svc("v6-only"), netip.Addr{}, held6.Addr)

	pair4, pair6, err := a.AllocateDualStack(ctx, svc("both"), netip.Addr{}, netip.Addr{})
	if err != nil {
		t.Fatal(err)
	}
	check("holding both", svc("both"), pair4.Addr, pair6.Addr)

	// Several of a family: the oldest wins over a lower address made later.
	mustStatic(t, a, "10.0.0.14", "several")
	mustStatic(t, a, "fd00::e", "several")
	mustStatic(t, a, "10.0.0.13", "several")
	mustStatic(t, a, "fd00::d", "several")
	check("holding two of each", svc("several"), ip("10.0.0.14"), ip("fd00::e"))
	// Of one revision (a batch), the lowest address.
	batch := []ipaddress.IPAddress{
		{Addr: ip("10.0.0.12"), Parent: svc("batch")},
		{Addr: ip("10.0.0.11"), Parent: svc("batch")},
		{Addr: ip("fd00::c"), Parent: svc("batch")},
	}
	if _, err := st.CreateAddresses(ctx, batch); err != nil {
		t.Fatal(err)
	}
	check("holding two IPv4 of one revision", svc("batch"), ip("10.0.0.11"), ip("fd00::c"))
}

// An owner holding one family's address gets it back from the dry run
// with the error the other family's allocation would give, worded as the
// real call words it; holding neither, no address and the error.
func TestDryRunEnsureDualStackGivesTheHeldAddressWithTheOtherFamilysError(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name, cidr string
		held, full ipaddress.Family // held by the owner; 0: none; full: the family filled
		want       error
	}{
		{"IPv4 held, no IPv6 CIDR", "c=10.0.0.0/28", ipaddress.IPv4, 0, allocator.ErrMismatch},
		{"none held, no IPv6 CIDR", "c=10.0.0.0/28", 0, 0, allocator.ErrMismatch},
		{"IPv4 held, IPv6 full", "c=10.0.0.0/28,fd00::/125", ipaddress.IPv4, ipaddress.IPv6, allocator.ErrFull},
		{"IPv6 held, IPv4 full", "c=10.0.0.0/29,fd00::/124", ipaddress.IPv6, ipaddress.IPv4, allocator.ErrFull},
		{"none held, IPv6 full", "c=10.0.0.0/28,fd00::/125", 0, ipaddress.IPv6, allocator.ErrFull},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, st := newAllocator(t, []string{c.cidr}, allocator.WithStrategy(allocator.Sequential()))
			owner := svc("pod")
			var held netip.Addr
			if c.held != 0 {
				held = mustNext(t, a, c.held, "pod")
			}
			if c.full != 0 {
				fill(t, a, c.full, "fill")
			}
			before := writtenState(t, a, st, owner)
			g4, g6, err := a.DryRun().EnsureDualStack(ctx, owner)
			wroteNothing(t, "a failing dry run", before, a, st, owner)
			want4, want6 := netip.Addr{}, netip.Addr{}
			switch c.held {
			case ipaddress.IPv4:
				want4 = held
			case ipaddress.IPv6:
				want6 = held
			}
			if g4 != want4 || g6 != want6 {
				t.Errorf("the dry run answered %s, %s with %v; want %s, %s", g4, g6, err, want4, want6)
			}
			r4, r6, rerr := a.EnsureDualStack(ctx, owner)
			sameError(t, c.name, err, rerr, c.want)
			if r4.Addr != g4 || r6.Addr != g6 {
				t.Errorf("the dry run answered %s, %s; the real call then returned %s, %s", g4, g6, r4.Addr, r6.Addr)
			}
		})
	}
}

// The dry runs refuse an invalid owner (ErrInvalid) as the real calls do,
// and answer ErrClosed once the allocator is closed, writing nothing.
func TestDryRunDualStackRefusesAnInvalidOwnerAndAClosedAllocator(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"c=10.0.0.0/28,fd00::/124"})
	bad := ipaddress.ParentRef{Name: "no-resource"}
	before := writtenState(t, a, st, svc("x"))
	if g4, g6, err := a.DryRun().AllocateDualStack(ctx, bad, netip.Addr{}, netip.Addr{}); !errors.Is(err, allocator.ErrInvalid) || g4.IsValid() || g6.IsValid() {
		t.Errorf("dry-run AllocateDualStack for an invalid owner = %s, %s, %v; want ErrInvalid", g4, g6, err)
	}
	if g4, g6, err := a.DryRun().EnsureDualStack(ctx, bad); !errors.Is(err, allocator.ErrInvalid) || g4.IsValid() || g6.IsValid() {
		t.Errorf("dry-run EnsureDualStack for an invalid owner = %s, %s, %v; want ErrInvalid", g4, g6, err)
	}
	wroteNothing(t, "dry runs for an invalid owner", before, a, st, svc("x"))
	d := a.DryRun()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.AllocateDualStack(ctx, svc("x"), netip.Addr{}, netip.Addr{}); !errors.Is(err, allocator.ErrClosed) {
		t.Errorf("dry-run AllocateDualStack after Close = %v, want ErrClosed", err)
	}
	if _, _, err := d.EnsureDualStack(ctx, svc("x")); !errors.Is(err, allocator.ErrClosed) {
		t.Errorf("dry-run EnsureDualStack after Close = %v, want ErrClosed", err)
	}
}
