package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
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
// is marked Terminating too. b must not serve from the n it read ahead of
// its watch: it waits for its watch to show n, and with it inner's mark,
// so that its allocation touches inner (store.Fence's Touch) and the stale
// removal fails its fence. No removal may leave an address covered by
// Terminating CIDRs only.
func TestAnAllocatorWhoseWatchIsBehindTouchesTheTerminatingCIDRItServesInto(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	removals := &removalChecker{cidrs: map[string]cidrset.CIDR{}, addrs: map[netip.Addr]bool{}}
	if err := mem.Watch(ctx, removals); err != nil {
		t.Fatal(err)
	}
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
		// Allocator a's reconciler, told of the mark, may remove the
		// empty CIDR first: gone all the same.
		if err := mem.DeleteCIDR(ctx, "n", n.Revision); err != nil && !errors.Is(err, store.ErrNotFound) {
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
		// then is its watch let go, in order.
		var r result
		finished := false
		// Polled (not waitUntil: this may run in a's reconciler, where
		// t.Fatal must not be called); the deadline only bounds a failure.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
			select {
			case r = <-done:
				finished = true
			default:
			}
			if finished || allocator.WaitingForWatch(b) {
				break
			}
			if time.Now().After(deadline) {
				t.Error("b neither served nor waits for its watch")
				return
			}
		}
		if !finished {
			held.release()
			r = <-done
		}
		// Else b's watch is let go only once n is Terminating too, lest
		// b's own reconciler remove inner while n still covers it.
		defer held.release()
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
	removals.mu.Lock()
	defer removals.mu.Unlock()
	for _, v := range removals.violations {
		t.Error(v)
	}
	if _, err := mem.GetAddress(ctx, served); err != nil {
		t.Fatalf("%s: %v", served, err)
	}
}

// removalChecker watches a store and notes every CIDR removal that leaves
// an address it host-contained covered by no live CIDR.
type removalChecker struct {
	mu         sync.Mutex
	cidrs      map[string]cidrset.CIDR
	addrs      map[netip.Addr]bool
	violations []string
}

func (r *removalChecker) Reset(s store.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.cidrs)
	clear(r.addrs)
	for _, c := range s.CIDRs {
		r.cidrs[c.Name] = c
	}
	for _, a := range s.Addrs {
		r.addrs[a] = true
	}
}

func (r *removalChecker) Apply(e store.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e.Kind {
	case store.CIDRPut:
		r.cidrs[e.CIDR.Name] = e.CIDR
	case store.AddressPut:
		r.addrs[e.Address.Addr] = true
	case store.AddressDeleted:
		delete(r.addrs, e.Address.Addr)
	case store.CIDRDeleted:
		gone := r.cidrs[e.CIDR.Name]
		delete(r.cidrs, gone.Name)
		for a := range r.addrs {
			if !slices.ContainsFunc(gone.Prefixes, func(p netip.Prefix) bool { return cidrset.HostContains(p, a) }) {
				continue
			}
			live := false
			for _, c := range r.cidrs {
				live = live || !c.Terminating && slices.ContainsFunc(c.Prefixes, func(p netip.Prefix) bool { return cidrset.HostContains(p, a) })
			}
			if !live {
				r.violations = append(r.violations, fmt.Sprintf("revision %d: removing %s %v left %s covered by no live CIDR", e.Revision, gone.Name, gone.Prefixes, a))
			}
		}
	}
}
