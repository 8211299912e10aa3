package allocator_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/memory"
)

// Deletion safety, beyond the reference, with two allocators: a
// Terminating CIDR goes only when every address inside it is covered by a
// live CIDR. The removal of "inner" is decided (by allocator a) while it
// holds no address and while no other CIDR overlaps it. Before the removal
// is written, the CIDR "n" is removed and created again over inner, and
// allocator b, whose watch is behind (it has seen neither inner's mark nor
// n's new prefix), allocates from n: its fence on the n it knew fails, it
// reads n again from the store and serves an address inside inner. Then n
// is marked Terminating too. b's allocation must touch inner all the same
// (store.Fence's Touch), so that the stale removal fails its fence: the
// address must not be left covered by Terminating CIDRs only.
func TestAnAllocatorWhoseWatchIsBehindTouchesTheTerminatingCIDRItServesInto(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	hooked := &hookedDelete{Store: mem, name: "inner"}
	a, err := allocator.New(ctx, hooked)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	held := &heldStore{Store: mem}
	// MostFree and Sequential make b's choices certain: the larger CIDR
	// first, its lowest free upper-band address.
	b, err := allocator.New(ctx, held, allocator.WithPolicy(allocator.MostFree()), allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.CreateCIDR(ctx, "n", netip.MustParsePrefix("10.1.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateCIDR(ctx, "inner", netip.MustParsePrefix("10.0.0.0/25")); err != nil {
		t.Fatal(err)
	}
	if got := names(b.CIDRs()); len(got) != 2 {
		t.Fatalf("b knows %v, want both CIDRs", got)
	}
	held.mu.Lock()
	held.hold = true // b's view stops here
	held.mu.Unlock()

	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "s"}
	blocker := netip.MustParseAddr("10.0.0.100")
	if _, err := a.Allocate(ctx, blocker, owner); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCIDR(ctx, "inner"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(inner) holding %s = %v, want it blocked", blocker, err)
	}
	var served netip.Addr
	hooked.then = func() {
		// Between the decision to remove inner and its write. Every CIDR
		// change goes to the store directly: an allocator's would decide
		// about inner itself.
		n, err := mem.GetCIDR(ctx, "n")
		if err != nil {
			t.Error(err)
			return
		}
		n.Terminating = true
		if n, err = mem.UpdateCIDR(ctx, n); err != nil {
			t.Error(err)
			return
		}
		if err := mem.DeleteCIDR(ctx, "n", n.Revision); err != nil {
			t.Error(err)
			return
		}
		if _, err := mem.CreateCIDR(ctx, cidrset.CIDR{Name: "n", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err != nil {
			t.Error(err)
			return
		}
		type result struct {
			rec ipaddress.IPAddress
			err error
		}
		done := make(chan result, 1)
		go func() {
			rec, err := b.AllocateNext(ctx, ipaddress.IPv4, ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "late"})
			done <- result{rec, err}
		}()
		// b serves at once on what it read, or waits for its watch: only
		// then is the watch let go, in order.
		var r result
		finished := false
		waitUntil(t, "b served, or waits for its watch", func() bool {
			select {
			case r = <-done:
				finished = true
				return true
			default:
				return allocator.WaitingForWatch(b)
			}
		})
		held.release()
		if !finished {
			r = <-done
		}
		if r.err != nil {
			t.Error(r.err)
			return
		}
		rec := r.rec
		served = rec.Addr
		if n, err = mem.GetCIDR(ctx, "n"); err != nil {
			t.Error(err)
			return
		}
		n.Terminating = true
		if _, err := mem.UpdateCIDR(ctx, n); err != nil {
			t.Error(err)
		}
	}
	// Its last address released, inner's removal is decided again: the
	// hook runs inside that decision.
	if err := a.Release(ctx, blocker); err != nil {
		t.Fatal(err)
	}
	if !netip.MustParsePrefix("10.0.0.0/25").Contains(served) {
		t.Fatalf("b served %v, want an address inside inner (the test's premise)", served)
	}
	for _, name := range []string{"inner", "n"} {
		if c, err := mem.GetCIDR(ctx, name); err != nil || !c.Terminating {
			t.Errorf("%s while %s is held: %+v, %v; want it Terminating: %s is covered by no live CIDR", name, served, c, err, served)
		}
	}
	if _, err := mem.GetAddress(ctx, served); err != nil {
		t.Fatalf("%s: %v", served, err)
	}
}
