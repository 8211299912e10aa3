package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// storeHistory is a Watcher that keeps every event after its first
// snapshot, for checks of the whole history once a run is over.
type storeHistory struct {
	mu     sync.Mutex
	snap   store.Snapshot
	events []store.Event
	resets int
}

func (h *storeHistory) Reset(s store.Snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resets++
	if h.resets == 1 {
		h.snap = s
	}
}

func (h *storeHistory) Apply(e store.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, e)
}

// check replays the history: every address put must lie inside a live
// CIDR as the store held them just before (SPEC §3: Terminating or removed
// CIDRs never serve), and every CIDR removal must leave each held address
// it contained inside another live CIDR (SPEC §4, Beyond).
func (h *storeHistory) check(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.resets != 1 {
		t.Fatalf("history watcher was reset %d times: history incomplete", h.resets)
	}
	cidrs := map[string]cidrset.CIDR{}
	for _, c := range h.snap.CIDRs {
		cidrs[c.Name] = c
	}
	held := map[netip.Addr]bool{}
	for _, a := range h.snap.Addrs {
		held[a] = true
	}
	liveHolding := func(a netip.Addr) bool {
		for _, c := range cidrs {
			if c.Terminating {
				continue
			}
			for _, p := range c.Prefixes {
				if cidrset.HostContains(p, a) {
					return true
				}
			}
		}
		return false
	}
	// Events of one revision (a create of two records and its touches)
	// are one write: the state before it is the one to check against.
	for i := 0; i < len(h.events); {
		rev := h.events[i].Revision
		j := i
		for j < len(h.events) && h.events[j].Revision == rev {
			j++
		}
		batch := h.events[i:j]
		for _, e := range batch {
			if e.Kind == store.AddressPut && !held[e.Address.Addr] && !liveHolding(e.Address.Addr) {
				t.Errorf("RecordCreatedOnlyInsideLiveCIDR: %s put at revision %d, inside no live CIDR of %v", e.Address.Addr, rev, cidrList(cidrs))
			}
		}
		for _, e := range batch {
			switch e.Kind {
			case store.AddressPut:
				held[e.Address.Addr] = true
			case store.AddressDeleted:
				delete(held, e.Address.Addr)
			case store.CIDRPut:
				cidrs[e.CIDR.Name] = e.CIDR
			case store.CIDRDeleted:
				old, ok := cidrs[e.CIDR.Name]
				if !ok {
					t.Errorf("revision %d: CIDR %s deleted, not known", rev, e.CIDR.Name)
					continue
				}
				if !old.Terminating {
					t.Errorf("OnlyTerminatingCIDRRemoved: %s removed at revision %d", old.Name, rev)
				}
				delete(cidrs, e.CIDR.Name)
				for a := range held {
					inside := slices.ContainsFunc(old.Prefixes, func(p netip.Prefix) bool { return cidrset.HostContains(p, a) })
					if inside && !liveHolding(a) {
						t.Errorf("NoOrphanAfterCIDRRemoval: %s removed at revision %d, leaving %s in no live CIDR of %v", old.Name, rev, a, cidrList(cidrs))
					}
				}
			}
		}
		i = j
	}
}

func cidrList(m map[string]cidrset.CIDR) []string {
	var out []string
	for _, c := range m {
		s := fmt.Sprintf("%s%v", c.Name, c.Prefixes)
		if c.Terminating {
			s += "(T)"
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// sharedAllocators is newAllocators, and a history watcher on one more
// store of the same prefix.
func sharedAllocators(t *testing.T, ctx context.Context, c *testCluster, prefix string, n int, opts func(i int) []allocator.Option) ([]*allocator.Allocator, *storeHistory) {
	t.Helper()
	hst, err := New(c.newClient(t), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hst.Close() })
	h := &storeHistory{}
	wctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := hst.Watch(wctx, h); err != nil {
		t.Fatal(err)
	}
	return newAllocators(t, ctx, c, prefix, n, opts), h
}

// newAllocators starts n allocators over one etcd, each with its own
// client, store and watch, under key prefix (opts: each one's options, or
// nil), all closed at the test's end.
func newAllocators(t *testing.T, ctx context.Context, c *testCluster, prefix string, n int, opts func(i int) []allocator.Option) []*allocator.Allocator {
	t.Helper()
	var out []*allocator.Allocator
	for i := range n {
		st, err := New(c.newClient(t), WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		var o []allocator.Option
		if opts != nil {
			o = opts(i)
		}
		a, err := allocator.New(ctx, st, o...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close(); _ = st.Close() })
		out = append(out, a)
	}
	return out
}

// SPEC §3: a static address asked of several allocators at once, each over
// its own view of one etcd, is given to exactly one; every other gets
// ErrAllocated, never another error, also while the CIDR serving it gains
// an IPv6 prefix (its revision changes under the allocations) and the
// addresses lie inside a Terminating CIDR as well (each create touches it).
func TestStaticSameAddressOneWinnerOthersErrAllocated(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	allocs, hist := sharedAllocators(t, ctx, c, "/static", 3, nil)
	a0 := allocs[0]
	if _, err := a0.CreateCIDR(ctx, "live", netip.MustParsePrefix("10.2.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if _, err := a0.CreateCIDR(ctx, "wide", netip.MustParsePrefix("10.2.0.0/23")); err != nil {
		t.Fatal(err)
	}
	// An address only "wide" holds keeps it Terminating.
	if _, err := a0.Allocate(ctx, netip.MustParseAddr("10.2.1.7"), ipaddress.ParentRef{Resource: "services", Name: "keep"}); err != nil {
		t.Fatal(err)
	}
	if err := a0.DeleteCIDR(ctx, "wide"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(wide) = %v, want ErrDeletionBlocked", err)
	}
	// Every allocator serves "live" once its own watch shows it: until
	// then it answers ErrMismatch, as the package documents.
	wide, err := a0.GetCIDR("wide")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range allocs {
		if err := a.WaitRevision(ctx, wide.Revision); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(20 * time.Millisecond)
		if _, err := a0.UpdateCIDR(ctx, "live", netip.MustParsePrefix("10.2.0.0/24"), netip.MustParsePrefix("fd00:2::/120")); err != nil {
			t.Errorf("UpdateCIDR: %v", err)
		}
	})
	for host := 1; host <= 120; host++ {
		addr := netip.AddrFrom4([4]byte{10, 2, 0, byte(host)})
		errs := make([]error, len(allocs))
		var inner sync.WaitGroup
		for i, a := range allocs {
			inner.Go(func() {
				_, errs[i] = a.Allocate(ctx, addr, ipaddress.ParentRef{Resource: "services", Name: fmt.Sprintf("s%d-%d", host, i)})
			})
		}
		inner.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case errors.Is(err, allocator.ErrAllocated):
			default:
				t.Errorf("Allocate(%s) from allocator %d: %v; want nil or ErrAllocated", addr, i, err)
			}
		}
		if won != 1 {
			t.Errorf("Allocate(%s): %d winners (%v)", addr, won, errs)
		}
	}
	wg.Wait()
	time.Sleep(200 * time.Millisecond) // the history watcher catches up
	hist.check(t)
}

// SPEC §3 (Beyond: dual-stack both or neither) with several allocators over
// one etcd while the IPv4-only CIDR serving them gains an IPv6 prefix, and
// then, with another IPv6 CIDR serving, turns Terminating: a call either
// records both addresses for its owner or none, no record lies outside the
// live CIDRs as they were when it was written, and no removal orphans one.
func TestDualStackBothOrNeitherDuringCIDRLifecycle(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	allocs, hist := sharedAllocators(t, ctx, c, "/dual", 3, nil)
	a0 := allocs[0]
	if _, err := a0.CreateCIDR(ctx, "d", netip.MustParsePrefix("10.3.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if _, err := a0.CreateCIDR(ctx, "four", netip.MustParsePrefix("10.4.0.0/26")); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	given := map[netip.Addr]string{}
	seq := 0
	for i, a := range allocs {
		for w := range 2 {
			wg.Go(func() {
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					owner := ipaddress.ParentRef{Resource: "services", Namespace: "dual", Name: fmt.Sprintf("a%d-w%d-%d", i, w, k)}
					r4, r6, err := a.AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{})
					got, gerr := a.Store().AddressesOf(ctx, owner)
					if gerr != nil {
						t.Errorf("AddressesOf: %v", gerr)
						return
					}
					if err != nil {
						if !errors.Is(err, allocator.ErrMismatch) && !errors.Is(err, allocator.ErrFull) {
							t.Errorf("AllocateDualStack: %v; want nil, ErrMismatch or ErrFull", err)
						}
						if len(got) != 0 {
							t.Errorf("DualStackBothOrNeither: failed (%v), store holds %v for %s", err, got, owner.Name)
						}
						continue
					}
					if len(got) != 2 || !r4.Addr.Is4() || !r6.Addr.Is6() {
						t.Errorf("DualStackBothOrNeither: gave %s %s, store holds %v for %s", r4.Addr, r6.Addr, got, owner.Name)
					}
					mu.Lock()
					seq++
					for _, x := range []netip.Addr{r4.Addr, r6.Addr} {
						if o, ok := given[x]; ok {
							t.Errorf("NoDoubleAllocation: %s given to %s and %s, never released", x, o, owner.Name)
						}
						given[x] = owner.Name
					}
					release := seq%3 == 0
					if release {
						delete(given, r4.Addr)
						delete(given, r6.Addr)
					}
					mu.Unlock()
					if release {
						for _, x := range []netip.Addr{r4.Addr, r6.Addr} {
							if err := a.Release(ctx, x); err != nil {
								t.Errorf("Release(%s): %v", x, err)
							}
						}
					}
				}
			})
		}
	}
	time.Sleep(150 * time.Millisecond)
	if _, err := a0.UpdateCIDR(ctx, "d", netip.MustParsePrefix("10.3.0.0/24"), netip.MustParsePrefix("fd00:3::/120")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := allocs[1].CreateCIDR(ctx, "six", netip.MustParsePrefix("fd00:6::/120")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := allocs[2].DeleteCIDR(ctx, "d"); err != nil && !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	time.Sleep(200 * time.Millisecond)
	hist.check(t)
}

// SPEC §3 and §4 with allocators of every built-in Policy over one etcd,
// while a CIDR is deleted and created again under the same name with other
// prefixes, over and over: no address is ever recorded outside the live
// CIDRs as the store held them, no removal orphans one, and once the churn
// stops and every view has caught up, each allocator finds the family full
// exactly when every live CIDR of it is full in the store.
func TestRecreatedNameOtherPrefixesNoOrphanPolicies(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	policies := []allocator.Policy{allocator.OldestFirst(), allocator.MostFree(), allocator.RandomOrder()}
	allocs, hist := sharedAllocators(t, ctx, c, "/recreate", 3, func(i int) []allocator.Option {
		return []allocator.Option{allocator.WithPolicy(policies[i])}
	})
	a0 := allocs[0]
	if _, err := a0.CreateCIDR(ctx, "base", netip.MustParsePrefix("10.6.0.0/29")); err != nil {
		t.Fatal(err)
	}
	shapes := [][]netip.Prefix{
		{netip.MustParsePrefix("10.5.0.0/28")},
		{netip.MustParsePrefix("10.5.1.0/28")},
		{netip.MustParsePrefix("10.5.0.0/27")},
		{netip.MustParsePrefix("10.5.2.0/29")},
	}
	x, err := a0.CreateCIDR(ctx, "x", shapes[0]...)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range allocs { // "base" is live throughout, in every view
		if err := a.WaitRevision(ctx, x.Revision); err != nil {
			t.Fatal(err)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, a := range allocs {
		for w := range 2 {
			wg.Go(func() {
				var mine []netip.Addr
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					rec, err := a.AllocateNext(ctx, ipaddress.IPv4, ipaddress.ParentRef{Resource: "services", Name: fmt.Sprintf("a%d-w%d-%d", i, w, k)})
					switch {
					case err == nil:
						mine = append(mine, rec.Addr)
					case errors.Is(err, allocator.ErrFull):
					default:
						t.Errorf("AllocateNext: %v; want nil or ErrFull", err)
					}
					if len(mine) > 3 || err != nil && len(mine) > 0 {
						if err := a.Release(ctx, mine[0]); err != nil {
							t.Errorf("Release(%s): %v", mine[0], err)
						}
						mine = mine[1:]
					}
				}
			})
		}
	}
	var recreated atomic.Int64
	wg.Go(func() {
		for k := 1; ; k++ {
			select {
			case <-stop:
				return
			default:
			}
			a := allocs[k%len(allocs)]
			err := a.DeleteCIDR(ctx, "x")
			switch {
			case err == nil, errors.Is(err, allocator.ErrNotFound):
				if _, err := a.CreateCIDR(ctx, "x", shapes[k%len(shapes)]...); err == nil {
					recreated.Add(1)
				} else if !errors.Is(err, allocator.ErrExists) {
					t.Errorf("CreateCIDR(x): %v", err)
				}
			case errors.Is(err, allocator.ErrDeletionBlocked):
				time.Sleep(5 * time.Millisecond)
			default:
				t.Errorf("DeleteCIDR(x): %v", err)
			}
		}
	})
	// Two seconds of churn at least, and until x has been removed and
	// created again a few times: on a loaded machine the workers can keep
	// its deletion blocked for longer. A minute without is a failure.
	for start := time.Now(); time.Since(start) < 2*time.Second || recreated.Load() < 3; time.Sleep(10 * time.Millisecond) {
		if time.Since(start) > time.Minute {
			t.Error("x was removed and created again fewer than 3 times in a minute: too little checked")
			break
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("x created again %d times", recreated.Load())
	time.Sleep(300 * time.Millisecond)
	hist.check(t)
	// Quiescent: fill every allocator's family to the end; each ErrFull
	// must then match the store.
	recs, err := a0.Store().ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		inside := false
		for _, cd := range a0.CIDRs() {
			inside = inside || slices.ContainsFunc(cd.Prefixes, func(p netip.Prefix) bool { return cidrset.HostContains(p, r.Addr) })
		}
		if !inside {
			t.Errorf("record %s inside no CIDR of %v", r.Addr, a0.CIDRs())
		}
	}
	for i, a := range allocs {
		for k := 0; ; k++ {
			_, err := a.AllocateNext(ctx, ipaddress.IPv4, ipaddress.ParentRef{Resource: "services", Name: fmt.Sprintf("fill%d-%d", i, k)})
			if err == nil {
				continue
			}
			if !errors.Is(err, allocator.ErrFull) {
				t.Fatalf("allocator %d: AllocateNext: %v", i, err)
			}
			break
		}
		// Every other allocator must see it full too, once caught up.
		free := freeInLiveCIDRs(t, ctx, a0.Store(), a)
		if free > 0 {
			t.Errorf("allocator %d (%T) got ErrFull with %d addresses free in live CIDRs", i, policies[i], free)
		}
	}
}

// freeInLiveCIDRs counts the IPv4 host addresses of live CIDRs, as a's
// index knows them after catching up with the store, that hold no record.
func freeInLiveCIDRs(t *testing.T, ctx context.Context, st store.Store, a *allocator.Allocator) int {
	t.Helper()
	recs, err := st.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := map[netip.Addr]bool{}
	for _, r := range recs {
		held[r.Addr] = true
	}
	free := 0
	seen := map[netip.Addr]bool{}
	for _, cd := range a.CIDRs() {
		if cd.Terminating {
			continue
		}
		got, err := st.GetCIDR(ctx, cd.Name)
		if err != nil || got.Terminating || got.Revision < cd.Revision {
			continue
		}
		for _, p := range got.Prefixes {
			if !p.Addr().Is4() {
				continue
			}
			for x := p.Addr().Next(); p.Contains(x); x = x.Next() {
				if cidrset.HostContains(p, x) && !held[x] && !seen[x] {
					seen[x] = true
					free++
				}
			}
		}
	}
	return free
}
