package allocator

import (
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/internal/runset"
	"github.com/netipam/netipam/internal/u128"
)

// aheadLen is how many starts lookahead draws in advance: enough that
// what each needs has loaded (a miss to memory costs about as much as one
// allocation and release, 140-280 ns on the benchmark hosts) by the time
// it is used, in allocations that follow one another; few enough that the
// lines stay in cache meanwhile.
const aheadLen = 4

// lookahead holds the default strategy's starts for a band of n
// addresses, drawn aheadLen searches before they are used. As each is
// drawn, what the search from it will read starts to load: in a dense
// pool, the store's slot of the address it most likely gives (the first
// free at or after it, as things are then); in a sparse one, the slot of
// the start itself (mostly free), the line of the pool's table of lone
// addresses where the start's search begins (sparse.Index.Prefetch) and,
// a level per search, the nodes of the run set on the way to it
// (runset.Approach). In a range whose
// store or set is larger than the caches, a run of allocations (a burst
// of new Services) then overlaps each one's waits with the work of the
// ones before it. A lone allocation gains nothing and loses little: the
// draws are the ones it would make, made earlier.
//
// Drawing early changes nothing that can be seen: the default strategy's
// draws are independent and uniform, and none depends on the range's
// state, so a start drawn before others were used is as random as one
// drawn when needed, and they are used in the order drawn. Only the
// built-in default is drawn ahead; a Strategy of the embedder's is asked
// when an allocation needs it.
type lookahead struct {
	n     u128.U128 // the band size the starts were drawn for; 0: none
	offs  [aheadLen]u128.U128
	steps [aheadLen]runset.Approach // sparse pools only
	next  int
}

// aheadFreeMin is how many free addresses a pool must have to be searched
// from starts drawn ahead. With fewer, the same few addresses are taken
// and released again and again and what they need stays in cache, while
// the search that finds the address a start gives grows long (a thousand
// bits at 99.9 %), and would be made twice.
const aheadFreeMin = 1 << 14

// denseLooksAheadLocked and sparseLooksAheadLocked report whether a
// search of pl, a pool with a bitmap or one without, draws its start
// ahead: with the default strategy, in a store that can load slots ahead
// (store.Prefetcher), for a pool large enough that its slots are past
// the caches, and with free addresses enough to be spread as widely; a
// sparse pool, only while the sparse index holds prefetchFrom runs or
// more (a lone address is a run).
// With fewer, its addresses are packed in long runs: the set is small
// enough to stay in cache, and the memory store holds such addresses in
// blocks, not in the table where a new one's slot would be missed
// (a /64 holding 100k packed addresses: 3,903 instructions a cycle
// drawing ahead, 3,645 not). Each tests first what most pools fail.
// The dense one inlines (its search asks twice a cycle: 36 of a /12's
// ~2,520 instructions a cycle went to the two calls): a pool with a
// bitmap holds at most 2^24 addresses, so the low words hold its counts
// and pl.large() is a test of the low word. The sparse one does not
// inline; its caller repeats its first test inline, so that a pool of
// packed addresses (a few runs) makes no call (22 instructions a cycle).
func (a *Allocator) denseLooksAheadLocked(pl *pool) bool {
	return pl.used.Lo >= prefetchFrom && a.ownStart != nil && a.prefetcher != nil && pl.size.Lo-pl.used.Lo >= aheadFreeMin
}

func (a *Allocator) sparseLooksAheadLocked(pl *pool) bool {
	return a.sparse[pl.fam].Runs() >= prefetchFrom && pl.large() && a.ownStart != nil && a.prefetcher != nil &&
		!pl.size.Sub(pl.used).Less(u128.From64(aheadFreeMin))
}

// startAheadLocked returns a start in [0, n) for the band of pl that
// begins at lo, one drawn aheadLen searches ago, draws the one that
// replaces it, and steps the approaches of the others (sparse pools).
// Starts drawn for a band of another size are dropped (the band
// changed): the first search after that draws them all.
func (a *Allocator) startAheadLocked(pl *pool, lo, n u128.U128) u128.U128 {
	la, s := &a.ahead[pl.fam], a.ownStart
	if la.n != n {
		for i := range la.offs {
			la.offs[i] = u128.U128(s.Start(cidrset.Count(n)))
			a.loadAheadLocked(pl, lo, i)
		}
		la.n, la.next = n, 0
	}
	i := la.next
	off := la.offs[i]
	la.offs[i] = u128.U128(s.Start(cidrset.Count(n)))
	la.next = (i + 1) % aheadLen
	if pl.bits != nil {
		a.loadAheadLocked(pl, lo, i)
		return off
	}
	// The new start's slot first, then the steps, one of which loads a
	// leaf: in a range past the caches both are on pages the TLB does
	// not hold, and a prefetch waits for its page walk, but two walks
	// begun a few instructions apart overlap (two lines cost about what
	// one does; BenchmarkCalibrate/op=work-prefetched-pair). With 10M
	// scattered addresses the cycle took about a tenth less than with
	// the slot loaded after the steps (8 of 9 alternated pairs); with
	// 1M, the same.
	start := lo.Add(la.offs[i])
	a.prefetcher.PrefetchAddressLocked(start.Addr(pl.fam == 0))
	set := &a.sparse[pl.fam]
	set.Prefetch(start)
	if !set.ReadsAhead() {
		// The run set is small enough to stay in cache (most of a
		// scattered range's addresses are in its table): its approaches
		// would load nothing, and their calls cost about 130
		// instructions a cycle. An approach left from before is
		// stepped for a value used since if the set grows again,
		// which loads lines for nothing, once.
		return off
	}
	for j := range la.steps {
		if j != i {
			set.Step(&la.steps[j])
		}
	}
	// The search from the start used now descends where its approach
	// went: unless the set's inner nodes changed meanwhile, it starts at
	// the leaf the approach reached. Then its approach is the new one's.
	set.Step(&la.steps[i])
	set.Adopt(&la.steps[i])
	set.Approach(&la.steps[i], start)
	set.Step(&la.steps[i]) // the root is in cache: its child loads now
	return off
}

// loadAheadLocked starts loading what a search of pl from start
// lo+offs[i] will read. Others may take the address before; then what
// was loaded for it was loaded for nothing.
func (a *Allocator) loadAheadLocked(pl *pool, lo u128.U128, i int) {
	la := &a.ahead[pl.fam]
	start := lo.Add(la.offs[i])
	if pl.bits == nil {
		set := &a.sparse[pl.fam]
		set.Approach(&la.steps[i], start)
		set.Step(&la.steps[i]) // the root is in cache: its child loads now
		set.Prefetch(start)
		a.prefetcher.PrefetchAddressLocked(start.Addr(pl.fam == 0))
		return
	}
	if x, ok := pl.bits.NextClear(start.Lo-pl.first.Lo, pl.size.Lo-1); ok {
		a.prefetcher.PrefetchAddressLocked(pl.first.Add64(x).Addr(pl.fam == 0))
	}
}
