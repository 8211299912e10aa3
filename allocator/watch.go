package allocator

import (
	"context"
	"errors"
	"iter"
	"maps"
	"net/netip"
	"slices"
	"time"

	"go4.org/netipx"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/finalizer"
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
	clear(a.forgotten)
	for f := range a.sparse {
		_ = a.sparse[f].Reset(nil)
	}
	a.buildPoolsLocked()
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
		a.countLocked(pl)
	}
	for f := range a.live {
		a.remarkOpenLocked(f)
		a.liveChangedLocked(f) // the counts changed
	}
	a.advanceLocked(s.Revision)
	for _, c := range a.index.Terminating() {
		a.recheckLocked(c.Name)
	}
}

func (w watcher) Apply(e store.Event) {
	a := w.a
	a.lockForWatch()
	defer a.unlockForWatch()
	switch e.Kind {
	case store.AddressPut, store.AddressDeleted:
		a.addressChangedLocked(e.Kind, e.Address.Addr)
	case store.CIDRPut:
		if rev, ok := a.forgotten[e.CIDR.Name]; ok {
			if e.CIDR.Revision <= rev {
				break // a copy this allocator removed since
			}
			delete(a.forgotten, e.CIDR.Name)
		}
		old, existed := a.index.Get(e.CIDR.Name)
		if existed && old.Revision >= e.CIDR.Revision {
			break // already known
		}
		a.index.Put(e.CIDR)
		a.cidrChangedLocked(old.Prefixes, e.CIDR.Prefixes)
		a.recheckAfterPutLocked(e.CIDR)
	case store.CIDRDeleted:
		delete(a.forgotten, e.CIDR.Name)
		if old, existed := a.index.Get(e.CIDR.Name); existed {
			a.index.Delete(old.Name)
			a.cidrChangedLocked(old.Prefixes, nil)
		}
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
	a.markLocked(addr, kind == store.AddressPut)
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

// buildPoolsLocked replaces every pool with a new one for each prefix of
// the index, over no used address, and derives what the allocation path
// reads; for Reset, so it sorts once instead of inserting pool by pool.
// Everything derived from the old pools goes with them (poolsAt and
// denseSegments read poolList and reach together).
func (a *Allocator) buildPoolsLocked() {
	a.pools = map[netip.Prefix]*pool{}
	a.poolList = [2][]*pool{}
	a.reach = [2][]u128.U128{}
	var lists [2][]*pool
	for _, c := range a.index.All() {
		for _, p := range c.Prefixes {
			if p = p.Masked(); p.IsValid() && a.pools[p] == nil {
				pl := a.newPoolLocked(p)
				a.pools[p] = pl
				lists[pl.fam] = append(lists[pl.fam], pl)
			}
		}
	}
	a.live = [2][]liveSource{}
	for f, list := range lists {
		slices.SortFunc(list, comparePools)
		a.poolList[f] = list
		a.reindexPoolsLocked(f, 0)
		a.rezoneLocked(f)
		for _, pl := range list {
			if src, ok := a.poolServiceLocked(pl); ok {
				a.live[f] = append(a.live[f], src)
			}
		}
		slices.SortFunc(a.live[f], compareLive)
		a.renumberLiveLocked(f, 0)
		a.remarkOpenLocked(f)
	}
	a.dyingCount.Store(int32(len(a.index.Terminating())))
}

// cidrChangedLocked brings the pools of the given prefixes up to date,
// after the index changed a CIDR that held them before (was) or holds them
// now (is): the cost is that of the prefixes, not of the other CIDRs. A
// pool is made for a prefix that has none (O(runs) in it, plus a bit per
// address for a dense one) and dropped once no CIDR holds its prefix.
func (a *Allocator) cidrChangedLocked(was, is []netip.Prefix) {
	var changed [2]bool
	for i, p := range slices.Concat(is, was) {
		if p = p.Masked(); !p.IsValid() || i >= len(is) && slices.Contains(is, p) {
			continue
		}
		pl := a.pools[p]
		if len(a.index.WithPrefix(p)) == 0 {
			if pl != nil {
				a.dropPoolLocked(pl)
				changed[pl.fam] = true
			}
			continue
		}
		if pl == nil {
			pl = a.addPoolLocked(p)
		}
		a.unserveLocked(pl)
		if src, ok := a.poolServiceLocked(pl); ok {
			a.serveLocked(src)
		}
		changed[pl.fam] = true
	}
	for f := range changed {
		if changed[f] {
			a.setFullLocked(f)
			a.liveChangedLocked(f)
		}
	}
	a.dyingCount.Store(int32(len(a.index.Terminating())))
}

// poolServiceLocked sets pl.dying from the CIDRs holding pl's prefix and
// returns what serves pl, if any of them is live: the oldest live one (by
// OldestFirst's order), whose revision fences the allocations from pl and
// whose age places pl among the candidates.
func (a *Allocator) poolServiceLocked(pl *pool) (liveSource, bool) {
	var src liveSource
	served := false
	pl.dying = nil // a new slice: released() reads it after unlocking
	for _, c := range a.index.WithPrefix(pl.prefix) {
		switch {
		case c.Terminating:
			pl.dying = append(pl.dying, c.Name)
		case !served || compareAge(c.Created, c.Name, src.created, src.cidr) < 0:
			src, served = liveSource{cidr: c.Name, rev: c.Revision, created: c.Created, pool: pl}, true
		}
	}
	return src, served
}

// compareLive is the order of live: OldestFirst's, which chooseNextLocked
// follows as is and the other policies get their candidates in; the
// prefix breaks ties, which valid CIDRs never make.
func compareLive(x, y liveSource) int {
	if c := compareAge(x.created, x.cidr, y.created, y.cidr); c != 0 {
		return c
	}
	return comparePools(x.pool, y.pool)
}

// comparePools is the order of poolList: by first address, then prefix.
func comparePools(x, y *pool) int {
	if c := x.first.Cmp(y.first); c != 0 {
		return c
	}
	if c := x.prefix.Addr().Compare(y.prefix.Addr()); c != 0 {
		return c
	}
	return x.prefix.Bits() - y.prefix.Bits()
}

// serveLocked puts src into live, in order.
func (a *Allocator) serveLocked(src liveSource) {
	f := src.pool.fam
	i, _ := slices.BinarySearchFunc(a.live[f], src, compareLive)
	a.live[f] = slices.Insert(a.live[f], i, src)
	a.open[f].insert(i, !src.pool.knownFull())
	a.renumberLiveLocked(f, i)
}

// unserveLocked takes pl out of live, if it is there.
func (a *Allocator) unserveLocked(pl *pool) {
	if i := pl.liveAt; i >= 0 {
		a.open[pl.fam].remove(i)
		a.live[pl.fam] = slices.Delete(a.live[pl.fam], i, i+1)
		pl.liveAt = -1
		a.renumberLiveLocked(pl.fam, i)
	}
}

// renumberLiveLocked sets liveAt of the pools in live[f][from:].
func (a *Allocator) renumberLiveLocked(f, from int) {
	for i := from; i < len(a.live[f]); i++ {
		a.live[f][i].pool.liveAt = i
	}
}

// addPoolLocked makes the pool of p and puts it into pools and poolList.
func (a *Allocator) addPoolLocked(p netip.Prefix) *pool {
	pl := a.newPoolLocked(p)
	a.pools[p] = pl
	i, _ := slices.BinarySearchFunc(a.poolList[pl.fam], pl, comparePools)
	a.poolList[pl.fam] = slices.Insert(a.poolList[pl.fam], i, pl)
	a.reindexPoolsLocked(pl.fam, i)
	if pl.zoned() {
		a.rezoneLocked(pl.fam)
	}
	return pl
}

// dropPoolLocked removes pl, whose prefix no CIDR holds any more.
func (a *Allocator) dropPoolLocked(pl *pool) {
	a.unserveLocked(pl)
	delete(a.pools, pl.prefix)
	if i, found := slices.BinarySearchFunc(a.poolList[pl.fam], pl, comparePools); found {
		a.poolList[pl.fam] = slices.Delete(a.poolList[pl.fam], i, i+1)
		a.reindexPoolsLocked(pl.fam, i)
		if pl.zoned() {
			a.rezoneLocked(pl.fam)
		}
	}
	if pl.bits != nil {
		a.dropDenseLocked(pl)
	}
}

func (a *Allocator) newPoolLocked(p netip.Prefix) *pool {
	pl := &pool{prefix: p, fam: famIndex(p.Addr()), liveAt: -1}
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
	pl.upperFirst = pl.first
	if hasLower {
		pl.upperFirst = pl.lowerLast.Inc()
	}
	pl.size = pl.last.Sub(pl.first).Inc()
	pl.excluded = a.excluded[pl.fam].Count(pl.first, pl.last)
	a.countLocked(pl)
	if pl.size.Hi == 0 && pl.size.Lo <= denseMax {
		a.fillDenseLocked(pl)
	}
	return pl
}

// recheckLocked has the background reconciler look at the Terminating
// CIDR name again.
func (a *Allocator) recheckLocked(name string) {
	if a.recheck == nil {
		a.recheck = map[string]struct{}{}
	}
	a.recheck[name] = struct{}{}
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// recheckLater is recheckLocked for a caller not holding mu: a check that
// failed is handed to the background reconciler.
func (a *Allocator) recheckLater(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.recheckLocked(name)
}

// recheckAfterPutLocked has the background reconciler look again at what
// the put of c may unblock: c itself if it is Terminating; if it is live,
// the Terminating CIDRs it overlaps, whose addresses it may now cover.
// Nothing else can be unblocked by it.
func (a *Allocator) recheckAfterPutLocked(c cidrset.CIDR) {
	if c.Terminating {
		a.recheckLocked(c.Name)
		return
	}
	for _, name := range a.terminatingOverlappingLocked(c) {
		a.recheckLocked(name)
	}
}

// reconcileLoop re-checks the Terminating CIDRs that a change shown by the
// watch may have unblocked (recheckLocked): one whose addresses were
// released by any allocator, one that a CIDR created or changed overlaps.
// A check that fails (the store unreachable a moment) is tried again on the
// next change or after a backoff, whichever comes first: no change may
// follow the last release of a CIDR's addresses.
func (a *Allocator) reconcileLoop(ctx context.Context) {
	defer close(a.done)
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	var backoff time.Duration
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		case <-retry.C:
		}
		checked, failed := a.recheckNow(ctx)
		if failed {
			backoff = min(max(2*backoff, recheckBackoffMin), recheckBackoffMax)
			retry.Reset(backoff)
		} else if checked > 0 {
			backoff = 0
		}
	}
}

// recheckNow checks the Terminating CIDRs recheck names, taking them out
// of it, and returns how many it checked and whether a check failed. A
// CIDR whose check failed, or was cut short by ctx, is named again, for
// a later try; one a read-only store cannot remove is not.
func (a *Allocator) recheckNow(ctx context.Context) (checked int, failed bool) {
	a.mu.Lock()
	names := slices.Sorted(maps.Keys(a.recheck))
	clear(a.recheck)
	a.mu.Unlock()
	for _, name := range names {
		_, err := a.reconcile(ctx, name)
		switch {
		case err == nil:
			continue
		case ctx.Err() != nil:
		case errors.Is(err, store.ErrReadOnly):
			// No retry can write it: the CIDR is left to a writer,
			// which will find it removable too.
			a.cfg.logger.Info("terminating CIDR left to a writer: the store is read-only", "cidr", name)
			continue
		default:
			a.cfg.logger.Warn("reconciling terminating CIDR", "cidr", name, "err", err)
			failed = true
		}
		a.mu.Lock()
		a.recheck[name] = struct{}{}
		a.mu.Unlock()
	}
	return len(names), failed
}

// The backoff of a failed re-check doubles from recheckBackoffMin up to
// recheckBackoffMax, and starts again after one that succeeds.
const (
	recheckBackoffMin = 100 * time.Millisecond
	recheckBackoffMax = 10 * time.Second
)

// WaitRevision blocks until the allocator's index reflects the store at
// revision rev or later. It fails with ErrClosed once Close was called,
// whatever rev: the index then no longer follows the store.
func (a *Allocator) WaitRevision(ctx context.Context, rev int64) error {
	if err := a.checkOpen(); err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for a.rev < rev {
		if err := a.waitLocked(ctx, &a.revWait, &a.waiters); err != nil {
			return err
		}
	}
	return nil
}

// waitLocked waits until the channel at *ch is closed, by whoever changes
// what the caller waits for, or ctx ends, or the allocator closes. mu is
// held on entry and on return, and released while waiting. *waiters
// counts the calls waiting, for a changer that closes *ch only when one
// does; the channel is made here, when none is there to wait on.
func (a *Allocator) waitLocked(ctx context.Context, ch *chan struct{}, waiters *int) error {
	if *ch == nil {
		*ch = make(chan struct{})
	}
	c := *ch
	*waiters++
	a.mu.Unlock()
	var err error
	select {
	case <-c:
	case <-ctx.Done():
		err = ctx.Err()
	case <-a.closing:
		err = ErrClosed
	}
	a.mu.Lock()
	*waiters--
	return err
}

// refreshCIDR follows the CIDR of a fence that failed, so that an
// allocation refused by it retries on fresh data. A CIDR the store still
// holds is waited for, until the watch has applied it (at most
// refreshWait), rather than put into the index ahead of the watch: an
// index holding a CIDR at a revision it has not reached may not know of a
// Terminating mark made before that revision, and an address served from
// that CIDR inside the Terminating one would then not touch it
// (touchDyingLocked), so that a removal decided before the address existed
// would leave it covered by Terminating CIDRs only. An error ends the
// allocation: the watch did not get there (or the allocator was closed).
func (a *Allocator) refreshCIDR(ctx context.Context, failed store.Fence, fenceErr error) error {
	name := failed.CIDR
	c, err := a.st.GetCIDR(ctx, name)
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, refreshWait)
		defer cancel()
		if werr := a.WaitRevision(wctx, c.Revision); werr != nil {
			if ctx.Err() != nil || errors.Is(werr, ErrClosed) {
				return werr
			}
			return fenceErr // the watch is stuck: choosing again would fail alike
		}
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// Gone from the store: the index's copy goes too, but only if it is
	// the one the allocation was fenced on (or older). A newer one is a
	// CIDR of the same name created since the read, which the watch has
	// applied meanwhile. Dropping a CIDR ahead of the watch only serves
	// less.
	if old, known := a.index.Get(name); known && isNotFound(err) && old.Revision <= failed.Revision {
		a.index.Delete(name)
		a.cidrChangedLocked(old.Prefixes, nil)
	}
	return nil
}

// refreshWait bounds refreshCIDR's wait for the watch.
const refreshWait = 5 * time.Second

// reconcile is a.fin.Reconcile, and the index forgets a CIDR it removed,
// as the store has: the watch's event comes later, and until then the
// caller's next read would still see the CIDR Terminating, and an
// allocation get ErrFull rather than ErrMismatch. Under reconcileMu, so
// that a call finding the CIDR removed by another of this allocator's
// (the background reconciler's, say) returns after that one's forgetting.
func (a *Allocator) reconcile(ctx context.Context, name string) (finalizer.Result, error) {
	a.reconcileMu.Lock()
	defer a.reconcileMu.Unlock()
	res, err := a.fin.Reconcile(ctx, name)
	if err == nil && res.Removed && res.CIDR.Revision != 0 {
		a.forgetRemoved(res.CIDR)
	}
	return res, err
}

// forgetRemoved drops c, gone from the store, from the index, unless the
// index holds a newer copy: a CIDR of that name created since. A watch
// not yet at c's revision may still bring c itself, or an older copy:
// those are skipped.
func (a *Allocator) forgetRemoved(c cidrset.CIDR) {
	a.mu.Lock()
	defer a.mu.Unlock()
	old, ok := a.index.Get(c.Name)
	if ok && old.Revision > c.Revision {
		return
	}
	if ok {
		a.index.Delete(c.Name)
		a.cidrChangedLocked(old.Prefixes, nil)
	}
	if a.rev >= c.Revision {
		return // the watch is past every put of c: nothing to skip
	}
	if a.forgotten == nil {
		a.forgotten = make(map[string]int64)
	}
	a.forgotten[c.Name] = max(a.forgotten[c.Name], c.Revision)
}

// view adapts the allocator to finalizer.View.
type view struct{ a *Allocator }

func (v view) WaitRevision(ctx context.Context, rev int64) error { return v.a.WaitRevision(ctx, rev) }

// Overlapping returns clones of the index's CIDRs that overlap p.
func (v view) Overlapping(p netip.Prefix) []cidrset.CIDR {
	v.a.mu.Lock()
	defer v.a.mu.Unlock()
	out := v.a.index.Overlapping(p)
	for i := range out {
		out[i] = out[i].Clone()
	}
	return out
}

// Used yields the used ranges of r while holding mu, as View allows.
func (v view) Used(r netipx.IPRange) iter.Seq[netipx.IPRange] {
	return func(yield func(netipx.IPRange) bool) {
		if !r.IsValid() {
			return
		}
		a := v.a
		a.mu.Lock()
		defer a.mu.Unlock()
		is4 := r.From().Is4()
		for s, e := range a.usedRanges(famIndex(r.From()), u128.FromAddr(r.From()), u128.FromAddr(r.To())) {
			if !yield(netipx.IPRangeFrom(s.Addr(is4), e.Addr(is4))) {
				return
			}
		}
	}
}
