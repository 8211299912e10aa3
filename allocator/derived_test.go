package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"go4.org/netipx"
	"pgregory.net/rapid"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/internal/u128"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// TestCIDRChangesKeepWhatIsDerivedFromTheIndex creates, widens to dual
// stack, marks Terminating and deletes CIDRs through the store, puts and
// deletes addresses anywhere, and runs Reset again as a re-synced watch
// does, while checking that what the allocation path reads (pools,
// poolList, reach, live and each pool's place in it, dying, counters)
// equals what a scan of the index and the addresses gives. CIDR changes
// update it incrementally; this is the check that they do not drift from
// a rebuild, nor a second Reset from a first.
func TestCIDRChangesKeepWhatIsDerivedFromTheIndex(t *testing.T) {
	prefixes := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/28"), netip.MustParsePrefix("10.0.0.0/27"),
		netip.MustParsePrefix("10.0.0.16/28"), netip.MustParsePrefix("10.0.1.0/30"),
		netip.MustParsePrefix("10.0.0.0/7"), netip.MustParsePrefix("10.0.0.7/32"),
		netip.MustParsePrefix("fd00::/124"), netip.MustParsePrefix("fd00::/100"),
		netip.MustParsePrefix("fd00::10/124"), netip.MustParsePrefix("fd00::/64"),
	}
	addrs := []netip.Addr{
		netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.7"), netip.MustParseAddr("10.0.0.17"),
		netip.MustParseAddr("10.0.1.1"), netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.0.0.30"),
		netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::11"), netip.MustParseAddr("fd00::1:0"),
		netip.MustParseAddr("fd00::ff"),
	}
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		st := memory.New()
		var opts []Option
		if rapid.Bool().Draw(rt, "mostFree") {
			opts = append(opts, WithPolicy(MostFree()))
		}
		if rapid.Bool().Draw(rt, "excluded") {
			// A pool holding it is never known full.
			opts = append(opts, WithExcluded(netipx.IPRangeFrom(netip.MustParseAddr("10.0.1.2"), netip.MustParseAddr("10.0.1.2"))))
		}
		a, err := New(ctx, st, opts...)
		if err != nil {
			rt.Fatal(err)
		}
		defer a.Close()
		nameOf := rapid.SampledFrom([]string{"a", "b", "c"})
		prefixOf := rapid.SampledFrom(prefixes)
		addrOf := rapid.SampledFrom(addrs)
		// Errors are part of the game: a CIDR that exists, is gone (the
		// background reconciler removes Terminating ones), or an address
		// taken. Only the derived state is checked.
		rt.Repeat(map[string]func(*rapid.T){
			"create": func(rt *rapid.T) {
				_, _ = st.CreateCIDR(ctx, cidrset.CIDR{Name: nameOf.Draw(rt, "name"), Prefixes: []netip.Prefix{prefixOf.Draw(rt, "prefix")}})
			},
			"dualStack": func(rt *rapid.T) {
				c, err := st.GetCIDR(ctx, nameOf.Draw(rt, "name"))
				if p := prefixOf.Draw(rt, "prefix"); err == nil && len(c.Prefixes) == 1 && p.Addr().Is4() != c.Prefixes[0].Addr().Is4() {
					c.Prefixes = append(c.Prefixes, p)
					_, _ = st.UpdateCIDR(ctx, c)
				}
			},
			"terminate": func(rt *rapid.T) {
				if c, err := st.GetCIDR(ctx, nameOf.Draw(rt, "name")); err == nil {
					c.Terminating = true
					_, _ = st.UpdateCIDR(ctx, c)
				}
			},
			"delete": func(rt *rapid.T) {
				if c, err := st.GetCIDR(ctx, nameOf.Draw(rt, "name")); err == nil {
					_ = st.DeleteCIDR(ctx, c.Name, c.Revision)
				}
			},
			"put": func(rt *rapid.T) {
				owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "x"}
				_, _ = st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: addrOf.Draw(rt, "addr"), Parent: owner}})
			},
			"release": func(rt *rapid.T) {
				_, _, _ = st.DeleteAddress(ctx, addrOf.Draw(rt, "addr"))
			},
			"reset": func(rt *rapid.T) {
				if err := a.resetFrom(ctx, st); err != nil {
					rt.Fatal(err)
				}
			},
			"": func(rt *rapid.T) {
				if err := a.checkDerived(ctx, st); err != nil {
					rt.Fatal(err)
				}
			},
		})
	})
}

// checkDerived runs checkDerivedLocked over the addresses of st, a's store.
func (a *Allocator) checkDerived(ctx context.Context, st store.Store) error {
	used, err := st.ListAddresses(ctx)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.checkDerivedLocked(used)
}

// checkDerivedLocked compares what CIDR changes derive from the index with
// a scan of the index and of used, the store's addresses.
func (a *Allocator) checkDerivedLocked(used []ipaddress.IPAddress) error {
	var want [2][]*pool
	var wantLive [2][]liveSource
	dying := 0
	for _, c := range a.index.All() {
		if c.Terminating {
			dying++
		}
		for _, p := range c.Prefixes {
			pl := a.pools[p.Masked()]
			if pl == nil {
				return fmt.Errorf("no pool for %s of %s", p, c.Name)
			}
			if !slices.Contains(want[pl.fam], pl) {
				want[pl.fam] = append(want[pl.fam], pl)
			}
		}
	}
	if n := len(want[0]) + len(want[1]); len(a.pools) != n {
		return fmt.Errorf("%d pools for %d prefixes", len(a.pools), n)
	}
	if got := a.dyingCount.Load(); int(got) != dying {
		return fmt.Errorf("dyingCount %d, want %d", got, dying)
	}
	for f := range want {
		slices.SortFunc(want[f], comparePools)
		if !slices.Equal(a.poolList[f], want[f]) {
			return fmt.Errorf("poolList[%d] is not the pools by first address", f)
		}
		var r u128.U128
		for i, pl := range want[f] {
			if !pl.size.IsZero() {
				r = u128.MaxOf(r, pl.last)
			}
			if len(a.reach[f]) != len(want[f]) || a.reach[f][i] != r {
				return fmt.Errorf("reach[%d] is off at %d", f, i)
			}
			var wantDying []string
			served := false
			var src liveSource // the oldest live CIDR holding the prefix
			for _, c := range a.index.All() {
				if !slices.ContainsFunc(c.Prefixes, func(p netip.Prefix) bool { return p.Masked() == pl.prefix }) {
					continue
				}
				switch {
				case c.Terminating:
					wantDying = append(wantDying, c.Name)
				case !served || compareAge(c.Created, c.Name, src.created, src.cidr) < 0:
					served = true
					src = liveSource{cidr: c.Name, rev: c.Revision, created: c.Created, pool: pl}
				}
			}
			if served {
				wantLive[f] = append(wantLive[f], src)
			}
			if !slices.Equal(pl.dying, wantDying) {
				return fmt.Errorf("pool %s dying %v, want %v", pl.prefix, pl.dying, wantDying)
			}
			var n u128.U128
			for _, u := range used {
				if x := u128.FromAddr(u.Addr); famIndex(u.Addr) == f && pl.contains(x) {
					n = n.Inc()
				}
			}
			if pl.used != n {
				return fmt.Errorf("pool %s counts %v used, the store holds %v", pl.prefix, pl.used, n)
			}
		}
		slices.SortFunc(wantLive[f], compareLive)
		if !slices.Equal(a.live[f], wantLive[f]) {
			return fmt.Errorf("live[%d] = %v, want %v", f, a.live[f], wantLive[f])
		}
		for _, pl := range want[f] {
			if i := pl.liveAt; i >= 0 && (i >= len(a.live[f]) || a.live[f][i].pool != pl) || i < 0 && slices.ContainsFunc(a.live[f], func(l liveSource) bool { return l.pool == pl }) {
				return fmt.Errorf("pool %s: liveAt %d is wrong", pl.prefix, i)
			}
		}
		full := len(wantLive[f]) > 0
		if a.open[f].len() != len(wantLive[f]) {
			return fmt.Errorf("open[%d] has %d marks for %d live pools", f, a.open[f].len(), len(wantLive[f]))
		}
		for i, l := range wantLive[f] {
			if a.open[f].has(i) != !l.pool.knownFull() {
				return fmt.Errorf("open[%d] marks %s (known full: %v) as %v", f, l.pool.prefix, l.pool.knownFull(), a.open[f].has(i))
			}
			full = full && l.pool.knownFull()
		}
		if a.full[f].Load() != full {
			return fmt.Errorf("full[%d] = %v, want %v", f, !full, full)
		}
		if t := a.mostFree[f]; t != nil && len(wantLive[f]) > 0 {
			best, bestFree := 0, u128.U128{}
			for i, l := range wantLive[f] {
				free := u128.U128(a.poolUsageLocked(l.pool).Free) // excluded addresses are not free
				if bestFree.Less(free) {
					best, bestFree = i, free
				}
				if t.free[t.leaves+i] != free {
					return fmt.Errorf("MostFree's tree has %v free at place %d of live[%d], the pool %v", t.free[t.leaves+i], i, f, free)
				}
			}
			if t.best() != best {
				return fmt.Errorf("MostFree's tree chooses place %d of live[%d], a scan %d", t.best(), f, best)
			}
		}
	}
	return nil
}

// TestAPoolOnlyTerminatingCIDRsHoldIsNeverOpen fills the pool of a
// Terminating CIDR, held by an address so that it stays: its counter moves
// while it serves nothing, which must not count it as open for new
// allocations.
func TestAPoolOnlyTerminatingCIDRsHoldIsNeverOpen(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	a := newTestAllocator(t, st)
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "x"}
	check := func(step string) {
		t.Helper()
		if err := a.checkDerived(ctx, st); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	if _, err := a.CreateCIDR(ctx, "small", netip.MustParsePrefix("10.0.1.0/30")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, netip.MustParseAddr("10.0.1.1"), owner); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCIDR(ctx, "small"); !errors.Is(err, ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR = %v, want it blocked", err)
	}
	check("terminating")
	// Not through the allocator: the CIDR serves no allocation now.
	if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.1.2"), Parent: owner}}); err != nil {
		t.Fatal(err)
	}
	check("filled")
	if _, _, err := st.DeleteAddress(ctx, netip.MustParseAddr("10.0.1.2")); err != nil {
		t.Fatal(err)
	}
	check("released")
	if _, err := a.CreateCIDR(ctx, "next", netip.MustParsePrefix("10.0.2.0/30")); err != nil {
		t.Fatal(err)
	}
	check("another CIDR")
}

// resetWatcher keeps the snapshot a store's Watch starts with.
type resetWatcher struct{ snap *store.Snapshot }

func (w resetWatcher) Reset(s store.Snapshot) { *w.snap = s }
func (resetWatcher) Apply(store.Event)        {}

// resetFrom runs a's Reset again with a snapshot of st, as a store that
// lost its watch (etcd after a compaction) does.
func (a *Allocator) resetFrom(ctx context.Context, st store.Store) error {
	var snap store.Snapshot
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := st.Watch(wctx, resetWatcher{&snap}); err != nil {
		return err
	}
	cancel()
	if a.locked == nil {
		watcher{a}.Reset(snap)
		return nil
	}
	// Over a locked store the store calls Reset holding its lock.
	a.mu.Lock()
	defer a.mu.Unlock()
	watcher{a}.Reset(snap)
	return nil
}

// An allocator whose watch is never behind (the memory store tells it of
// every write before the write returns) keeps no record of the CIDRs it
// removed: one per removed name would grow for as long as it runs.
func TestRemovedCIDRsLeaveNothingBehindWhenTheWatchIsCurrent(t *testing.T) {
	ctx := context.Background()
	a := newTestAllocator(t, memory.New())
	for i := range 50 {
		name := fmt.Sprintf("c-%d", i)
		if _, err := a.CreateCIDR(ctx, name, netip.MustParsePrefix("10.0.0.0/24")); err != nil {
			t.Fatal(err)
		}
		if err := a.DeleteCIDR(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if n := len(a.forgotten); n != 0 {
		t.Errorf("%d removed CIDRs remembered, want none", n)
	}
	if n := len(a.index.All()); n != 0 {
		t.Errorf("%d CIDRs left in the index, want none", n)
	}
}

// newTestAllocator returns an allocator over st, closed when the test ends.
func newTestAllocator(t *testing.T, st store.Store, opts ...Option) *Allocator {
	t.Helper()
	a, err := New(context.Background(), st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}
