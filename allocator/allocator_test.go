package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go4.org/netipx"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

func svc(name string) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: name}
}

// newAllocator returns an allocator over a fresh memory store holding the
// given CIDRs ("name=prefix[,prefix]").
func newAllocator(t *testing.T, cidrs []string, opts ...allocator.Option) (*allocator.Allocator, *memory.Store) {
	t.Helper()
	st := memory.New()
	a, err := allocator.New(context.Background(), st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	for _, c := range cidrs {
		name, list, _ := strings.Cut(c, "=")
		var ps []netip.Prefix
		for _, p := range strings.Split(list, ",") {
			ps = append(ps, pfx(p))
		}
		if _, err := a.CreateCIDR(context.Background(), name, ps...); err != nil {
			t.Fatalf("CreateCIDR(%s): %v", c, err)
		}
	}
	return a, st
}

func mustNext(t *testing.T, a *allocator.Allocator, f ipaddress.Family, owner string) netip.Addr {
	t.Helper()
	r, err := a.AllocateNext(context.Background(), f, svc(owner))
	if err != nil {
		t.Fatalf("AllocateNext(%v, %s): %v", f, owner, err)
	}
	return r.Addr
}

func mustStatic(t *testing.T, a *allocator.Allocator, addr, owner string) {
	t.Helper()
	if _, err := a.Allocate(context.Background(), ip(addr), svc(owner)); err != nil {
		t.Fatalf("Allocate(%s): %v", addr, err)
	}
}

func fill(t *testing.T, a *allocator.Allocator, f ipaddress.Family, prefix string) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for i := 0; ; i++ {
		r, err := a.AllocateNext(context.Background(), f, svc(fmt.Sprintf("%s-%d", prefix, i)))
		if errors.Is(err, allocator.ErrFull) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Addr)
	}
}

func TestStaticAllocationMustBeInsideALiveCIDR(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"kubernetes=10.96.0.0/28"})
	_, err := a.Allocate(ctx, ip("10.97.0.1"), svc("x"))
	var re *allocator.RangeError
	if !errors.As(err, &re) || !errors.Is(err, allocator.ErrNotInRange) {
		t.Fatalf("Allocate outside: %v, want *RangeError", err)
	}
	want := "the provided IP (10.97.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/28"
	if err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}
	for _, edge := range []string{"10.96.0.0", "10.96.0.15"} {
		if _, err := a.Allocate(ctx, ip(edge), svc("x")); !errors.Is(err, allocator.ErrNotInRange) {
			t.Errorf("Allocate(%s) (network/broadcast): %v, want ErrNotInRange", edge, err)
		}
	}
	if _, err := a.Allocate(ctx, ip("fd00::1"), svc("x")); !errors.Is(err, allocator.ErrMismatch) || err.Error() != "the provided network does not match the current range" {
		t.Fatalf("Allocate of a family no CIDR serves: %v, want ErrMismatch", err)
	}
	if _, err := a.AllocateNext(ctx, ipaddress.IPv6, svc("x")); !errors.Is(err, allocator.ErrMismatch) {
		t.Fatalf("AllocateNext of a family no CIDR serves: %v, want ErrMismatch", err)
	}
}

func TestAnAddressIsHeldByOneOwnerAcrossOverlappingCIDRs(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"a=10.0.0.0/24", "b=10.0.0.0/24", "c=10.0.0.0/23"})
	mustStatic(t, a, "10.0.0.7", "first")
	_, err := a.Allocate(ctx, ip("10.0.0.7"), svc("second"))
	if !errors.Is(err, allocator.ErrAllocated) || err.Error() != "provided IP is already allocated" {
		t.Fatalf("second Allocate: %v, want ErrAllocated", err)
	}
	// Dynamic allocation over the merged set never returns it either.
	got := fill(t, a, ipaddress.IPv4, "dyn")
	if slices.Contains(got, ip("10.0.0.7")) {
		t.Fatal("AllocateNext returned an address held already")
	}
	if len(got) != 510-1 {
		t.Fatalf("filled %d addresses of the merged /23, want 509", len(got))
	}
	seen := map[netip.Addr]bool{}
	for _, x := range got {
		if seen[x] {
			t.Fatalf("%s handed out twice", x)
		}
		seen[x] = true
	}
}

func TestStaticAllocationMayUseTheReservedLowerBand(t *testing.T) {
	a, _ := newAllocator(t, []string{"c=10.0.0.0/24"})
	mustStatic(t, a, "10.0.0.1", "kubernetes")
	mustStatic(t, a, "10.0.0.16", "dns")
}

func TestDynamicAllocationTakesTheUpperBandFirstThenTheLower(t *testing.T) {
	a, _ := newAllocator(t, []string{"c=10.0.0.0/24"})
	upperFirst, _ := netipx.ParseIPRange("10.0.0.17-10.0.0.254")
	lower, _ := netipx.ParseIPRange("10.0.0.1-10.0.0.16")
	got := fill(t, a, ipaddress.IPv4, "s")
	if len(got) != 254 {
		t.Fatalf("filled %d, want 254", len(got))
	}
	for i, x := range got {
		inUpper := upperFirst.Contains(x)
		if i < 238 && !inUpper {
			t.Fatalf("allocation %d took %s from the lower band while the upper band had room", i, x)
		}
		if i >= 238 && !lower.Contains(x) {
			t.Fatalf("allocation %d took %s, want the lower band", i, x)
		}
	}
}

func TestRangeIsFullWhenEveryLiveCIDRIsFull(t *testing.T) {
	a, _ := newAllocator(t, []string{"kubernetes=10.96.0.0/28"})
	if got := fill(t, a, ipaddress.IPv4, "s"); len(got) != 14 {
		t.Fatalf("a /28 gave %d addresses, want 14", len(got))
	}
	_, err := a.AllocateNext(context.Background(), ipaddress.IPv4, svc("late"))
	if !errors.Is(err, allocator.ErrFull) || err.Error() != "range is full" {
		t.Fatalf("AllocateNext on a full range: %v, want %q", err, "range is full")
	}
}

// A range that cannot serve a request fails it with "range is full"
// whatever its owner, as the reference finds no address before it builds
// an IPAddress to validate; a range with room refuses a bad owner, and
// creates nothing. Both hold with and without an observer (which take
// different paths), and the observer is told the full CIDR.
func TestFullRangeFailsTheRequestWhateverTheOwner(t *testing.T) {
	ctx := context.Background()
	bad := ipaddress.ParentRef{Resource: "Services", Name: "web"}
	for _, observed := range []bool{false, true} {
		rec := &recorder{}
		var opts []allocator.Option
		if observed {
			opts = append(opts, allocator.WithObserver(rec))
		}
		a, st := newAllocator(t, []string{"kubernetes=10.96.0.0/29"}, opts...)
		if _, err := a.AllocateNext(ctx, ipaddress.IPv4, bad); !errors.Is(err, ipaddress.ErrInvalid) {
			t.Fatalf("observed=%v: a bad owner with room: %v, want ErrInvalid", observed, err)
		}
		got := fill(t, a, ipaddress.IPv4, "s")
		if all, err := st.ListAddresses(ctx); err != nil || len(all) != len(got) {
			t.Fatalf("observed=%v: %d records (%v), want the %d allocated", observed, len(all), err, len(got))
		}
		rec.events = nil
		_, err := a.AllocateNext(ctx, ipaddress.IPv4, bad)
		if !errors.Is(err, allocator.ErrFull) || errors.Is(err, ipaddress.ErrInvalid) {
			t.Fatalf("observed=%v: a bad owner on a full range: %v, want ErrFull alone", observed, err)
		}
		if _, _, err := a.AllocateDualStack(ctx, bad, netip.Addr{}, netip.Addr{}); !errors.Is(err, allocator.ErrFull) {
			t.Fatalf("observed=%v: dual-stack, a bad owner, IPv4 full: %v, want ErrFull", observed, err)
		}
		if observed {
			if len(rec.events) != 2 || rec.events[0].CIDR != "kubernetes" || !errors.Is(rec.events[0].Err, allocator.ErrFull) {
				t.Fatalf("observer saw %+v, want two ErrFull events of kubernetes", rec.events)
			}
		}
		if err := a.Release(ctx, got[0]); err != nil {
			t.Fatal(err)
		}
		if _, err := a.AllocateNext(ctx, ipaddress.IPv4, bad); !errors.Is(err, ipaddress.ErrInvalid) {
			t.Fatalf("observed=%v: a bad owner after a release: %v, want ErrInvalid", observed, err)
		}
	}
}

// Past a full range, a bad owner comes before anything choosing finds: an
// address already taken, outside every CIDR, or of a family no CIDR serves,
// or a family that is none. The fast path chooses before it validates (so
// that the store loads meanwhile) and must answer as the observed path,
// which validates first.
func TestABadOwnerIsRefusedBeforeWhatChoosingFinds(t *testing.T) {
	ctx := context.Background()
	bad := ipaddress.ParentRef{Resource: "Services", Name: "web"}
	for _, observed := range []bool{false, true} {
		var opts []allocator.Option
		if observed {
			opts = append(opts, allocator.WithObserver(&recorder{}))
		}
		a, st := newAllocator(t, []string{"kubernetes=10.96.0.0/24"}, opts...)
		mustStatic(t, a, "10.96.0.10", "taken")
		calls := map[string]func() error{
			"static, taken":           func() error { _, err := a.Allocate(ctx, ip("10.96.0.10"), bad); return err },
			"static, outside":         func() error { _, err := a.Allocate(ctx, ip("192.0.2.1"), bad); return err },
			"next, family not served": func() error { _, err := a.AllocateNext(ctx, ipaddress.IPv6, bad); return err },
			"next, no family":         func() error { _, err := a.AllocateNext(ctx, ipaddress.Family(5), bad); return err },
		}
		for name, call := range calls {
			err := call()
			if want := bad.Validate(); !errors.Is(err, ipaddress.ErrInvalid) || err.Error() != want.Error() {
				t.Errorf("observed=%v, %s: %v, want %v", observed, name, err, want)
			}
		}
		if all, err := st.ListAddresses(ctx); err != nil || len(all) != 1 {
			t.Fatalf("observed=%v: %d records (%v), want the one taken", observed, len(all), err)
		}
	}
}

// The same when counters cannot tell the family is full and choosing must:
// a pool holding an excluded address, a family whose CIDRs are all
// Terminating. And an ended context comes first, on every path.
func TestFullFamilyFailsWhateverTheOwnerWhenOnlyChoosingTells(t *testing.T) {
	ctx := context.Background()
	bad := ipaddress.ParentRef{Resource: "Services", Name: "web"}
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for _, observed := range []bool{false, true} {
		opts := func(more ...allocator.Option) []allocator.Option {
			if observed {
				more = append(more, allocator.WithObserver(&recorder{}))
			}
			return more
		}
		excluded, _ := newAllocator(t, []string{"kubernetes=10.96.0.0/29"}, opts(allocator.WithExcluded(netipx.IPRangeFrom(ip("10.96.0.6"), ip("10.96.0.6"))))...)
		fill(t, excluded, ipaddress.IPv4, "s")
		dying, _ := newAllocator(t, []string{"kubernetes=10.96.0.0/29"}, opts()...)
		mustStatic(t, dying, "10.96.0.1", "kubernetes")
		if err := dying.DeleteCIDR(ctx, "kubernetes"); !errors.Is(err, allocator.ErrDeletionBlocked) {
			t.Fatalf("DeleteCIDR: %v, want blocked", err)
		}
		for name, a := range map[string]*allocator.Allocator{"excluded": excluded, "terminating": dying} {
			for _, owner := range []ipaddress.ParentRef{svc("good"), bad} {
				if _, err := a.AllocateNext(ctx, ipaddress.IPv4, owner); !errors.Is(err, allocator.ErrFull) || errors.Is(err, ipaddress.ErrInvalid) {
					t.Errorf("observed=%v, %s, owner %v: %v, want ErrFull alone", observed, name, owner, err)
				}
				if _, err := a.AllocateNext(ended, ipaddress.IPv4, owner); !errors.Is(err, context.Canceled) {
					t.Errorf("observed=%v, %s, owner %v, context ended: %v, want context.Canceled", observed, name, owner, err)
				}
			}
		}
	}
}

// A dual-stack request fails with the error of its first request that
// fails, in family order, with or without an observer (which takes
// another path): a refused static IPv4 address, not the full IPv6 family.
func TestDualStackFailsAlikeWithAndWithoutAnObserver(t *testing.T) {
	ctx := context.Background()
	for _, owner := range []ipaddress.ParentRef{svc("good"), {Resource: "Services", Name: "web"}} {
		var errs [2]error
		for i, observed := range []bool{false, true} {
			var opts []allocator.Option
			if observed {
				opts = append(opts, allocator.WithObserver(&recorder{}))
			}
			a, _ := newAllocator(t, []string{"v4=10.96.0.0/24", "v6=fd00::/125"}, opts...)
			fill(t, a, ipaddress.IPv6, "s")
			_, _, errs[i] = a.AllocateDualStack(ctx, owner, ip("192.168.0.1"), netip.Addr{})
		}
		if errs[0] == nil || errs[1] == nil || errs[0].Error() != errs[1].Error() {
			t.Errorf("owner %v: without an observer %v; with one %v; want the same error", owner, errs[0], errs[1])
		}
	}
}

// A full range is known full from counters kept as the index changes, so
// AllocateNext fails without waiting for the lock (here held by someone
// else), and the range serves again as soon as an address is released or a
// CIDR is added.
func TestRangeIsFullIsKnownWithoutTheLock(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"kubernetes=10.96.0.0/28"})
	got := fill(t, a, ipaddress.IPv4, "s")
	st.Mutex().Lock()
	done := make(chan error, 1)
	go func() {
		_, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("late"))
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, allocator.ErrFull) {
			t.Errorf("AllocateNext on a full range: %v, want ErrFull", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("AllocateNext on a full range waited for the lock")
	}
	st.Mutex().Unlock()
	if err := a.Release(ctx, got[3]); err != nil {
		t.Fatal(err)
	}
	if r := mustNext(t, a, ipaddress.IPv4, "after-release"); r != got[3] {
		t.Fatalf("after a release: %s, want %s", r, got[3])
	}
	if _, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("full-again")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("full again: %v, want ErrFull", err)
	}
	if _, err := a.CreateCIDR(ctx, "more", pfx("10.97.0.0/28")); err != nil {
		t.Fatal(err)
	}
	if r := mustNext(t, a, ipaddress.IPv4, "new-cidr"); !pfx("10.97.0.0/28").Contains(r) {
		t.Fatalf("after a new CIDR: %s, want one of 10.97.0.0/28", r)
	}
}

// Walkthrough 8.1: a full CIDR, then a new one: new addresses come from it.
func TestAFullCIDRHandsOverToANewCIDR(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"kubernetes=10.96.0.0/28"})
	mustStatic(t, a, "10.96.0.1", "kubernetes")
	if got := fill(t, a, ipaddress.IPv4, "s"); len(got) != 13 {
		t.Fatalf("13 more addresses expected, got %d", len(got))
	}
	if _, err := a.CreateCIDR(ctx, "newcidr1", pfx("192.96.0.0/24")); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if x := mustNext(t, a, ipaddress.IPv4, fmt.Sprint("new", i)); !pfx("192.96.0.0/24").Contains(x) {
			t.Fatalf("new allocation %s not from newcidr1", x)
		}
	}
}

func TestOldestLiveCIDRIsFilledFirstByDefault(t *testing.T) {
	a, _ := newAllocator(t, []string{"old=10.0.0.0/28", "new=10.1.0.0/28"})
	for i := range 14 {
		if x := mustNext(t, a, ipaddress.IPv4, fmt.Sprint(i)); !pfx("10.0.0.0/28").Contains(x) {
			t.Fatalf("allocation %d took %s before the oldest CIDR was full", i, x)
		}
	}
	if x := mustNext(t, a, ipaddress.IPv4, "next"); !pfx("10.1.0.0/28").Contains(x) {
		t.Fatalf("after the oldest was full, got %s", x)
	}
}

func TestMostFreePolicySpreadsAcrossCIDRs(t *testing.T) {
	a, _ := newAllocator(t, []string{"small=10.0.0.0/28", "big=10.1.0.0/24"}, allocator.WithPolicy(allocator.MostFree()))
	if x := mustNext(t, a, ipaddress.IPv4, "a"); !pfx("10.1.0.0/24").Contains(x) {
		t.Fatalf("MostFree chose %s, want the /24", x)
	}
}

func TestTerminatingCIDRServesNoNewAllocation(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"kubernetes=10.96.0.0/28", "old=192.168.7.0/24"})
	mustStatic(t, a, "192.168.7.10", "holder")
	err := a.DeleteCIDR(ctx, "old")
	if !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(old): %v, want blocked", err)
	}
	_, err = a.Allocate(ctx, ip("192.168.7.11"), svc("x"))
	if !errors.Is(err, allocator.ErrTerminating) || !errors.Is(err, allocator.ErrNotInRange) {
		t.Fatalf("static allocation in a Terminating CIDR: %v", err)
	}
	for i := range 14 {
		if x := mustNext(t, a, ipaddress.IPv4, fmt.Sprint(i)); pfx("192.168.7.0/24").Contains(x) {
			t.Fatalf("dynamic allocation %s from a Terminating CIDR", x)
		}
	}
	if _, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("y")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("with only a Terminating CIDR left: %v, want ErrFull", err)
	}
	// With every CIDR of the family Terminating and none live, the family
	// is full too (SPEC §8.4), not unserved.
	if err := a.DeleteCIDR(ctx, "kubernetes"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(kubernetes): %v, want blocked", err)
	}
	if _, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("z")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("with every IPv4 CIDR Terminating: %v, want ErrFull", err)
	}
	if _, err := a.AllocateNext(ctx, ipaddress.IPv6, svc("z")); !errors.Is(err, allocator.ErrMismatch) {
		t.Fatalf("IPv6, which no CIDR serves: %v, want ErrMismatch", err)
	}
}

// Walkthrough 8.2.
func TestDeletionIsBlockedWhileAnAddressWouldBeOrphaned(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"kubernetes=10.96.0.0/28", "newcidr1=192.96.0.0/24"})
	// Dynamic allocations come from the oldest CIDR, kubernetes.
	mustNext(t, a, ipaddress.IPv4, "a")
	mustNext(t, a, ipaddress.IPv4, "b")
	mustStatic(t, a, "192.96.0.5", "c")
	err := a.DeleteCIDR(ctx, "newcidr1")
	var blocked *allocator.DeletionBlockedError
	if !errors.As(err, &blocked) || len(blocked.Blocking) != 1 || blocked.Blocking[0] != ip("192.96.0.5") {
		t.Fatalf("DeleteCIDR: %v, want blocked by 192.96.0.5", err)
	}
	c, err := st.GetCIDR(ctx, "newcidr1")
	if err != nil || !c.Terminating {
		t.Fatalf("newcidr1 after delete: %+v, %v", c, err)
	}
	cond := c.Ready()
	if cond.Status || cond.Reason != "Terminating" || cond.Message != cidrset.MessageBlockedDelete {
		t.Fatalf("Ready condition %+v", cond)
	}
	if err := a.Release(ctx, ip("192.96.0.5")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetCIDR(ctx, "newcidr1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("newcidr1 after its last address was released: %v, want gone", err)
	}
	if _, err := a.GetCIDR("newcidr1"); !errors.Is(err, allocator.ErrNotFound) {
		t.Fatalf("allocator still knows newcidr1: %v", err)
	}
}

// Walkthrough 8.5: a full /24 plus an overlapping /23: the /24 goes at once.
func TestDeletionProceedsAtOnceWhenALiveCIDRCoversEveryAddress(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"small=10.0.0.0/24"})
	if got := fill(t, a, ipaddress.IPv4, "s"); len(got) != 254 {
		t.Fatalf("filled %d", len(got))
	}
	if _, err := a.CreateCIDR(ctx, "big", pfx("10.0.0.0/23")); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCIDR(ctx, "small"); err != nil {
		t.Fatalf("DeleteCIDR(small) with a covering /23: %v", err)
	}
	if _, err := st.GetCIDR(ctx, "small"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("small still stored: %v", err)
	}
	u, err := a.Usage("big")
	if err != nil || u.Prefixes[0].Used != cidrset.CountOf(254) || u.Prefixes[0].Size != cidrset.CountOf(510) {
		t.Fatalf("usage of big = %+v, %v", u, err)
	}
}

// Beyond the reference: a covering CIDR that is itself Terminating does not
// count, so deleting two overlapping CIDRs together orphans nothing.
func TestATerminatingCoverDoesNotCount(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"a=10.0.0.0/24", "b=10.0.0.0/24"})
	mustStatic(t, a, "10.0.0.9", "x")
	if err := a.DeleteCIDR(ctx, "a"); err != nil {
		t.Fatalf("DeleteCIDR(a) while b covers it: %v", err)
	}
	// Now b alone holds 10.0.0.9.
	if err := a.DeleteCIDR(ctx, "b"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(b): %v, want blocked", err)
	}
	if _, err := a.CreateCIDR(ctx, "c", pfx("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetCIDR(ctx, "b"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("b should have gone once c covered it: %v", err)
	}

	// Two overlapping CIDRs both Terminating: neither may rely on the
	// other. They are marked while no allocator watches the store: with
	// one watching, its reconciler may rightly remove the first one
	// marked, while the second still covers it.
	st2 := memory.New()
	for _, name := range []string{"c", "d"} {
		if _, err := st2.CreateCIDR(ctx, cidrset.CIDR{Name: name, Prefixes: []netip.Prefix{pfx("10.0.0.0/24")}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st2.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.9"), Parent: svc("x")}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"c", "d"} {
		cur, err := st2.GetCIDR(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cur.Terminating = true
		if _, err := st2.UpdateCIDR(ctx, cur); err != nil {
			t.Fatal(err)
		}
	}
	a2, err := allocator.New(ctx, st2)
	if err != nil {
		t.Fatal(err)
	}
	defer a2.Close()
	for _, name := range []string{"c", "d"} {
		if err := a2.DeleteCIDR(ctx, name); !errors.Is(err, allocator.ErrDeletionBlocked) {
			t.Fatalf("DeleteCIDR(%s) while its only cover is Terminating: %v, want blocked", name, err)
		}
	}
	for _, name := range []string{"c", "d"} {
		if cur, err := st2.GetCIDR(ctx, name); err != nil || !cur.Terminating {
			t.Fatalf("%s: %+v, %v; want kept Terminating", name, cur, err)
		}
	}
}

func TestBlockedDeletionIsRecheckedWhenACoveringCIDRAppears(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"old=10.96.0.0/28"})
	mustStatic(t, a, "10.96.0.1", "kubernetes")
	if err := a.DeleteCIDR(ctx, "old"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR: %v", err)
	}
	if _, err := a.CreateCIDR(ctx, "cover", pfx("10.96.0.0/16")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetCIDR(ctx, "old"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("old kept after a covering CIDR appeared: %v", err)
	}
}

// readCounter counts the CIDR reads a finalizer check starts with, per
// name. It hides the memory store's locked path.
type readCounter struct {
	store.Store
	mu    sync.Mutex
	reads map[string]int
}

func (r *readCounter) GetCIDR(ctx context.Context, name string) (cidrset.CIDR, error) {
	r.mu.Lock()
	r.reads[name]++
	r.mu.Unlock()
	return r.Store.GetCIDR(ctx, name)
}

func (r *readCounter) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reads[name]
}

func (r *readCounter) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.reads {
		n += c
	}
	return n
}

// A blocked deletion can be unblocked by a release of one of its addresses
// or by a live CIDR covering them, and by nothing else: only the CIDRs a
// change may unblock are checked again, so blocked CIDRs cost nothing
// while unrelated CIDRs and addresses change. Those it may unblock are
// checked, at once or by the background reconciler when the change comes
// from elsewhere.
func TestBlockedDeletionIsRecheckedOnlyByWhatMayUnblockIt(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	counter := &readCounter{Store: st, reads: map[string]int{}}
	a, err := allocator.New(ctx, counter)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "live", pfx("10.5.0.0/24")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, prefix, addr string }{{"b1", "10.1.0.0/24", "10.1.0.9"}, {"b2", "10.2.0.0/24", "10.2.0.9"}} {
		if _, err := a.CreateCIDR(ctx, c.name, pfx(c.prefix)); err != nil {
			t.Fatal(err)
		}
		mustStatic(t, a, c.addr, c.name)
		if err := a.DeleteCIDR(ctx, c.name); !errors.Is(err, allocator.ErrDeletionBlocked) {
			t.Fatalf("DeleteCIDR(%s) = %v, want blocked", c.name, err)
		}
	}
	// settle waits until no check has started for a while, so that the
	// background reconciler has acted on what it was told: a check it
	// makes only shows as a read.
	settle := func() {
		for n, quiet := counter.total(), 0; quiet < 3; {
			time.Sleep(40 * time.Millisecond)
			if m := counter.total(); m != n {
				n, quiet = m, 0
				continue
			}
			quiet++
		}
	}
	settle()
	before := counter.count("b2")
	if _, err := a.CreateCIDR(ctx, "elsewhere", pfx("172.16.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCIDR(ctx, "elsewhere"); err != nil {
		t.Fatal(err)
	}
	mustStatic(t, a, "10.5.0.7", "live")
	if _, err := a.CreateCIDR(ctx, "cover", pfx("10.1.0.0/16")); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetCIDR(ctx, "b1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("b1 kept after a covering CIDR appeared: %v", err)
	}
	if err := a.Release(ctx, ip("10.5.0.7")); err != nil {
		t.Fatal(err)
	}
	settle()
	if n := counter.count("b2"); n != before {
		t.Fatalf("b2 was checked %d times on changes that cannot unblock it", n-before)
	}
	// A release by another allocator reaches this one through the watch
	// only: its background reconciler must remove b2.
	if _, _, err := st.DeleteAddress(ctx, ip("10.2.0.9")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := st.GetCIDR(ctx, "b2")
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b2 still there after its last address was released elsewhere: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNetworkAndBroadcastRecordsNeverBlockDeletion(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"wide=10.0.0.0/8", "small=10.96.0.0/28"})
	// Held through the /8, they are the /28's network and broadcast addresses.
	mustStatic(t, a, "10.96.0.0", "net")
	mustStatic(t, a, "10.96.0.15", "bcast")
	if err := a.DeleteCIDR(ctx, "wide"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(wide): %v, want blocked by its own hosts", err)
	}
	if err := a.DeleteCIDR(ctx, "small"); err != nil {
		t.Fatalf("DeleteCIDR(small): %v; its network/broadcast records must not block", err)
	}
	if _, err := st.GetCIDR(ctx, "small"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("small: %v", err)
	}
}

func TestReleaseWorksWhateverTheCIDRState(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"c=10.0.0.0/24"})
	mustStatic(t, a, "10.0.0.5", "x")
	_ = a.DeleteCIDR(ctx, "c")
	if err := a.Release(ctx, ip("10.0.0.5")); err != nil {
		t.Fatalf("Release in a Terminating CIDR: %v", err)
	}
	// An orphan record outside every CIDR can be released too.
	if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("172.16.0.1"), Parent: svc("orphan")}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Release(ctx, ip("172.16.0.1")); err != nil {
		t.Fatalf("Release of an orphan: %v", err)
	}
	if err := a.Release(ctx, ip("172.16.0.1")); !errors.Is(err, allocator.ErrNotFound) {
		t.Fatalf("second Release: %v, want ErrNotFound", err)
	}
}

// Beyond the reference: one call allocates both families or neither.
func TestDualStackAllocatesBothFamiliesOrNeither(t *testing.T) {
	ctx := context.Background()
	// Sequential: a random first pick could take 10.0.0.200 or .201,
	// which the test allocates statically below.
	a, st := newAllocator(t, []string{"dual=10.0.0.0/24,fd00:10::/124"}, allocator.WithStrategy(allocator.Sequential()))
	v4, v6, err := a.AllocateDualStack(ctx, svc("d"), netip.Addr{}, netip.Addr{})
	if err != nil || !v4.Addr.Is4() || !v6.Addr.Is6() || v4.Revision != v6.Revision {
		t.Fatalf("AllocateDualStack = %v, %v, %v", v4, v6, err)
	}
	v6s := fill(t, a, ipaddress.IPv6, "v6")
	before, _ := st.ListAddresses(ctx)
	_, _, err = a.AllocateDualStack(ctx, svc("e"), netip.Addr{}, netip.Addr{})
	if !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("dual-stack with IPv6 full: %v, want ErrFull", err)
	}
	after, _ := st.ListAddresses(ctx)
	if len(after) != len(before) {
		t.Fatalf("a failed dual-stack allocation left %d records behind", len(after)-len(before))
	}
	// Static for one family, dynamic for the other, and a static one taken.
	if err := a.Release(ctx, v6s[0]); err != nil {
		t.Fatal(err)
	}
	mustStatic(t, a, "10.0.0.200", "taken")
	if _, _, err := a.AllocateDualStack(ctx, svc("f"), ip("10.0.0.200"), netip.Addr{}); !errors.Is(err, allocator.ErrAllocated) {
		t.Fatalf("dual-stack with a taken static IPv4: %v", err)
	}
	if _, _, err := a.AllocateDualStack(ctx, svc("f"), ip("fd00:10::1"), netip.Addr{}); !errors.Is(err, allocator.ErrInvalid) {
		t.Fatalf("dual-stack with an IPv6 address as the IPv4 one: %v", err)
	} else if fe := ipaddress.FieldErrors(err); len(fe) != 1 || fe[0].Field != "address" {
		t.Fatalf("dual-stack with an IPv6 address as the IPv4 one: %v, want one FieldError for \"address\" (documented)", err)
	}
	// A static address is validated as Allocate validates it (SPEC §1).
	for _, bad := range []struct{ v4, v6, detail string }{
		{"", "fd00:10::2%eth0", "must be a valid IP address"},
		{"", "::ffff:10.0.0.5", "must not be an IPv4-mapped IPv6 address"},
		{"::ffff:10.0.0.5", "", "must not be an IPv4-mapped IPv6 address"},
	} {
		var v4, v6 netip.Addr
		if bad.v4 != "" {
			v4 = ip(bad.v4)
		}
		if bad.v6 != "" {
			v6 = ip(bad.v6)
		}
		var fe *ipaddress.FieldError
		if _, _, err := a.AllocateDualStack(ctx, svc("h"), v4, v6); !errors.As(err, &fe) || !strings.HasPrefix(fe.Detail, bad.detail) {
			t.Fatalf("dual-stack with %q, %q: %v, want the validation error %q", bad.v4, bad.v6, err, bad.detail)
		}
	}
	v4, v6, err = a.AllocateDualStack(ctx, svc("g"), ip("10.0.0.201"), netip.Addr{})
	if err != nil || v4.Addr != ip("10.0.0.201") || v6.Addr != v6s[0] {
		t.Fatalf("dual-stack static IPv4 + next IPv6 = %v, %v, %v", v4, v6, err)
	}
}

// Beyond the reference: any IPv6 prefix length, exact counts.
func TestIPv6PrefixesOfAnyLengthAllocateWithExactCounts(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"p48=2001:db8::/48", "all=::/0"}, allocator.WithPolicy(allocator.OldestFirst()))
	for i := range 100 {
		x := mustNext(t, a, ipaddress.IPv6, fmt.Sprint(i))
		if !pfx("2001:db8::/48").Contains(x) {
			t.Fatalf("%s outside the oldest /48", x)
		}
	}
	u, _ := a.Usage("p48")
	wantFree := cidrset.Size(pfx("2001:db8::/48")).Sub(cidrset.CountOf(100))
	if u.Prefixes[0].Used != cidrset.CountOf(100) || u.Prefixes[0].Free != wantFree {
		t.Fatalf("usage %+v", u.Prefixes[0])
	}
	mustStatic(t, a, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "last")
	if _, err := a.Allocate(ctx, ip("::"), svc("zero")); !errors.Is(err, allocator.ErrNotInRange) {
		t.Fatalf("Allocate(::) in ::/0: %v, want not in range (network address)", err)
	}
	fu := a.FamilyUsage(ipaddress.IPv6)
	if fu.Used != cidrset.CountOf(101) || fu.Size != cidrset.Size(pfx("::/0")) {
		t.Fatalf("FamilyUsage(IPv6) = %+v", fu)
	}
}

func TestSequentialStrategyTakesTheLowestFreeAddress(t *testing.T) {
	a, _ := newAllocator(t, []string{"c=10.0.0.0/28"}, allocator.WithStrategy(allocator.Sequential()))
	for i := 1; i <= 3; i++ {
		if x := mustNext(t, a, ipaddress.IPv4, fmt.Sprint(i)); x != netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}) {
			t.Fatalf("allocation %d = %s", i, x)
		}
	}
	if err := a.Release(context.Background(), ip("10.0.0.2")); err != nil {
		t.Fatal(err)
	}
	if x := mustNext(t, a, ipaddress.IPv4, "again"); x != ip("10.0.0.2") {
		t.Fatalf("after releasing .2, got %s", x)
	}
}

func TestRandomStartIsReproducibleWithASeed(t *testing.T) {
	run := func() []netip.Addr {
		a, _ := newAllocator(t, []string{"c=10.0.0.0/16"}, allocator.WithStrategy(allocator.RandomStart(rand.NewPCG(1, 2))))
		var out []netip.Addr
		for i := range 20 {
			out = append(out, mustNext(t, a, ipaddress.IPv4, fmt.Sprint(i)))
		}
		return out
	}
	first, second := run(), run()
	if !slices.Equal(first, second) {
		t.Fatalf("same seed, different addresses:\n%v\n%v", first, second)
	}
	sorted := slices.Clone(first)
	slices.SortFunc(sorted, netip.Addr.Compare)
	if slices.Equal(sorted, first) {
		t.Fatalf("random start handed out ascending addresses: %v", first)
	}
}

func TestExcludedRangesAreNeverAllocated(t *testing.T) {
	ctx := context.Background()
	ex := netipx.MustParseIPRange("10.0.0.2-10.0.0.10")
	a, _ := newAllocator(t, []string{"c=10.0.0.0/28"}, allocator.WithExcluded(ex))
	got := fill(t, a, ipaddress.IPv4, "s")
	if len(got) != 14-9 {
		t.Fatalf("filled %d addresses, want 5", len(got))
	}
	for _, x := range got {
		if ex.Contains(x) {
			t.Fatalf("excluded %s allocated", x)
		}
	}
	if _, err := a.Allocate(ctx, ip("10.0.0.3"), svc("x")); !errors.Is(err, allocator.ErrExcluded) {
		t.Fatalf("static allocation of an excluded address: %v", err)
	}
	u, _ := a.Usage("c")
	if !u.Prefixes[0].Free.IsZero() {
		t.Fatalf("usage %+v, want nothing free", u.Prefixes[0])
	}
}

// SPEC §1: no IPAddress is IPv4-mapped. A valid IPv6 prefix may still
// contain the whole mapped block (::fffe:0:0/95's upper half is
// ::ffff:0:0/96): those addresses are never offered, whatever the
// strategy, the range is full when the rest is, and Usage does not count
// them free.
func TestIPv4MappedAddressesAreNeverOffered(t *testing.T) {
	ctx := context.Background()
	for _, strategy := range []allocator.Strategy{allocator.RandomStart(nil), allocator.Sequential()} {
		a, _ := newAllocator(t, []string{"v6=::fffe:0:0/95"}, allocator.WithStrategy(strategy))
		for i := range 64 {
			r, err := a.AllocateNext(ctx, ipaddress.IPv6, svc(fmt.Sprint("s", i)))
			if err != nil {
				t.Fatalf("AllocateNext #%d: %v", i, err)
			}
			if r.Addr.Is4In6() {
				t.Fatalf("AllocateNext #%d = %s, IPv4-mapped", i, r.Addr)
			}
		}
		u, err := a.Usage("v6")
		if err != nil {
			t.Fatal(err)
		}
		p := u.Prefixes[0]
		if want := p.Size.Sub(cidrset.CountOf(64 + 1<<32)); p.Used != cidrset.CountOf(64) || p.Free != want {
			t.Fatalf("usage %+v: want 64 used and %v free (the mapped half is neither)", p.Usage, want)
		}
	}
	// Only mapped addresses left (the rest excluded): the range is full.
	rest := netipx.IPRangeFrom(ip("::fffe:0:1"), ip("::fffe:ffff:ffff"))
	a, _ := newAllocator(t, []string{"v6=::fffe:0:0/95"}, allocator.WithExcluded(rest))
	if r, err := a.AllocateNext(ctx, ipaddress.IPv6, svc("late")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("AllocateNext with only mapped addresses left = %s, %v; want ErrFull", r.Addr, err)
	}
}

// An excluded range is filed under its family, where allocations look: a
// range of IPv4-mapped addresses would exclude nothing they can reach, so
// New refuses it rather than accept a range that does nothing.
func TestExcludedRangesMustNotBeIPv4Mapped(t *testing.T) {
	for _, r := range []netipx.IPRange{
		netipx.IPRangeFrom(ip("::ffff:10.0.0.1"), ip("::ffff:10.0.0.2")),
		{},
	} {
		a, err := allocator.New(context.Background(), memory.New(), allocator.WithExcluded(r))
		var fe *ipaddress.FieldError
		if !errors.Is(err, ipaddress.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "excluded" {
			if a != nil {
				a.Close()
			}
			t.Errorf("WithExcluded(%v): New = %v, want an ErrInvalid field error on excluded", r, err)
		}
	}
}

func TestDryRunWritesNothing(t *testing.T) {
	ctx := context.Background()
	a, st := newAllocator(t, []string{"c=10.0.0.0/28"}, allocator.WithStrategy(allocator.Sequential()))
	mustStatic(t, a, "10.0.0.1", "held")
	d := a.DryRun()
	x, err := d.AllocateNext(ctx, ipaddress.IPv4, svc("x"))
	if err != nil || x != ip("10.0.0.2") {
		t.Fatalf("dry-run AllocateNext = %s, %v", x, err)
	}
	if err := d.Allocate(ctx, ip("10.0.0.1"), svc("x")); !errors.Is(err, allocator.ErrAllocated) {
		t.Fatalf("dry-run Allocate of a held address: %v", err)
	}
	dec, err := d.DeleteCIDR(ctx, "c")
	if err != nil || dec.Remove || len(dec.Blocking) != 1 {
		t.Fatalf("dry-run DeleteCIDR = %+v, %v", dec, err)
	}
	if err := d.CreateCIDR(ctx, "c", pfx("10.1.0.0/24")); !errors.Is(err, allocator.ErrExists) {
		t.Fatalf("dry-run CreateCIDR of an existing name: %v", err)
	}
	recs, _ := st.ListAddresses(ctx)
	c, _ := st.GetCIDR(ctx, "c")
	if len(recs) != 1 || c.Terminating {
		t.Fatalf("dry run wrote: %d records, terminating %v", len(recs), c.Terminating)
	}
	// An ended context fails a dry run as it fails the real call.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.AllocateNext(done, ipaddress.IPv4, svc("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("dry-run AllocateNext with a cancelled context: %v, want context.Canceled", err)
	}
	if _, err := a.AllocateNext(done, ipaddress.IPv4, svc("x")); !errors.Is(err, context.Canceled) {
		t.Fatalf("AllocateNext with a cancelled context: %v, want context.Canceled", err)
	}
}

func TestOwnerIndexFindsAndReleasesAnOwnersAddresses(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"dual=10.0.0.0/24,fd00::/120"})
	if _, _, err := a.AllocateDualStack(ctx, svc("web"), netip.Addr{}, netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	mustNext(t, a, ipaddress.IPv4, "other")
	recs, err := a.AddressesOf(ctx, svc("web"))
	if err != nil || len(recs) != 2 {
		t.Fatalf("AddressesOf(web) = %v, %v", recs, err)
	}
	released, err := a.ReleaseOwner(ctx, svc("web"))
	if err != nil || len(released) != 2 {
		t.Fatalf("ReleaseOwner = %v, %v", released, err)
	}
	if fu := a.FamilyUsage(ipaddress.IPv4); fu.Used != cidrset.CountOf(1) {
		t.Fatalf("IPv4 used after ReleaseOwner: %s", fu.Used)
	}
}

// afterListing is a store on which another allocator acts right after
// the next AddressesOf, as one sharing an etcd store could.
type afterListing struct {
	store.Store
	then func()
}

func (s *afterListing) AddressesOf(ctx context.Context, owner ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	recs, err := s.Store.AddressesOf(ctx, owner)
	if f := s.then; f != nil {
		s.then = nil
		f()
	}
	return recs, err
}

// Uniqueness: ReleaseOwner frees only what the owner still holds. An
// address it listed that another allocator released and gave to another
// owner before it got there stays that owner's.
func TestReleaseOwnerLeavesAnAddressReallocatedSinceItsListing(t *testing.T) {
	ctx := context.Background()
	other, st := newAllocator(t, []string{"kubernetes=10.96.0.0/24"})
	shared := &afterListing{Store: st}
	a, err := allocator.New(ctx, shared)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	moved, kept := ip("10.96.0.5"), ip("10.96.0.6")
	mustStatic(t, other, moved.String(), "old")
	mustStatic(t, other, kept.String(), "old")
	shared.then = func() {
		if err := other.Release(ctx, moved); err != nil {
			t.Error(err)
		}
		if _, err := other.Allocate(ctx, moved, svc("web")); err != nil {
			t.Error(err)
		}
	}
	released, err := a.ReleaseOwner(ctx, svc("old"))
	if err != nil || !slices.Equal(released, []netip.Addr{kept}) {
		t.Fatalf("ReleaseOwner(old) = %v, %v; want [%s]", released, err, kept)
	}
	if rec, err := st.GetAddress(ctx, moved); err != nil || rec.Parent != svc("web") {
		t.Fatalf("%s, given to web after the listing: %+v, %v", moved, rec, err)
	}
	if _, err := st.GetAddress(ctx, kept); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("%s of old: %v, want it released", kept, err)
	}
}

// listingError is a store whose AddressesOf returns the records the store
// does with err beside them, as one that met records it cannot decode.
type listingError struct {
	store.Store
	err error
}

func (s *listingError) AddressesOf(ctx context.Context, owner ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	recs, err := s.Store.AddressesOf(ctx, owner)
	if err != nil {
		return nil, err
	}
	return recs, s.err
}

// ReleaseOwner: records the store cannot decode hide none of the owner's
// others. Beside a *store.SkippedError it releases every record listed and
// returns them with that error, as a record it names may still be the
// owner's; beside any other error it releases nothing.
func TestReleaseOwnerReleasesTheRecordsListedBesideSkippedOnes(t *testing.T) {
	ctx := context.Background()
	other, st := newAllocator(t, []string{"kubernetes=10.96.0.0/24"})
	shared := &listingError{Store: st}
	a, err := allocator.New(ctx, shared)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	held := []netip.Addr{ip("10.96.0.5"), ip("10.96.0.6")}
	for _, addr := range held {
		mustStatic(t, other, addr.String(), "old")
	}

	failed := fmt.Errorf("owner index: %w", store.ErrCorrupt)
	shared.err = failed
	if released, err := a.ReleaseOwner(ctx, svc("old")); len(released) != 0 || err != failed {
		t.Fatalf("ReleaseOwner(old) with its listing failed = %v, %v; want nothing and %v", released, err, failed)
	}
	for _, addr := range held {
		if _, err := st.GetAddress(ctx, addr); err != nil {
			t.Fatalf("%s after a ReleaseOwner that failed: %v, want it held", addr, err)
		}
	}

	skipped := &store.SkippedError{}
	skipped.Skip(ip("10.96.0.9"), fmt.Errorf("key of 10.96.0.9: %w", store.ErrCorrupt))
	shared.err = skipped
	released, err := a.ReleaseOwner(ctx, svc("old"))
	var se *store.SkippedError
	if !slices.Equal(released, held) || !errors.As(err, &se) || se != skipped || !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("ReleaseOwner(old) beside a skipped record = %v, %v; want %v and the *store.SkippedError", released, err, held)
	}
	for _, addr := range held {
		if _, err := st.GetAddress(ctx, addr); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s of old: %v, want it released", addr, err)
		}
	}
}

func TestUsageCountsOverlappingCIDRsOnce(t *testing.T) {
	a, _ := newAllocator(t, []string{"small=10.0.0.0/24", "big=10.0.0.0/23"})
	mustStatic(t, a, "10.0.0.5", "a")
	mustStatic(t, a, "10.0.1.5", "b")
	small, _ := a.Usage("small")
	big, _ := a.Usage("big")
	if small.Prefixes[0].Used != cidrset.CountOf(1) || big.Prefixes[0].Used != cidrset.CountOf(2) {
		t.Fatalf("usage small %+v big %+v", small, big)
	}
	fu := a.FamilyUsage(ipaddress.IPv4)
	if fu.Size != cidrset.CountOf(510) || fu.Used != cidrset.CountOf(2) || fu.Free != cidrset.CountOf(508) {
		t.Fatalf("FamilyUsage = %+v", fu)
	}
}

// Validation allows one prefix per family, but a store may hold a CIDR
// with two (written by hand, or by an older writer): the allocator serves
// from both, and FamilyUsage counts both, as the per-CIDR Usage does.
func TestFamilyUsageCountsEveryPrefixOfTheFamilyAStoredCIDRHolds(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "two", Prefixes: []netip.Prefix{pfx("10.0.0.0/30"), pfx("10.1.0.0/29")}}); err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	mustStatic(t, a, "10.1.0.3", "a")
	fu := a.FamilyUsage(ipaddress.IPv4)
	if fu.Size != cidrset.CountOf(2+6) || fu.Used != cidrset.CountOf(1) || fu.Free != cidrset.CountOf(7) {
		t.Fatalf("FamilyUsage = %+v, want size 8, used 1, free 7", fu)
	}
}

func TestDefaultCIDRIsCreatedAndMayOnlyBecomeDualStack(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, nil)
	c, err := a.EnsureDefault(ctx, pfx("10.96.0.0/28"))
	if err != nil || c.Name != "kubernetes" || c.Ready().Message != cidrset.MessageDefaultReady {
		t.Fatalf("EnsureDefault = %+v, %v", c, err)
	}
	if _, err := a.EnsureDefault(ctx, pfx("10.96.0.0/28")); err != nil {
		t.Fatalf("EnsureDefault again: %v", err)
	}
	c, err = a.EnsureDefault(ctx, pfx("10.96.0.0/28"), pfx("fd00:10::/108"))
	if err != nil || len(c.Prefixes) != 2 {
		t.Fatalf("EnsureDefault to dual-stack = %+v, %v", c, err)
	}
	if _, err := a.EnsureDefault(ctx, pfx("10.97.0.0/28")); !errors.Is(err, allocator.ErrDefaultMismatch) {
		t.Fatalf("EnsureDefault with other prefixes: %v, want ErrDefaultMismatch", err)
	}
	if got, _ := a.GetCIDR("kubernetes"); len(got.Prefixes) != 2 || got.Prefixes[0] != pfx("10.96.0.0/28") {
		t.Fatalf("default CIDR changed to %+v", got)
	}
	// A Terminating default CIDR is reported as it is; once its deletion
	// completes, EnsureDefault creates it again.
	held := ip("10.96.0.1")
	mustStatic(t, a, held.String(), "kubernetes")
	var blocked *allocator.DeletionBlockedError
	if err := a.DeleteCIDR(ctx, "kubernetes"); !errors.As(err, &blocked) {
		t.Fatalf("DeleteCIDR(kubernetes) holding %s: %v, want blocked", held, err)
	}
	if c, err := a.EnsureDefault(ctx, pfx("10.96.0.0/28"), pfx("fd00:10::/108")); err != nil || !c.Terminating {
		t.Fatalf("EnsureDefault while the default CIDR is Terminating = %+v, %v; want it, Terminating", c, err)
	}
	if err := a.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	if c, err := a.EnsureDefault(ctx, pfx("10.96.0.0/28"), pfx("fd00:10::/108")); err != nil || c.Terminating {
		t.Fatalf("EnsureDefault after the default CIDR was deleted = %+v, %v; want it created anew", c, err)
	}
}

// SPEC §5 asks only that the default CIDR exist: one being deleted is left
// as it is, not made dual-stack, which would give its removal more
// addresses to wait for.
func TestATerminatingDefaultCIDRIsNotMadeDualStack(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, nil)
	if _, err := a.EnsureDefault(ctx, pfx("10.96.0.0/28")); err != nil {
		t.Fatal(err)
	}
	mustStatic(t, a, "10.96.0.1", "kubernetes")
	if err := a.DeleteCIDR(ctx, "kubernetes"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(kubernetes) holding 10.96.0.1: %v, want blocked", err)
	}
	before, err := a.GetCIDR("kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.EnsureDefault(ctx, pfx("10.96.0.0/28"), pfx("fd00:10::/108"))
	if err != nil || !c.Terminating || len(c.Prefixes) != 1 {
		t.Fatalf("EnsureDefault(dual-stack) on the Terminating default = %+v, %v; want it as it is", c, err)
	}
	if after, _ := a.GetCIDR("kubernetes"); after.Revision != before.Revision || !slices.Equal(after.Prefixes, before.Prefixes) {
		t.Fatalf("the Terminating default changed from %v (revision %d) to %v (revision %d)", before.Prefixes, before.Revision, after.Prefixes, after.Revision)
	}
}

func TestCIDRPrefixesAreImmutableExceptSingleToDualStack(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"c=10.0.0.0/24"})
	if _, err := a.UpdateCIDR(ctx, "c", pfx("10.1.0.0/24")); !errors.Is(err, allocator.ErrInvalid) {
		t.Fatalf("changing the prefix: %v, want ErrInvalid", err)
	}
	if _, err := a.UpdateCIDR(ctx, "c", pfx("10.0.0.0/24"), pfx("fd00::/64")); err != nil {
		t.Fatalf("single to dual-stack: %v", err)
	}
	mustNext(t, a, ipaddress.IPv6, "v6")
}

func TestInvalidInputIsATypedError(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"c=10.0.0.0/24"})
	var fe *ipaddress.FieldError
	for name, err := range map[string]error{
		"bad name":     errOf(a.CreateCIDR(ctx, "Bad_Name", pfx("10.1.0.0/24"))),
		"host bits":    errOf(a.CreateCIDR(ctx, "x", netip.PrefixFrom(ip("10.1.0.1"), 24))),
		"no prefixes":  errOf(a.CreateCIDR(ctx, "y")),
		"mapped addr":  errOf(a.Allocate(ctx, ip("::ffff:10.0.0.5"), svc("x"))),
		"empty owner":  errOf(a.AllocateNext(ctx, ipaddress.IPv4, ipaddress.ParentRef{})),
		"bad family":   errOf(a.AllocateNext(ctx, 5, svc("x"))),
		"zero address": a.Release(ctx, netip.Addr{}),
	} {
		if !errors.Is(err, allocator.ErrInvalid) || !errors.As(err, &fe) {
			t.Errorf("%s: %v, want a *ipaddress.FieldError", name, err)
		}
	}
}

func errOf[T any](_ T, err error) error { return err }

// The allocator checks an owner's scope only when it differs from the last
// one that passed: a remembered scope must never let an invalid owner
// through, whether its name, its scope, or a field the first owner left
// empty is wrong, in any order of valid and invalid requests.
func TestEveryOwnerIsValidatedWhateverTheScopeBeforeIt(t *testing.T) {
	ctx := context.Background()
	ref := func(group, resource, ns, name string) ipaddress.ParentRef {
		return ipaddress.ParentRef{Group: group, Resource: resource, Namespace: ns, Name: name}
	}
	steps := []struct {
		owner ipaddress.ParentRef
		valid bool
	}{
		{ref("", "", "", "a"), false}, // the zero scope, first: nothing remembered matches it
		{ref("", "", "default", "a"), false},
		{ref("", "services", "default", "a"), true},
		{ref("", "services", "default", "Bad_Name"), false},
		{ref("", "services", "Default", "b"), false},
		{ref("", "services", "Default", "b2"), false}, // a scope that failed is not remembered
		{ref("", "", "default", "c"), false},
		{ref("", "services", "", "d"), true},
		{ref("", "services", "default", ""), false},
		{ref("Bad.Group", "services", "default", "e"), false},
		{ref("example.com", "widgets", "kube-system", "f"), true},
		{ref("example.com", "widgets", "kube-system", "-f"), false},
		{ref("example.com", "Widgets", "kube-system", "g"), false},
		{ref("", "services", "default", "h"), true},
	}
	for _, static := range []bool{false, true} {
		a, _ := newAllocator(t, []string{"c=10.0.0.0/24"})
		for i, s := range steps {
			var err error
			if static {
				_, err = a.Allocate(ctx, netip.AddrFrom4([4]byte{10, 0, 0, byte(10 + i)}), s.owner)
			} else {
				_, err = a.AllocateNext(ctx, ipaddress.IPv4, s.owner)
			}
			if want := s.owner.Validate(); (err == nil) != s.valid || !s.valid && (!errors.Is(err, allocator.ErrInvalid) || err.Error() != want.Error()) {
				t.Errorf("static=%v, step %d, %#v: %v, want valid=%v (Validate: %v)", static, i, s.owner, err, s.valid, want)
			}
		}
	}
}

// unlockedStore hides the memory store's store.Locked side, so that an
// allocator over it takes the path it takes over a remote store: its own
// lock, choices marked in flight, created records applied at once.
type unlockedStore struct{ store.Store }

// Two allocators over one store behave like two apiservers over one etcd:
// they never hand out the same address, and each sees the other's. Both
// share the memory store's lock (each applies its own writes, and the store
// tells it of the other's), or one takes the remote-store path.
func TestTwoAllocatorsOverOneStoreNeverCollide(t *testing.T) {
	for _, remote := range []bool{false, true} {
		t.Run(fmt.Sprintf("remote=%v", remote), func(t *testing.T) { testTwoAllocators(t, remote) })
	}
}

func testTwoAllocators(t *testing.T, remote bool) {
	ctx := context.Background()
	st := memory.New()
	var second store.Store = st
	if remote {
		second = unlockedStore{st}
	}
	var as []*allocator.Allocator
	for _, s := range []store.Store{st, second} {
		a, err := allocator.New(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		as = append(as, a)
	}
	if _, err := as[0].CreateCIDR(ctx, "c", pfx("10.0.0.0/22")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[netip.Addr]bool{}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			a := as[g%2]
			for i := 0; ; i++ {
				r, err := a.AllocateNext(ctx, ipaddress.IPv4, svc(fmt.Sprintf("g%d-%d", g, i)))
				if errors.Is(err, allocator.ErrFull) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[r.Addr] {
					t.Errorf("%s handed out twice", r.Addr)
				}
				seen[r.Addr] = true
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(seen) != 1022 {
		t.Fatalf("handed out %d addresses of a /22, want 1022", len(seen))
	}
	for _, a := range as {
		if u, _ := a.Usage("c"); !u.Prefixes[0].Free.IsZero() {
			t.Fatalf("an allocator sees %s free", u.Prefixes[0].Free)
		}
	}
}

// stuckStore never answers Watch until its context ends, like a store whose
// servers are all down.
type stuckStore struct{ *memory.Store }

func (s stuckStore) Watch(ctx context.Context, w store.Watcher) error {
	<-ctx.Done()
	return ctx.Err()
}

func TestNewReturnsWhenItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := allocator.New(ctx, stuckStore{memory.New()})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("New over a store that never answers: %v, want DeadlineExceeded", err)
	}
}

// recorder is an Observer keeping every event.
type recorder struct {
	mu     sync.Mutex
	events []allocator.AllocationEvent
}

func (r *recorder) Allocated(ev allocator.AllocationEvent) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

// An observer learns where each allocation came from, and for "range is
// full" which CIDR the policy would have used, so that per-CIDR error
// metrics name it.
func TestObserverNamesTheCIDROfEveryOutcome(t *testing.T) {
	rec := &recorder{}
	a, _ := newAllocator(t, []string{"old=10.0.0.0/30", "new=10.0.1.0/30"}, allocator.WithObserver(rec), allocator.WithStrategy(allocator.Sequential()))
	ctx := context.Background()
	for i := range 4 { // two usable addresses per /30
		if _, err := a.AllocateNext(ctx, ipaddress.IPv4, svc(fmt.Sprint("s", i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("s4")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("fifth allocation: %v, want ErrFull", err)
	}
	if _, err := a.AllocateNext(ctx, ipaddress.IPv6, svc("s5")); !errors.Is(err, allocator.ErrMismatch) {
		t.Fatalf("IPv6 without an IPv6 CIDR: %v, want ErrMismatch", err)
	}
	var got []string
	for _, ev := range rec.events {
		got = append(got, fmt.Sprintf("%s %v", ev.CIDR, ev.Err != nil))
	}
	want := []string{"old false", "old false", "new false", "new false", "old true", " true"}
	if !slices.Equal(got, want) {
		t.Fatalf("events (cidr, failed) = %q, want %q", got, want)
	}
}

// A dual-stack allocation that fails tells the observer of the request that
// failed it only: the other family's CIDR neither allocated (its choice was
// never created) nor failed, so per-CIDR error metrics must not charge it.
func TestObserverChargesADualStackFailureToTheFamilyThatFailed(t *testing.T) {
	ctx := context.Background()
	events := func(rec *recorder) []string {
		var got []string
		for _, ev := range rec.events {
			got = append(got, fmt.Sprintf("%s %s %s %v", ev.CIDR, ev.Family, ev.Scope, ev.Err != nil))
		}
		rec.events = nil
		return got
	}
	rec := &recorder{}
	a, _ := newAllocator(t, []string{"v4=10.0.0.0/30", "v6=fd00::/126"}, allocator.WithObserver(rec))
	v6 := mustNext(t, a, ipaddress.IPv6, "fill-1")
	mustNext(t, a, ipaddress.IPv6, "fill-2")
	mustNext(t, a, ipaddress.IPv6, "fill-3")
	events(rec)
	if _, _, err := a.AllocateDualStack(ctx, svc("d"), netip.Addr{}, netip.Addr{}); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("dual-stack with IPv6 full: %v, want ErrFull", err)
	}
	if got, want := events(rec), []string{"v6 IPv6 dynamic true"}; !slices.Equal(got, want) {
		t.Errorf("IPv6 full: events %q, want %q", got, want)
	}
	if err := a.Release(ctx, v6); err != nil {
		t.Fatal(err)
	}
	mustStatic(t, a, "10.0.0.1", "taken")
	events(rec)
	if _, _, err := a.AllocateDualStack(ctx, svc("d"), ip("10.0.0.1"), netip.Addr{}); !errors.Is(err, allocator.ErrAllocated) {
		t.Fatalf("dual-stack with a taken static IPv4: %v, want ErrAllocated", err)
	}
	if got, want := events(rec), []string{"v4 IPv4 static true"}; !slices.Equal(got, want) {
		t.Errorf("static IPv4 taken: events %q, want %q", got, want)
	}
	mustNext(t, a, ipaddress.IPv4, "fill-4")
	events(rec)
	if _, _, err := a.AllocateDualStack(ctx, svc("d"), netip.Addr{}, netip.Addr{}); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("dual-stack with both full: %v, want ErrFull", err)
	}
	if got, want := events(rec), []string{"v4 IPv4 dynamic true"}; !slices.Equal(got, want) {
		t.Errorf("IPv4 full first: events %q, want %q", got, want)
	}
}

// TestMostFreeChoosesAsItsOrderSays: the allocator finds MostFree's choice
// without asking for the order; it must be the first CIDR with a free
// address in the order MostFree.Order gives, the oldest first among
// equals, whatever the sizes and fills.
func TestMostFreeChoosesAsItsOrderSays(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(30) {
		rng := rand.New(rand.NewPCG(seed, 3))
		k := 2 + rng.IntN(6)
		var specs []string
		for i := range k {
			specs = append(specs, fmt.Sprintf("c%d=10.%d.0.0/%d", i, i, 26+rng.IntN(4)))
		}
		a, _ := newAllocator(t, specs, allocator.WithPolicy(allocator.MostFree()))
		cands := make([]allocator.Candidate, k)
		for i, s := range specs {
			name, p, _ := strings.Cut(s, "=")
			r, _ := cidrset.HostRange(pfx(p))
			size := uint64(0)
			for x := r.From(); ; x = x.Next() {
				size++
				if x == r.To() {
					break
				}
			}
			used := rng.Uint64N(size + 1)
			x := r.To() // fill from the top, leaving the lower addresses
			for range used {
				if _, err := a.Allocate(ctx, x, svc(fmt.Sprint(name, x))); err != nil {
					t.Fatal(err)
				}
				x = x.Prev()
			}
			cands[i] = allocator.Candidate{CIDR: name, Prefix: pfx(p), Used: cidrset.CountOf(used), Size: cidrset.CountOf(size)}
		}
		for round := range 20 {
			want := slices.Clone(cands)
			allocator.MostFree().Order(want)
			r, err := a.AllocateNext(ctx, ipaddress.IPv4, svc(fmt.Sprint("next", round)))
			if want[0].Used == want[0].Size {
				if !errors.Is(err, allocator.ErrFull) {
					t.Fatalf("seed %d: all full, AllocateNext = %v, %v", seed, r.Addr, err)
				}
				break
			}
			if err != nil || !want[0].Prefix.Contains(r.Addr) {
				t.Fatalf("seed %d round %d: got %s (%v), want an address of %s (order %+v)", seed, round, r.Addr, err, want[0].CIDR, want)
			}
			i := slices.IndexFunc(cands, func(c allocator.Candidate) bool { return c.CIDR == want[0].CIDR })
			cands[i].Used = cands[i].Used.Add(cidrset.CountOf(1))
		}
	}
}

// TestRandomOrderTriesEveryCIDRFirstAlike: RandomOrder's first try is
// uniform over the live CIDRs with room, and a full one is never chosen;
// nor does the CIDR after a full one get its share (drawn among all live
// CIDRs, 10.2.0.0/16 here would be tried first half the time).
func TestRandomOrderTriesEveryCIDRFirstAlike(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"c0=10.0.0.0/28", "c1=10.1.0.0/28", "c2=10.2.0.0/28", "c3=10.3.0.0/28"}, allocator.WithPolicy(allocator.RandomOrder()))
	r, _ := cidrset.HostRange(pfx("10.1.0.0/28"))
	for x := r.From(); ; x = x.Next() {
		mustStatic(t, a, x.String(), "fill"+x.String())
		if x == r.To() {
			break
		}
	}
	count := map[string]int{}
	for i := range 1200 {
		x := mustNext(t, a, ipaddress.IPv4, fmt.Sprint("o", i))
		count[netip.PrefixFrom(x, 16).Masked().String()]++
		if err := a.Release(ctx, x); err != nil {
			t.Fatal(err)
		}
	}
	if count["10.1.0.0/16"] != 0 {
		t.Fatalf("the full CIDR was chosen: %v", count)
	}
	for _, p := range []string{"10.0.0.0/16", "10.2.0.0/16", "10.3.0.0/16"} {
		// 400 expected, with a standard deviation of 16: outside [300,
		// 500] is a 1e-9 event; the bias above makes 600 and 300.
		if count[p] < 300 || count[p] > 500 {
			t.Fatalf("%s chosen %d times of 1200: %v", p, count[p], count)
		}
	}
}

// TestEveryPolicyFindsTheOneCIDRWithRoom: whatever CIDR a policy tries
// first, and however many full ones it skips, it goes on to the one with
// room, wrapping around the order; here that is the oldest.
func TestEveryPolicyFindsTheOneCIDRWithRoom(t *testing.T) {
	ctx := context.Background()
	for name, policy := range map[string]allocator.Policy{"oldest": allocator.OldestFirst(), "random": allocator.RandomOrder(), "most-free": allocator.MostFree()} {
		t.Run(name, func(t *testing.T) {
			cidrs := []string{"c000=10.0.0.0/28"}
			for i := 1; i < 150; i++ { // full ones span three words of marks
				cidrs = append(cidrs, fmt.Sprintf("c%03d=10.%d.%d.0/30", i, i/100+1, i%100))
			}
			a, _ := newAllocator(t, cidrs, allocator.WithPolicy(policy))
			for _, c := range cidrs[1:] {
				r, _ := cidrset.HostRange(pfx(c[strings.Index(c, "=")+1:]))
				for x := r.From(); ; x = x.Next() {
					mustStatic(t, a, x.String(), "fill"+x.String())
					if x == r.To() {
						break
					}
				}
			}
			for i := range 100 {
				x := mustNext(t, a, ipaddress.IPv4, fmt.Sprint("o", i))
				if !pfx("10.0.0.0/28").Contains(x) {
					t.Fatalf("allocated %s, in a full CIDR", x)
				}
				if err := a.Release(ctx, x); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestPoolsSharingAFirstAddressBothCountIt: nested CIDRs whose host
// ranges start at the same address both count an allocation of exactly
// that address, and both see it released.
func TestPoolsSharingAFirstAddressBothCountIt(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"a=10.0.0.0/24", "b=10.0.0.0/23", "c=10.0.0.0/22"})
	used := func() []string {
		var out []string
		for _, name := range []string{"a", "b", "c"} {
			u, err := a.Usage(name)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, u.Prefixes[0].Used.String())
		}
		return out
	}
	mustStatic(t, a, "10.0.0.1", "first")
	if got := used(); !slices.Equal(got, []string{"1", "1", "1"}) {
		t.Fatalf("used after allocating 10.0.0.1: %v, want 1 in each", got)
	}
	if err := a.Release(ctx, ip("10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if got := used(); !slices.Equal(got, []string{"0", "0", "0"}) {
		t.Fatalf("used after releasing it: %v, want 0 in each", got)
	}
}

// TestACustomPolicyIsFollowedAndMayMakeUpCandidates: a Policy of its own is
// followed in the order it gives, and a candidate it makes up (another
// family's prefix, a prefix of no CIDR) is skipped, not allocated from.
func TestACustomPolicyIsFollowedAndMayMakeUpCandidates(t *testing.T) {
	newestFirst := allocator.PolicyFunc(func(c []allocator.Candidate) {
		slices.Reverse(c)
		made := []allocator.Candidate{{CIDR: "v6", Prefix: pfx("fd00::/120")}, {CIDR: "ghost", Prefix: pfx("192.168.0.0/24")}}
		copy(c, made[:min(len(made), len(c))])
	})
	a, _ := newAllocator(t, []string{"c0=10.0.0.0/28", "c1=10.1.0.0/28", "c2=10.2.0.0/28", "c3=10.3.0.0/28", "v6=fd00::/120"}, allocator.WithPolicy(newestFirst))
	// The policy replaced the two newest with made-up candidates: c1 is
	// the first real one, then c0.
	for i := range 14 {
		if x := mustNext(t, a, ipaddress.IPv4, fmt.Sprint("a", i)); !pfx("10.1.0.0/28").Contains(x) {
			t.Fatalf("allocation %d took %s, want c1 first", i, x)
		}
	}
	if x := mustNext(t, a, ipaddress.IPv4, "b"); !pfx("10.0.0.0/28").Contains(x) {
		t.Fatalf("after c1 was full, got %s, want c0", x)
	}
}

// laggingStore is a memory store, taken the remote way, whose watchers can
// be held behind: events wait until Flush, as a watch stream lags.
type laggingStore struct {
	store.Store
	mu      sync.Mutex
	held    bool
	pending []func()
}

type laggingWatcher struct {
	s *laggingStore
	w store.Watcher
}

func (s *laggingStore) Watch(ctx context.Context, w store.Watcher) error {
	return s.Store.Watch(ctx, laggingWatcher{s, w})
}

func (l laggingWatcher) Reset(snap store.Snapshot) { l.w.Reset(snap) }

func (l laggingWatcher) Apply(e store.Event) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if l.s.held {
		l.s.pending = append(l.s.pending, func() { l.w.Apply(e) })
		return
	}
	l.w.Apply(e)
}

func (s *laggingStore) Hold() {
	s.mu.Lock()
	s.held = true
	s.mu.Unlock()
}

// Flush delivers what was held, in order, and stops holding.
func (s *laggingStore) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.pending {
		f()
	}
	s.pending, s.held = nil, false
}

// SPEC §4: a Terminating CIDR is re-checked whenever an address inside it
// is released, also by an allocator whose index has not yet seen it turn
// Terminating. Both allocators close at once, as two ipamctl commands
// would: the release itself must remove the CIDR.
func TestAReleaseRechecksACIDRItsLaggingIndexDoesNotKnowIsTerminating(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	lag := &laggingStore{Store: st}
	releaser, err := allocator.New(ctx, lag)
	if err != nil {
		t.Fatal(err)
	}
	deleter, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deleter.CreateCIDR(ctx, "c", pfx("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	held := ip("10.0.0.5")
	if _, err := releaser.Allocate(ctx, held, svc("a")); err != nil {
		t.Fatal(err)
	}
	lag.Hold()
	if err := deleter.DeleteCIDR(ctx, "c"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR holding %s: %v, want blocked", held, err)
	}
	deleter.Close()
	go func() { time.Sleep(100 * time.Millisecond); lag.Flush() }() // the stream catches up
	if err := releaser.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	releaser.Close()
	if c, err := st.GetCIDR(ctx, "c"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after the last address was released: CIDR %+v, %v; want it removed", c, err)
	}
}

// A release's wait for a lagging index is bounded apart from ctx: a watch
// that never catches up costs a release 5 s, not the caller's whole ctx.
func TestAReleaseWaitsForALaggingIndexAtMostFiveSeconds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lag := &laggingStore{Store: memory.New()}
	a, err := allocator.New(ctx, lag)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "c", pfx("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, ip("10.0.0.5"), svc("a")); err != nil {
		t.Fatal(err)
	}
	lag.Hold()
	defer lag.Flush()
	start := time.Now()
	if err := a.Release(ctx, ip("10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("Release took %v behind a watch that never caught up", took)
	}
}

// hookedStore runs a step of another process at a chosen point of this
// one's calls: before its next address create, and after its next read of
// a CIDR.
// hookedStore runs each hook once, in whichever goroutine gets there
// first (the allocator's background reconciler reads CIDRs too). Set the
// hooks before the store is shared, or with setAfterGetCIDR.
type hookedStore struct {
	store.Store
	mu           sync.Mutex
	beforeCreate func()
	afterGetCIDR func()
}

// take returns *hook and clears it.
func (h *hookedStore) take(hook *func()) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := *hook
	*hook = nil
	return f
}

func (h *hookedStore) setAfterGetCIDR(f func()) {
	h.mu.Lock()
	h.afterGetCIDR = f
	h.mu.Unlock()
}

func (h *hookedStore) CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...store.Fence) ([]ipaddress.IPAddress, error) {
	if f := h.take(&h.beforeCreate); f != nil {
		f()
	}
	return h.Store.CreateAddresses(ctx, recs, fences...)
}

func (h *hookedStore) GetCIDR(ctx context.Context, name string) (cidrset.CIDR, error) {
	c, err := h.Store.GetCIDR(ctx, name)
	if f := h.take(&h.afterGetCIDR); f != nil {
		f()
	}
	return c, err
}

// An allocation fenced out by a DeleteCIDR re-reads the CIDR; if the
// deletion completes, and the watch applies it, before that read is
// applied, the stale copy must not come back into the index, where no
// event would ever remove it.
func TestAFencedAllocationDoesNotBringBackACIDRRemovedMeanwhile(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	lag := &laggingStore{Store: st}
	hooked := &hookedStore{Store: lag}
	a, err := allocator.New(ctx, hooked)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// The other process writes the store directly: no allocator of its
	// own, whose background check could remove l at a time of its choosing.
	if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "l", Prefixes: []netip.Prefix{pfx("10.0.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	var marked cidrset.CIDR
	hooked.beforeCreate = func() {
		// The other process marks l Terminating; this one's watch lags.
		lag.Hold()
		c, err := st.GetCIDR(ctx, "l")
		if err != nil {
			t.Error(err)
			return
		}
		c.Terminating = true
		if marked, err = st.UpdateCIDR(ctx, c); err != nil {
			t.Error(err)
		}
	}
	hooked.setAfterGetCIDR(func() {
		// The re-read is done; the other process removes l (nothing holds
		// it) and the watch catches up before the allocator applies what
		// it read.
		if err := st.DeleteCIDR(ctx, "l", marked.Revision); err != nil {
			t.Errorf("DeleteCIDR(l): %v", err)
		}
		lag.Flush()
	})

	if _, err := a.Allocate(ctx, ip("10.0.0.5"), svc("a")); err == nil {
		t.Fatal("an allocation from a CIDR deleted meanwhile succeeded")
	}
	if c, err := a.GetCIDR("l"); err == nil {
		t.Fatalf("l is gone from the store, but the index shows it: %+v", c)
	}
}

// SPEC §7 counts allocation errors per CIDR: a static request refused
// inside a live CIDR, because the address is excluded or because another
// request of this allocator is creating it, is an error of that CIDR, as
// a request refused by the store is.
func TestObserverChargesARefusedStaticRequestToItsCIDR(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	// Not store.Locked: creates are in flight outside the allocator's lock.
	h := &hookedStore{Store: memory.New()}
	a, err := allocator.New(ctx, h, allocator.WithObserver(rec),
		allocator.WithExcluded(netipx.IPRangeFrom(ip("10.0.0.10"), ip("10.0.0.10"))))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "c", pfx("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, ip("10.0.0.10"), svc("x")); !errors.Is(err, allocator.ErrExcluded) {
		t.Fatalf("excluded address: %v, want ErrExcluded", err)
	}
	// A second request for the address while its create is in flight
	// waits for the create's outcome, then is refused.
	second := make(chan error, 1)
	h.beforeCreate = func() {
		go func() {
			_, err := a.Allocate(ctx, ip("10.0.0.5"), svc("second"))
			second <- err
		}()
		for hang := time.Now().Add(time.Minute); !allocator.WaitingForInFlight(a); time.Sleep(time.Millisecond) {
			if time.Now().After(hang) {
				t.Fatal("the second request does not wait for the create in flight")
			}
		}
	}
	if _, err := a.Allocate(ctx, ip("10.0.0.5"), svc("first")); err != nil {
		t.Fatal(err)
	}
	if err := <-second; !errors.Is(err, allocator.ErrAllocated) {
		t.Fatalf("a request for an address being created: %v, want ErrAllocated", err)
	}
	var got []string
	rec.mu.Lock()
	for _, ev := range rec.events {
		got = append(got, fmt.Sprintf("%q %s %v", ev.CIDR, ev.Scope, ev.Err != nil))
	}
	rec.mu.Unlock()
	// The first and the second call end in either order.
	slices.Sort(got)
	want := []string{`"c" static false`, `"c" static true`, `"c" static true`}
	if !slices.Equal(got, want) {
		t.Fatalf("events (cidr, scope, failed) = %q, want %q", got, want)
	}
}

// A request whose context had ended before anything was chosen is counted
// under no CIDR, whether the store is in-process (store.Locked) or not:
// the same outcome gets the same labels over every store.
func TestObserverChargesACanceledRequestToNoCIDROverEveryStore(t *testing.T) {
	for _, locked := range []bool{true, false} {
		t.Run(fmt.Sprintf("locked=%v", locked), func(t *testing.T) {
			var st store.Store = memory.New()
			if !locked {
				st = &hookedStore{Store: st}
			}
			rec := &recorder{}
			a, err := allocator.New(context.Background(), st, allocator.WithObserver(rec))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if _, err := a.CreateCIDR(context.Background(), "ds", pfx("10.4.0.0/24"), pfx("fd04::/120")); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if _, _, err := a.AllocateDualStack(ctx, svc("x"), netip.Addr{}, netip.Addr{}); !errors.Is(err, context.Canceled) {
				t.Fatalf("AllocateDualStack: %v, want context.Canceled", err)
			}
			if _, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("y")); !errors.Is(err, context.Canceled) {
				t.Fatalf("AllocateNext: %v, want context.Canceled", err)
			}
			if _, err := a.Allocate(ctx, ip("10.4.0.7"), svc("z")); !errors.Is(err, context.Canceled) {
				t.Fatalf("Allocate: %v, want context.Canceled", err)
			}
			if len(rec.events) != 4 {
				t.Fatalf("%d events, want 4: %+v", len(rec.events), rec.events)
			}
			for _, ev := range rec.events {
				if ev.CIDR != "" || !errors.Is(ev.Err, context.Canceled) {
					t.Errorf("event %+v: want a canceled request under no CIDR", ev)
				}
			}
		})
	}
}

// An allocation fenced out re-reads its CIDR; when the read finds it gone,
// the index's copy goes too, but only the copy the allocation was fenced
// on. A CIDR of the same name created since (the default CIDR replaced,
// SPEC §8) that the watch applied meanwhile must stay, or the allocator
// would serve nothing from a live CIDR until it next changed.
func TestAFenceRefreshKeepsACIDRCreatedAgainSinceTheRead(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	h := &hookedStore{Store: st} // not store.Locked: the fenced retry path
	a, err := allocator.New(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "kubernetes", pfx("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	recreated := make(chan struct{})
	h.beforeCreate = func() { // another process deletes the CIDR ...
		c, err := st.GetCIDR(ctx, "kubernetes")
		if err != nil {
			t.Fatal(err)
		}
		c.Terminating = true
		if c, err = st.UpdateCIDR(ctx, c); err != nil {
			t.Fatal(err)
		}
		// The allocator's reconciler, told of the mark, may remove the
		// empty CIDR first: gone all the same.
		if err := st.DeleteCIDR(ctx, "kubernetes", c.Revision); err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		// ... and creates it again after the re-read (the allocation's,
		// or the background reconciler's, woken by the mark).
		h.setAfterGetCIDR(func() {
			defer close(recreated)
			if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "kubernetes", Prefixes: []netip.Prefix{pfx("10.0.0.0/24")}}); err != nil {
				t.Error(err)
			}
		})
	}
	_, _ = a.AllocateNext(ctx, ipaddress.IPv4, svc("x"))
	select {
	case <-recreated:
	case <-time.After(10 * time.Second):
		t.Fatal("no one re-read the CIDR after the allocation was fenced out")
	}
	stored, err := st.GetCIDR(ctx, "kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.WaitRevision(ctx, stored.Revision); err != nil {
		t.Fatal(err)
	}
	if c, err := a.GetCIDR("kubernetes"); err != nil || c.Revision != stored.Revision {
		t.Fatalf("index copy of the live CIDR: %+v, %v; want revision %d", c, err, stored.Revision)
	}
	if _, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("y")); err != nil {
		t.Fatalf("AllocateNext from the live CIDR: %v", err)
	}
}

// SPEC §5: EnsureDefault makes sure the default CIDR exists, creating it
// if missing. Another process removing it between EnsureDefault's read and
// its single- to dual-stack update must not make it fail "not found".
func TestEnsureDefaultCreatesADefaultRemovedSinceItsRead(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	h := &hookedStore{Store: st}
	a, err := allocator.New(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	v4, v6 := pfx("10.96.0.0/28"), pfx("fd00::/120")
	if _, err := a.EnsureDefault(ctx, v4); err != nil {
		t.Fatal(err)
	}
	h.setAfterGetCIDR(func() {
		c, err := st.GetCIDR(ctx, cidrset.DefaultName)
		if err != nil {
			t.Fatal(err)
		}
		c.Terminating = true
		if c, err = st.UpdateCIDR(ctx, c); err != nil {
			t.Fatal(err)
		}
		// The allocator's reconciler, told of the mark, may remove the
		// empty CIDR first: gone all the same.
		if err := st.DeleteCIDR(ctx, cidrset.DefaultName, c.Revision); err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
	})

	c, err := a.EnsureDefault(ctx, v4, v6)
	if err != nil {
		t.Fatalf("EnsureDefault(%v, %v) = %v; want the default CIDR created again", v4, v6, err)
	}
	if got, err := st.GetCIDR(ctx, cidrset.DefaultName); err != nil || !slices.Equal(got.Prefixes, []netip.Prefix{v4, v6}) || got.Terminating || got.Revision != c.Revision {
		t.Fatalf("after EnsureDefault: %+v, %v; returned %+v", got, err, c)
	}
}

// SPEC §1 and §5: a default configuration that could not make a CIDR (two
// prefixes of one family) is ErrInvalid, whether the default CIDR is
// missing, stored with the first prefix, or stored different, rather than
// ErrDefaultMismatch in the last case only.
func TestEnsureDefaultRefusesAnInvalidConfigurationWhateverIsStored(t *testing.T) {
	ctx := context.Background()
	bad := []netip.Prefix{pfx("10.96.0.0/28"), pfx("10.97.0.0/28")}
	for _, stored := range [][]netip.Prefix{nil, {pfx("10.96.0.0/28")}, {pfx("10.1.0.0/28")}} {
		a, st := newAllocator(t, nil)
		if stored != nil {
			if _, err := a.EnsureDefault(ctx, stored...); err != nil {
				t.Fatal(err)
			}
		}
		c, err := a.EnsureDefault(ctx, bad...)
		if !errors.Is(err, allocator.ErrInvalid) || c.Name != "" {
			t.Errorf("stored %v: EnsureDefault(%v) = %+v, %v; want ErrInvalid", stored, bad, c, err)
		}
		if got, err := st.GetCIDR(ctx, cidrset.DefaultName); stored != nil && (err != nil || !slices.Equal(got.Prefixes, stored)) {
			t.Errorf("stored %v: after the refusal %+v, %v", stored, got, err)
		}
	}
}

// probeSource is a rand.Source that records how many callers were in it at
// once; its Uint64 lingers, so that overlapping calls do overlap.
type probeSource struct{ in, most atomic.Int32 }

func (p *probeSource) Uint64() uint64 {
	n := p.in.Add(1)
	for m := p.most.Load(); n > m && !p.most.CompareAndSwap(m, n); m = p.most.Load() {
	}
	time.Sleep(20 * time.Microsecond)
	p.in.Add(-1)
	return uint64(n) * 0x9e3779b97f4a7c15
}

// One RandomStart value, with a source of the embedder's, given to two
// allocators that each have their own lock (a store other than memory's)
// is used by both at once: it must read its source one caller at a time.
func TestRandomStartSharedByAllocatorsReadsItsSourceOneAtATime(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	src := &probeSource{}
	strategy := allocator.RandomStart(src)
	var as []*allocator.Allocator
	for range 2 {
		a, err := allocator.New(ctx, unlockedStore{st}, allocator.WithStrategy(strategy))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		as = append(as, a)
	}
	if _, err := as[0].CreateCIDR(ctx, "c", pfx("10.0.0.0/16")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i, a := range as {
		wg.Go(func() {
			for j := range 200 {
				r, err := a.AllocateNext(ctx, ipaddress.IPv4, svc(fmt.Sprintf("s%d-%d", i, j)))
				if err != nil {
					t.Error(err)
					return
				}
				if err := a.Release(ctx, r.Addr); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if most := src.most.Load(); most != 1 {
		t.Fatalf("%d callers were in the source at once, want 1", most)
	}
}

// An address no record can have (the zero Addr, a zoned or IPv4-mapped
// one) is invalid input for Get as for Release, not an address that
// happens to have no record.
func TestGetAndReleaseRefuseAnAddressNoRecordCanHave(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"c=10.0.0.0/24"})
	for _, addr := range []netip.Addr{{}, ip("fe80::1%eth0"), ip("::ffff:10.0.0.5")} {
		if _, err := a.Get(ctx, addr); !errors.Is(err, allocator.ErrInvalid) {
			t.Errorf("Get(%v) = %v, want ErrInvalid", addr, err)
		}
		if err := a.Release(ctx, addr); !errors.Is(err, allocator.ErrInvalid) {
			t.Errorf("Release(%v) = %v, want ErrInvalid", addr, err)
		}
	}
	if _, err := a.Get(ctx, ip("10.0.0.5")); !errors.Is(err, allocator.ErrNotFound) {
		t.Errorf("Get of a free address = %v, want ErrNotFound", err)
	}
}
