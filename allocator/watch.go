package allocator

import (
	"context"
	"net/netip"
	"slices"

	"go4.org/netipx"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/internal/u128"
	"github.com/netipam/netipam/store"
)

// watcher feeds the store's changes into the allocator's index.
type watcher struct{ a *Allocator }

func (w watcher) Reset(s store.Snapshot) {
	a := w.a
	var nums [2][]u128.U128
	for _, addr := range s.Addrs {
		f := famIndex(addr)
		nums[f] = append(nums[f], u128.FromAddr(addr))
	}
	for f := range nums {
		slices.SortFunc(nums[f], u128.U128.Cmp)
		nums[f] = slices.Compact(nums[f])
	}
	a.lockForWatch()
	defer a.unlockForWatch()
	for f := range nums {
		// Sorted and unique: Reset cannot fail.
		_ = a.used[f].Reset(nums[f])
	}
	a.index = cidrset.NewIndex(s.CIDRs)
	a.pools = map[netip.Prefix]*pool{}
	a.syncPoolsLocked()
	a.advanceLocked(s.Revision)
	a.kickReconciler()
}

func (w watcher) Apply(e store.Event) {
	a := w.a
	a.lockForWatch()
	defer a.unlockForWatch()
	switch e.Kind {
	case store.AddressPut:
		a.markUsedLocked(e.Address.Addr)
	case store.AddressDeleted:
		if a.markFreeLocked(e.Address.Addr) {
			a.kickReconciler()
		}
	case store.CIDRPut:
		old, existed := a.index.Get(e.CIDR.Name)
		if existed && old.Revision >= e.CIDR.Revision {
			break // already known (refreshCIDR got there first)
		}
		a.index = a.index.With(e.CIDR)
		a.syncPoolsLocked()
		a.kickReconciler()
	case store.CIDRDeleted:
		a.index = a.index.Without(e.CIDR.Name)
		a.syncPoolsLocked()
	}
	a.advanceLocked(e.Revision)
}

// lockForWatch locks mu for Reset and Apply, unless the store calls them
// holding it already (store.Locked).
func (a *Allocator) lockForWatch() {
	if a.locked == nil {
		a.mu.Lock()
	}
}

func (a *Allocator) unlockForWatch() {
	if a.locked == nil {
		a.mu.Unlock()
	}
}

// advanceLocked records that the index reflects revision rev.
func (a *Allocator) advanceLocked(rev int64) {
	if rev <= a.rev {
		return
	}
	a.rev = rev
	if a.waiters > 0 && a.revWait != nil {
		close(a.revWait)
		a.revWait = nil
	}
}

// markUsedLocked adds addr to the used set and its pools' counters.
func (a *Allocator) markUsedLocked(addr netip.Addr) {
	x, fam := u128.FromAddr(addr), famIndex(addr)
	if !a.used[fam].Add(x) {
		return
	}
	for _, pl := range a.poolList[fam] {
		if pl.contains(x) {
			pl.used = pl.used.Inc()
		}
	}
}

// markFreeLocked removes addr; it reports whether a Terminating CIDR
// contains it, so the finalizer should look again.
func (a *Allocator) markFreeLocked(addr netip.Addr) bool {
	x, fam := u128.FromAddr(addr), famIndex(addr)
	if !a.used[fam].Remove(x) {
		return false
	}
	dying := false
	for _, pl := range a.poolList[fam] {
		if pl.contains(x) {
			pl.used = pl.used.Dec()
			dying = dying || len(pl.dying) > 0
		}
	}
	return dying
}

// syncPoolsLocked makes the pools match the index's prefixes, building new
// ones from the used set (O(runs) in the new prefix), and derives what the
// allocation path reads.
func (a *Allocator) syncPoolsLocked() {
	want := map[netip.Prefix]bool{}
	for _, c := range a.index.All() {
		for _, p := range c.Prefixes {
			want[p.Masked()] = true
		}
	}
	for p := range a.pools {
		if !want[p] {
			delete(a.pools, p)
		}
	}
	for p := range want {
		if a.pools[p] == nil {
			a.pools[p] = a.newPoolLocked(p)
		}
	}
	a.poolList = [2][]*pool{}
	for _, pl := range a.pools {
		pl.dying = nil
		a.poolList[pl.fam] = append(a.poolList[pl.fam], pl)
	}
	for f := range a.poolList { // a stable order keeps the policy's input stable
		slices.SortFunc(a.poolList[f], func(x, y *pool) int { return x.first.Cmp(y.first) })
	}
	a.live = [2][]liveSource{}
	a.dying = 0
	defer func() { a.dyingCount.Store(int32(a.dying)) }()
	for _, c := range a.index.All() {
		if c.Terminating {
			a.dying++
		}
		for _, p := range c.Prefixes {
			pl := a.pools[p.Masked()]
			if c.Terminating {
				pl.dying = append(pl.dying, c.Name)
				continue
			}
			if !slices.ContainsFunc(a.live[pl.fam], func(l liveSource) bool { return l.pool == pl }) {
				a.live[pl.fam] = append(a.live[pl.fam], liveSource{cidr: c.Name, rev: c.Revision, created: c.Created, pool: pl})
			}
		}
	}
}

func (a *Allocator) newPoolLocked(p netip.Prefix) *pool {
	pl := &pool{prefix: p, fam: famIndex(p.Addr())}
	lower, upper, hasLower, ok := cidrset.Bands(p)
	if !ok {
		return pl
	}
	pl.last = u128.FromAddr(upper.To())
	pl.first = u128.FromAddr(upper.From())
	if hasLower {
		pl.hasLower = true
		pl.first = u128.FromAddr(lower.From())
		pl.lowerLast = u128.FromAddr(lower.To())
	}
	pl.size = pl.last.Sub(pl.first).Inc()
	pl.used = a.used[pl.fam].Count(pl.first, pl.last)
	pl.excluded = a.excluded[pl.fam].Count(pl.first, pl.last)
	return pl
}

// kickReconciler wakes the background reconciler without blocking.
func (a *Allocator) kickReconciler() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// reconcileLoop re-checks Terminating CIDRs when the watch shows a change
// that may unblock one: an address released (by any allocator), a CIDR
// created or changed.
func (a *Allocator) reconcileLoop(ctx context.Context) {
	defer close(a.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		}
		for _, c := range a.CIDRs() {
			if !c.Terminating {
				continue
			}
			if _, err := a.fin.Reconcile(ctx, c.Name); err != nil && ctx.Err() == nil {
				a.cfg.logger.Warn("reconciling terminating CIDR", "cidr", c.Name, "err", err)
			}
		}
	}
}

// WaitRevision blocks until the allocator's index reflects the store at
// revision rev or later.
func (a *Allocator) WaitRevision(ctx context.Context, rev int64) error {
	a.mu.Lock()
	for a.rev < rev {
		if a.revWait == nil {
			a.revWait = make(chan struct{})
		}
		ch := a.revWait
		a.waiters++
		a.mu.Unlock()
		var err error
		select {
		case <-ch:
		case <-ctx.Done():
			err = ctx.Err()
		}
		a.mu.Lock()
		a.waiters--
		if err != nil {
			a.mu.Unlock()
			return err
		}
	}
	a.mu.Unlock()
	return nil
}

// refreshCIDR reads one CIDR from the store and applies it if it is newer
// than the index's copy, so an allocation refused by a fence retries on
// fresh data even when the watch lags.
func (a *Allocator) refreshCIDR(ctx context.Context, name string) {
	c, err := a.st.GetCIDR(ctx, name)
	a.mu.Lock()
	defer a.mu.Unlock()
	old, known := a.index.Get(name)
	switch {
	case err == nil && (!known || old.Revision < c.Revision):
		a.index = a.index.With(c)
	case err != nil && known && isNotFound(err):
		a.index = a.index.Without(name)
	default:
		return
	}
	a.syncPoolsLocked()
}

// view adapts the allocator to finalizer.View.
type view struct{ a *Allocator }

func (v view) WaitRevision(ctx context.Context, rev int64) error { return v.a.WaitRevision(ctx, rev) }
func (v view) CIDRs() []cidrset.CIDR                             { return v.a.CIDRs() }

func (v view) Used(p netip.Prefix) []netipx.IPRange {
	a := v.a
	a.mu.Lock()
	defer a.mu.Unlock()
	host, ok := cidrset.HostRange(p)
	if !ok {
		return nil
	}
	is4 := p.Addr().Is4()
	var out []netipx.IPRange
	for lo, hi := range a.used[famIndex(p.Addr())].Ranges(u128.FromAddr(host.From()), u128.FromAddr(host.To())) {
		out = append(out, netipx.IPRangeFrom(lo.Addr(is4), hi.Addr(is4)))
	}
	return out
}
