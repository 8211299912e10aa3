package allocator

import (
	"iter"
	"net/netip"
	"slices"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/internal/bitmap"
	"github.com/netipam/netipam/internal/u128"
	"go4.org/netipx"
)

// The used addresses of a family are kept in two places, by where they are:
//
//   - a dense pool (one of at most denseMax addresses, so every IPv4 prefix
//     of /8 or longer and IPv6 of /104 or longer) holds a bitmap of its
//     range: an address inside one or more dense pools is used iff its bit
//     is set, and every dense pool containing it agrees;
//   - a.sparse (internal/sparse) holds exactly the used addresses inside
//     no dense pool: those of huge IPv6 pools and those outside every
//     CIDR. Runs are in a B+tree; the addresses of a huge pool that have
//     no used neighbour, as a random start spreads them, are in a table
//     per prefix, since as runs of one they would make a tree of millions
//     past the caches.
//
// A bit per address is smaller than a run per address as soon as a range
// is a few percent used, and it finds a free address in the same few word
// reads at any fill; runs keep a /64 that holds ten addresses small.

// denseMax is the largest pool, in addresses, that gets a bitmap (2 MiB).
const denseMax = 1 << 24

// poolsAt yields the pools of fam containing x: O(log n) to find the last
// pool starting at or before x, then back while an earlier pool may still
// reach x, which is one step unless pools nest.
func (a *Allocator) poolsAt(fam int, x u128.U128) iter.Seq[*pool] {
	return func(yield func(*pool) bool) {
		list, reach := a.poolList[fam], a.reach[fam]
		for i := a.startingBy(fam, x) - 1; i >= 0 && !reach[i].Less(x); i-- {
			if pl := list[i]; pl.contains(x) && !yield(pl) {
				return
			}
		}
	}
}

// startingBy returns the number of pools of fam starting at or before x.
// It is poolsAt's search, written out: on the allocation path, for every
// write, the generic search and its comparison func cost a third of
// finding the pools.
func (a *Allocator) startingBy(fam int, x u128.U128) int {
	list := a.poolList[fam]
	lo, hi := 0, len(list)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if x.Less(list[m].first) {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// reindexPoolsLocked sets reach[f][from:] after poolList[f] changed at
// from.
func (a *Allocator) reindexPoolsLocked(f, from int) {
	list := a.poolList[f]
	reach := slices.Grow(a.reach[f][:min(from, len(a.reach[f]))], len(list)-from)
	var r u128.U128
	if from > 0 {
		r = reach[from-1]
	}
	for _, pl := range list[from:] {
		if pl.contains(pl.last) {
			r = u128.MaxOf(r, pl.last)
		}
		reach = append(reach, r)
	}
	a.reach[f] = reach
	// Whether a pool is alone may have changed, and the pool may be gone.
	a.lastAlone[f] = [1]*pool{}
	// A pool is alone when those before it all end before it starts and
	// the next one starts after it ends (those after start later still).
	// The one before from may have gained or lost a neighbour.
	for i := max(from-1, 0); i < len(list); i++ {
		pl := list[i]
		pl.alone = (i == 0 || reach[i-1].Less(pl.first)) && (i == len(list)-1 || pl.last.Less(list[i+1].first))
	}
}

// zoned reports whether pl's prefix is one of the sparse index's zones,
// where it keeps addresses with no used neighbour in a table
// (internal/sparse): whether pl is too large for a bitmap.
func (pl *pool) zoned() bool { return pl.bits == nil && u128.From64(denseMax).Less(pl.size) }

// rezoneLocked gives the sparse index of family f the prefixes of its
// zoned pools, after a zoned pool came or went.
func (a *Allocator) rezoneLocked(f int) {
	var zones [][2]u128.U128
	for _, pl := range a.poolList[f] {
		if pl.zoned() {
			zones = append(zones, [2]u128.U128{u128.FromAddr(pl.prefix.Masked().Addr()), u128.FromAddr(netipx.PrefixLastIP(pl.prefix))})
		}
	}
	a.sparse[f].SetZones(zones)
}

// denseAtLocked returns a dense pool containing x, or nil.
func (a *Allocator) denseAtLocked(fam int, x u128.U128) *pool {
	for pl := range a.poolsAt(fam, x) {
		if pl.bits != nil {
			return pl
		}
	}
	return nil
}

// markUsedLocked adds addr to the used addresses and its pools' counters.
func (a *Allocator) markUsedLocked(addr netip.Addr) { a.markLocked(addr, true) }

// markLocked is markUsedLocked if used; else it removes addr from the
// used addresses and has the Terminating CIDRs containing it checked
// again (a release).
func (a *Allocator) markLocked(addr netip.Addr, used bool) {
	a.markValueLocked(u128.FromAddr(addr), famIndex(addr), used)
}

// markValueLocked is markLocked for the address of value x in family
// fam, for a caller that has the value already (an allocation: the
// conversion is 28 instructions). One function for both ways, so that a
// write makes one call, and both share the common case, a write into the
// pool written last, the only one holding the address, with a bit for it
// and no excluded address to count.
func (a *Allocator) markValueLocked(x u128.U128, fam int, used bool) {
	pl := a.lastAlone[fam][0]
	// A dense pool's size fits in 64 bits: x is in it if its offset from
	// the first address is below the size. (An x past a carry into the
	// high word, in a pool that crosses one, takes the general path.)
	if pl == nil || pl.bits == nil || !pl.excluded.IsZero() || x.Hi != pl.first.Hi || x.Lo-pl.first.Lo >= pl.size.Lo {
		a.markInLocked(fam, x, used)
		return
	}
	if used {
		if pl.bits.Set(x.Lo - pl.first.Lo) {
			// countUsedLocked(pl, false), with its common case inline.
			if n := pl.used.Inc(); a.usedCountIsAllLocked(pl, n) {
				pl.used = n
			} else {
				a.countUsedLocked(pl, false)
			}
		}
		return
	}
	if pl.bits.Clear(x.Lo - pl.first.Lo) {
		// countFreedLocked(pl, false), with its common case inline.
		if a.freedCountIsAllLocked(pl) {
			pl.used = pl.used.Dec()
		} else {
			a.countFreedLocked(pl, false)
		}
	}
}

// markInLocked is markLocked past its dense common case. Its own common
// case is the same for a pool without a bitmap: x is in the pool written
// last, alone, with no excluded address, so the sparse set holds x's
// state and that pool is the one to count it in; then it is
// markUsedInLocked or markFreeInLocked without their search for the pools
// and for excluded addresses.
func (a *Allocator) markInLocked(fam int, x u128.U128, used bool) {
	pl := a.lastAlone[fam][0]
	if pl == nil || pl.bits != nil || !pl.excluded.IsZero() || !pl.contains(x) {
		if used {
			a.markUsedInLocked(fam, x)
		} else {
			a.markFreeInLocked(fam, x)
		}
		return
	}
	if used {
		if a.sparse[fam].Add(x) {
			// countUsedLocked(pl, false), with its common case inline.
			if n := pl.used.Inc(); a.usedCountIsAllLocked(pl, n) {
				pl.used = n
			} else {
				a.countUsedLocked(pl, false)
			}
		}
		return
	}
	if a.sparse[fam].Remove(x) {
		// countFreedLocked(pl, false), with its common case inline.
		if a.freedCountIsAllLocked(pl) {
			pl.used = pl.used.Dec()
		} else {
			a.countFreedLocked(pl, false)
		}
	}
}

// markUsedInLocked is markUsedLocked past its common case: x, of family
// fam, into whichever pools hold it.
func (a *Allocator) markUsedInLocked(fam int, x u128.U128) {
	pools, dense := a.poolsHolding(fam, x)
	added := false
	for _, pl := range pools {
		if pl.bits != nil && pl.bits.Set(x.Sub(pl.first).Lo) {
			added = true
		}
	}
	if !dense {
		added = a.sparse[fam].Add(x)
	}
	if !added {
		return
	}
	excluded := a.excludedIn(pools, x)
	for _, pl := range pools {
		a.countUsedLocked(pl, excluded)
	}
}

// countUsedLocked counts one more used address in pl, an excluded one if
// excluded, and follows what the count decides.
func (a *Allocator) countUsedLocked(pl *pool, excluded bool) {
	if n := pl.used.Inc(); !excluded && a.usedCountIsAllLocked(pl, n) {
		pl.used = n
		return
	}
	if excluded {
		pl.excludedUsed = pl.excludedUsed.Inc()
	}
	if pl.used = pl.used.Inc(); pl.used == pl.size {
		a.fullnessChangedLocked(pl, true)
	}
	a.countChangedLocked(pl)
}

// usedCountIsAllLocked reports whether a count of n used addresses in pl,
// one more than it had and none of them excluded, decides nothing else:
// the pool does not fill, and there is no MostFree to tell. Then counting
// is all countUsedLocked does, and markLocked's shortcut does it inline.
func (a *Allocator) usedCountIsAllLocked(pl *pool, n u128.U128) bool {
	return n != pl.size && a.mostFree[pl.fam] == nil
}

// freedCountIsAllLocked is usedCountIsAllLocked for one fewer: the pool
// was not full, there is no MostFree to tell and no Terminating CIDR to
// check again.
func (a *Allocator) freedCountIsAllLocked(pl *pool) bool {
	return pl.used != pl.size && a.mostFree[pl.fam] == nil && len(pl.dying) == 0
}

// poolsHolding returns the pools containing x, in a slice that is valid
// until the next call, and whether one of them is dense. Collecting them
// once saves the two updates of an address a second search.
func (a *Allocator) poolsHolding(fam int, x u128.U128) (pools []*pool, dense bool) {
	// Writes come in runs in one pool, mostly: the pool found last, if it
	// is alone and holds x, is the only pool holding x.
	if last := &a.lastAlone[fam]; last[0] != nil && last[0].contains(x) {
		return last[:], last[0].bits != nil
	}
	pools = a.holding[:0]
	list, reach := a.poolList[fam], a.reach[fam]
	for i := a.startingBy(fam, x) - 1; i >= 0 && !reach[i].Less(x); i-- {
		if pl := list[i]; pl.contains(x) {
			pools = append(pools, pl)
			dense = dense || pl.bits != nil
		}
	}
	a.holding = pools
	if len(pools) == 1 && pools[0].alone {
		a.lastAlone[fam][0] = pools[0]
	}
	return pools, dense
}

// excludedIn reports whether x, an address of pools (every pool holding
// it), is excluded: only a pool holding an excluded address can say yes,
// so most pools answer without a search.
func (a *Allocator) excludedIn(pools []*pool, x u128.U128) bool {
	for _, pl := range pools {
		if !pl.excluded.IsZero() {
			return a.excluded[pl.fam].Contains(x)
		}
	}
	return false
}

// markFreeInLocked is markLocked(addr, false) past its common case.
func (a *Allocator) markFreeInLocked(fam int, x u128.U128) {
	pools, dense := a.poolsHolding(fam, x)
	removed := false
	for _, pl := range pools {
		if pl.bits != nil && pl.bits.Clear(x.Sub(pl.first).Lo) {
			removed = true
		}
	}
	if !dense {
		removed = a.sparse[fam].Remove(x)
	}
	if !removed {
		return
	}
	excluded := a.excludedIn(pools, x)
	for _, pl := range pools {
		a.countFreedLocked(pl, excluded)
	}
}

// countFreedLocked counts one fewer used address in pl, an excluded one if
// excluded, follows what the count decides, and has pl's Terminating
// CIDRs checked again.
func (a *Allocator) countFreedLocked(pl *pool, excluded bool) {
	if !excluded && a.freedCountIsAllLocked(pl) {
		pl.used = pl.used.Dec()
		return
	}
	if excluded {
		pl.excludedUsed = pl.excludedUsed.Dec()
	}
	wasFull := pl.used == pl.size
	if pl.used = pl.used.Dec(); wasFull {
		a.fullnessChangedLocked(pl, false)
	}
	a.countChangedLocked(pl)
	for _, name := range pl.dying {
		a.recheckLocked(name)
	}
}

// denseSegments yields the parts of [lo, hi] inside dense pools, each with
// one pool that holds its bits, in order and without overlap. poolList is
// sorted by first address, so a sweep from the first pool that reaches lo
// finds them in O(log pools + pools met).
func (a *Allocator) denseSegments(fam int, lo, hi u128.U128) iter.Seq2[*pool, [2]u128.U128] {
	return func(yield func(*pool, [2]u128.U128) bool) {
		list, reach := a.poolList[fam], a.reach[fam]
		// The pools before the first whose reach is lo or more end before
		// lo; from there, the list is by first address.
		i, _ := slices.BinarySearchFunc(reach, lo, u128.U128.Cmp)
		next := lo // the first address not yet yielded
		for _, pl := range list[i:] {
			if hi.Less(pl.first) {
				return
			}
			if pl.bits == nil || pl.last.Less(next) {
				continue
			}
			from := u128.MaxOf(pl.first, next)
			to := u128.Min(pl.last, hi)
			if !yield(pl, [2]u128.U128{from, to}) {
				return
			}
			if to == hi {
				return
			}
			next = to.Inc()
		}
	}
}

// usedCountLocked returns how many addresses of [lo, hi] are used.
func (a *Allocator) usedCountLocked(fam int, lo, hi u128.U128) u128.U128 {
	n := a.sparse[fam].Count(lo, hi)
	for pl, seg := range a.denseSegments(fam, lo, hi) {
		n = n.Add(u128.From64(pl.bits.CountRange(seg[0].Sub(pl.first).Lo, seg[1].Sub(pl.first).Lo)))
	}
	return n
}

// usedRanges yields the used addresses of [lo, hi] in ascending, disjoint
// runs, computed as they are read: a caller that stops early (the
// finalizer, once it has enough blocking addresses) pays only for what it
// read. Runs are maximal within the sparse set and within each dense pool,
// so two yielded runs may touch at a dense pool's edge. Callers hold mu
// while they range over it.
func (a *Allocator) usedRanges(fam int, lo, hi u128.U128) iter.Seq2[u128.U128, u128.U128] {
	return func(yield func(u128.U128, u128.U128) bool) {
		if hi.Less(lo) {
			return
		}
		// No run of sparse lies in a dense pool, so the sparse runs
		// between the dense segments and the segments' bits, in turn, are
		// every used address in order.
		next := lo // the first address not yet read
		sparseTo := func(to u128.U128) bool {
			for s, e := range a.sparse[fam].Ranges(next, to) {
				if !yield(s, e) {
					return false
				}
			}
			return true
		}
		for pl, seg := range a.denseSegments(fam, lo, hi) {
			if next.Less(seg[0]) && !sparseTo(seg[0].Dec()) {
				return
			}
			for s, e := range pl.bits.Runs(seg[0].Sub(pl.first).Lo, seg[1].Sub(pl.first).Lo) {
				if !yield(pl.first.Add64(s), pl.first.Add64(e)) {
					return
				}
			}
			if seg[1] == hi {
				return
			}
			next = seg[1].Inc()
		}
		sparseTo(hi)
	}
}

// usedRangesLocked returns the used addresses of [lo, hi] as sorted,
// maximal runs.
func (a *Allocator) usedRangesLocked(fam int, lo, hi u128.U128) [][2]u128.U128 {
	var out [][2]u128.U128
	for s, e := range a.usedRanges(fam, lo, hi) {
		if n := len(out); n > 0 && out[n-1][1].Inc() == s {
			out[n-1][1] = e // the runs are disjoint, so out[n-1][1] < Max
			continue
		}
		out = append(out, [2]u128.U128{s, e})
	}
	return out
}

// nextUnusedLocked returns the first address of [from, to] that is not
// used. Each round either answers or moves past a whole dense pool.
func (a *Allocator) nextUnusedLocked(fam int, from, to u128.U128) (u128.U128, bool) {
	for {
		x, ok := a.sparse[fam].NextFree(from, to)
		if !ok {
			return x, false
		}
		pl := a.denseAtLocked(fam, x)
		if pl == nil {
			return x, true
		}
		// No run of sparse lies in pl: pl's bitmap answers for its range.
		end := u128.Min(to, pl.last)
		if off, ok := pl.bits.NextClear(x.Sub(pl.first).Lo, end.Sub(pl.first).Lo); ok {
			return pl.first.Add64(off), true
		}
		if end == to {
			return u128.U128{}, false
		}
		from = end.Inc()
	}
}

// fillDenseLocked builds pl's bitmap from the used addresses of its range
// (before pl counts as dense) and takes them out of sparse.
func (a *Allocator) fillDenseLocked(pl *pool) {
	bits := bitmap.New(pl.size.Lo)
	var moved [][2]u128.U128
	for _, r := range a.usedRangesLocked(pl.fam, pl.first, pl.last) {
		for x := r[0]; ; x = x.Inc() {
			bits.Set(x.Sub(pl.first).Lo)
			if x == r[1] {
				break
			}
		}
		moved = append(moved, r)
	}
	for _, r := range moved {
		a.sparse[pl.fam].RemoveRange(r[0], r[1])
	}
	pl.bits = bits
}

// dropDenseLocked hands the used addresses of pl, about to be removed, to
// sparse where no remaining dense pool holds them. pl must already be out
// of poolList.
func (a *Allocator) dropDenseLocked(pl *pool) {
	for s, e := range pl.bits.Runs(0, pl.size.Lo-1) {
		lo, hi := pl.first.Add64(s), pl.first.Add64(e)
		next, done := lo, false
		for _, seg := range a.denseSegments(pl.fam, lo, hi) {
			if next.Less(seg[0]) {
				a.sparse[pl.fam].AddRange(next, seg[0].Dec())
			}
			if seg[1] == hi {
				done = true
				break
			}
			next = seg[1].Inc()
		}
		if !done {
			a.sparse[pl.fam].AddRange(next, hi)
		}
	}
}

// countLocked sets pl's counts of used addresses, in all and among its
// excluded ones, from the index.
func (a *Allocator) countLocked(pl *pool) {
	pl.used = a.usedCountLocked(pl.fam, pl.first, pl.last)
	pl.excludedUsed = u128.U128{}
	if pl.excluded.IsZero() {
		return
	}
	for lo, hi := range a.excluded[pl.fam].Ranges(pl.first, pl.last) {
		pl.excludedUsed = pl.excludedUsed.Add(a.usedCountLocked(pl.fam, lo, hi))
	}
}

// nextInDenseLocked is nextInPoolLocked for a dense pool with no excluded
// address, none pending and none to skip, where a free address is a clear
// bit: the same search (upper band from the strategy's start, wrapping,
// then the lower band), in offsets from pl.first, which fit in 64 bits.
func (a *Allocator) nextInDenseLocked(pl *pool) (u128.U128, bool) {
	lo, hi := pl.upperFirst.Lo-pl.first.Lo, pl.size.Lo-1
	upper := true
	for {
		n := hi - lo + 1
		var off u128.U128
		if upper && a.denseLooksAheadLocked(pl) {
			off = a.startAheadLocked(pl, pl.first.Add64(lo), u128.From64(n))
		} else {
			off = u128.U128(a.cfg.strategy.Start(cidrset.Count{Lo: n}))
		}
		upper = false
		if off.Hi != 0 || off.Lo >= n {
			off.Lo = off.Mod64(n) // a Strategy past its contract
		}
		start := lo + off.Lo
		if x, ok := pl.bits.NextClear(start, hi); ok {
			return pl.first.Add64(x), true
		}
		if start != lo {
			if x, ok := pl.bits.NextClear(lo, start-1); ok {
				return pl.first.Add64(x), true
			}
		}
		if lo == 0 { // the lower band, or no band below
			return u128.U128{}, false
		}
		lo, hi = 0, lo-1
	}
}

// nextInSparseLocked is nextInPoolLocked for a pool without a bitmap that
// is alone (no dense pool holds any of its addresses, so the sparse set
// holds all its used ones), with no excluded address, none pending and
// none to skip: the same search as searchBandLocked's (upper band from
// the strategy's start, wrapping, then the lower band), in the sparse set
// alone.
func (a *Allocator) nextInSparseLocked(pl *pool) (u128.U128, bool) {
	set := &a.sparse[pl.fam]
	lo, hi := pl.upperFirst, pl.last
	upper := true
	for {
		n := hi.Sub(lo).Inc()
		var off u128.U128
		// (The set's runs first, inline: see sparseLooksAheadLocked.)
		ahead := upper && set.Runs() >= prefetchFrom && a.sparseLooksAheadLocked(pl)
		if ahead {
			off = a.startAheadLocked(pl, lo, n) // what it reads loaded then
		} else {
			off = u128.U128(a.cfg.strategy.Start(cidrset.Count(n)))
		}
		upper = false
		if !off.Less(n) {
			off = off.Mod(n) // a Strategy past its contract
		}
		start := lo.Add(off)
		if !ahead && a.prefetcher != nil && pl.large() && set.Runs() >= prefetchFrom {
			// Mostly the start is free, and the address chosen: its slot
			// in the store loads while the set is searched. (With fewer
			// runs the addresses are packed, in the memory store's
			// blocks, and a new one's slot is in a small table: a /64
			// holding 100k packed addresses took 3,472 instructions a
			// cycle with the call, 3,309 without.)
			a.prefetcher.PrefetchAddressLocked(start.Addr(pl.fam == 0))
		}
		if x, ok := set.NextFree(start, hi); ok {
			return x, true
		}
		if start != lo {
			if x, ok := set.NextFree(lo, start.Dec()); ok {
				return x, true
			}
		}
		if lo == pl.first { // the lower band, or no band below
			return u128.U128{}, false
		}
		lo, hi = pl.first, pl.lowerLast
	}
}
