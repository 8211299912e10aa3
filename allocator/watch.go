package allocator

import (
	"context"
	"iter"
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
	a.lockForWatch()
	defer a.unlockForWatch()
	// The pools first, over no used address; then every address goes into
	// the bitmaps of the dense pools containing it, and only the rest is
	// sorted into sparse.
	a.index = cidrset.NewIndex(s.CIDRs)
	a.pools = map[netip.Prefix]*pool{}
	a.poolList = [2][]*pool{}
	for f := range a.sparse {
		_ = a.sparse[f].Reset(nil)
	}
	a.syncPoolsLocked()
	var rest [2][]u128.U128
	for _, addr := range s.Addrs {
		x, f := u128.FromAddr(addr), famIndex(addr)
		dense := false
		for pl := range a.poolsAt(f, x) {
			if pl.bits != nil {
				pl.bits.Set(x.Sub(pl.first).Lo)
				dense = true
			}
		}
		if !dense {
			rest[f] = append(rest[f], x)
		}
	}
	for f := range rest {
		slices.SortFunc(rest[f], u128.U128.Cmp)
		// Sorted and unique: Reset cannot fail.
		_ = a.sparse[f].Reset(slices.Compact(rest[f]))
	}
	for _, pl := range a.pools {
		pl.used = a.usedCountLocked(pl.fam, pl.first, pl.last)
	}
	a.refreshFullLocked(0)
	a.refreshFullLocked(1)
	a.advanceLocked(s.Revision)
	a.kickReconciler()
}

func (w watcher) Apply(e store.Event) {
	a := w.a
	a.lockForWatch()
	defer a.unlockForWatch()
	switch e.Kind {
	case store.AddressPut, store.AddressDeleted:
		a.addressChangedLocked(e.Kind, e.Address.Addr)
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

// AddressChanged implements store.AddressWatcher: Apply for an address
// event, without the Event.
func (w watcher) AddressChanged(kind store.EventKind, addr netip.Addr, rev int64) {
	a := w.a
	a.lockForWatch()
	defer a.unlockForWatch()
	a.addressChangedLocked(kind, addr)
	a.advanceLocked(rev)
}

func (a *Allocator) addressChangedLocked(kind store.EventKind, addr netip.Addr) {
	if kind == store.AddressPut {
		a.markUsedLocked(addr)
	} else if a.markFreeLocked(addr) {
		a.kickReconciler()
	}
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

// syncPoolsLocked makes the pools match the index's prefixes, building new
// ones from the used addresses (O(runs) in the new prefix, plus a bit per
// address for a dense one), and derives what the allocation path reads.
func (a *Allocator) syncPoolsLocked() {
	want := map[netip.Prefix]bool{}
	for _, c := range a.index.All() {
		for _, p := range c.Prefixes {
			want[p.Masked()] = true
		}
	}
	for p, pl := range a.pools {
		if !want[p] {
			delete(a.pools, p)
			a.poolList[pl.fam] = slices.DeleteFunc(a.poolList[pl.fam], func(x *pool) bool { return x == pl })
			if pl.bits != nil {
				a.dropDenseLocked(pl)
			}
		}
	}
	for p := range want {
		if a.pools[p] == nil {
			pl := a.newPoolLocked(p)
			a.pools[p] = pl
			// Sorted by first address: denseSegments sweeps in that
			// order, and a stable order keeps the policy's input stable.
			list := a.poolList[pl.fam]
			i, _ := slices.BinarySearchFunc(list, pl, func(x, y *pool) int { return x.first.Cmp(y.first) })
			a.poolList[pl.fam] = slices.Insert(list, i, pl)
		}
	}
	a.indexPoolsLocked()
	for _, pl := range a.pools {
		pl.dying = nil
	}
	a.live = [2][]liveSource{}
	a.dying = 0
	defer func() {
		a.dyingCount.Store(int32(a.dying))
		a.refreshFullLocked(0)
		a.refreshFullLocked(1)
	}()
	served := make(map[*pool]bool, len(a.pools)) // pools in live already
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
			if !served[pl] {
				served[pl] = true
				a.live[pl.fam] = append(a.live[pl.fam], liveSource{cidr: c.Name, rev: c.Revision, created: c.Created, pool: pl})
			}
		}
	}
	// OldestFirst's order, which chooseNextLocked then follows as is; the
	// other policies get their candidates in it.
	a.liveAt = make(map[netip.Prefix]int, len(a.live[0])+len(a.live[1]))
	for _, live := range a.live {
		slices.SortStableFunc(live, func(x, y liveSource) int { return compareAge(x.created, x.cidr, y.created, y.cidr) })
		for i, l := range live {
			a.liveAt[l.pool.prefix] = i
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
	pl.used = a.usedCountLocked(pl.fam, pl.first, pl.last)
	pl.excluded = a.excluded[pl.fam].Count(pl.first, pl.last)
	if pl.size.Hi == 0 && pl.size.Lo <= denseMax {
		a.fillDenseLocked(pl)
	}
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

// Used yields the used ranges of p while holding mu, as View allows.
func (v view) Used(p netip.Prefix) iter.Seq[netipx.IPRange] {
	return func(yield func(netipx.IPRange) bool) {
		host, ok := cidrset.HostRange(p)
		if !ok {
			return
		}
		a := v.a
		a.mu.Lock()
		defer a.mu.Unlock()
		is4 := p.Addr().Is4()
		for s, e := range a.usedRanges(famIndex(p.Addr()), u128.FromAddr(host.From()), u128.FromAddr(host.To())) {
			if !yield(netipx.IPRangeFrom(s.Addr(is4), e.Addr(is4))) {
				return
			}
		}
	}
}
