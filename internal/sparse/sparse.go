// Package sparse is the allocator's index of the used addresses that no
// bitmap holds: those of pools of more than 2^24 addresses (IPv6 shorter
// than /104, IPv4 shorter than /8) and those outside every pool. It is an ordered set of 128-bit values.
//
// Most of them are runs of consecutive addresses, kept in a run set
// (internal/runset): its B+tree holds a run in a few bytes however long,
// and answers ordered questions (the next free value, how many in a
// range, the runs of a range) in one descent. But the default strategy
// spreads the addresses of a huge pool at random, one run each, and a
// tree of millions of runs is larger than the caches: each allocation
// then waits on an inner node and a leaf, two random pages.
//
// So, inside zones (ranges the caller names: the prefixes of its huge
// pools), an address with no used neighbour, a single, is kept instead in
// the zone's table: an ordered hash table of offsets from the zone's
// first address, whose hash is the offset's top bits. A lookup reads one
// line (two in a zone of more than 2^64 values, whose offsets are split
// in two arrays), which the caller can load ahead (Prefetch); the table
// stays sorted, so that ordered questions read only the part of it in
// their range. Values crowded into a corner of a zone (static addresses
// at its start) share homes, and past a table's reach are refused: they
// stay in the run set, where they were before there were tables.
// Everything else stays in the run set too:
//
//   - a value is in at most one of the two;
//   - a single's neighbours are not in the index: when one is added, the
//     single moves to the run set with it, so the run set's runs and the
//     singles together are the index's maximal runs, and the value after
//     a run of the run set is no single;
//   - a value a table refuses (above; or one of the last 2^(n-64) of a
//     zone of 2^n values, n >= 64, whose top part is 2^64-1) is kept in
//     the run set, as an isolated run.
//
// An Index is not safe for concurrent use, not even by readers only.
package sparse

import (
	"iter"
	"slices"

	"github.com/netipam/netipam/internal/runset"
	"github.com/netipam/netipam/internal/u128"
)

// ErrNotSorted is returned by Reset when its input is not strictly
// ascending.
var ErrNotSorted = runset.ErrNotSorted

// Index is an ordered set of u128.U128 values. The zero value is an
// empty set with no zones, ready to use; it must not be copied after
// first use.
type Index struct {
	runs  runset.Set
	zones []*zone // sorted by lo, disjoint
	last  *zone   // the zone found last
	// memo is slot's answer for one value: an allocation asks for the
	// same value three times (NextFree, Add, Remove).
	memo struct {
		x  u128.U128
		z  *zone
		k  key
		ok bool
	}
	reach int // how far from home a table keeps a key: 0 for probeMax (tests lower it)
	fromN int // activeFrom, or a smaller one in tests

	nSingles    int // in all tables
	activeZones int
	// adds counts the values Add put in while no zone was active, when it
	// does not look zones up; the zones are looked at when it reaches
	// checkAt (see activate).
	adds, checkAt int

	scratch []u128.U128 // the singles of a range being moved
}

// zone is a range of 2^span values, aligned on its size, whose singles
// are in t as offsets from lo.
type zone struct {
	lo, hi u128.U128
	narrow bool // at most 2^64 values: an offset is x.Lo - lo.Lo
	t      table
	// wanted says that the last SetZones named the zone. A zone it did
	// not name is kept while it holds singles (so that dropping a pool
	// moves none of them) and goes when its last one does.
	wanted bool

	// A zone is active once it has held enough singles (see activeFrom
	// and activate); until then its table is empty and its singles are in
	// the run set. held counts the values Add put into it while inactive
	// (a trigger, not a count: removals and ranges are not counted), and
	// the zone is looked at again when held reaches checkAt.
	active  bool
	held    int
	checkAt int
}

// activeFrom is how many singles a zone holds before it keeps them in a
// table. Below, the run set's nodes for the zone stay in cache, and its
// path is the cheaper: with tables from a pool's first address, an
// allocation and release in an empty /64 took 7 % more instructions, in
// a /48 10 % (bench/SESSIONS.md, session 38).
const activeFrom = 1 << 12

// newZone returns an empty zone over [lo, lo+2^span).
func (s *Index) newZone(lo u128.U128, span uint8) *zone {
	z := &zone{lo: lo, hi: lo.Add(u128.Max().Rsh(uint(128 - span))), narrow: span <= 64, wanted: true}
	reach := s.reach
	if reach == 0 {
		reach = probeMax
	}
	z.t.init(span, reach)
	z.checkAt = s.activeFrom()
	return z
}

// SetActiveFrom makes zones of s keep singles in tables once they hold n
// values (activeFrom by default), for tests that want tables with a few.
func (s *Index) SetActiveFrom(n int) {
	s.fromN = n
	for _, z := range s.zones {
		z.checkAt = min(z.checkAt, s.activeFrom())
	}
}

// activeFrom returns the activeFrom of s.
func (s *Index) activeFrom() int {
	if s.fromN != 0 {
		return s.fromN
	}
	return activeFrom
}

// activate moves the singles of z, inactive, from the run set into its
// table, if there are activeFrom of them and they are at least half of
// the zone's values: a zone of long runs (addresses packed from the
// start of a band) is held better in the run set alone. It reports
// whether it did. It reads the zone's runs: callers look again only
// after twice as many additions.
func (s *Index) activate(z *zone) bool {
	var ks []key
	var values u128.U128
	// A run that reaches past the zone's edges is read whole enough to
	// tell it is longer than one.
	lo, hi := z.lo, z.hi
	if !lo.IsZero() {
		lo = lo.Dec()
	}
	if hi != u128.Max() {
		hi = hi.Inc()
	}
	for a, b := range s.runs.Ranges(lo, hi) {
		if b.Less(z.lo) || z.hi.Less(a) { // the value just outside
			continue
		}
		values = values.Add(u128.Min(b, z.hi).Sub(u128.MaxOf(a, z.lo)).Inc())
		if a != b {
			continue
		}
		if k, ok := z.t.keyOf(a.Sub(z.lo)); ok {
			ks = append(ks, k)
		}
	}
	if !s.worthATable(uint64(len(ks)), values) {
		return false
	}
	for _, k := range ks {
		s.runs.Remove(z.value(k))
	}
	z.active = true
	s.activeZones++
	z.t.load(ks)
	s.nSingles += z.t.n
	s.runSpilled(z)
	s.forgetZones() // slot's answers for z change
	return true
}

// worthATable reports whether a zone holding values, lone of them
// singles, keeps them in a table: activeFrom of them at least, and half
// its values.
func (s *Index) worthATable(lone uint64, values u128.U128) bool {
	return lone >= uint64(s.activeFrom()) && !u128.From64(2*lone).Less(values)
}

// addedInactive counts one more value added to z, inactive, and has it
// looked at when the count doubles.
func (s *Index) addedInactive(z *zone) {
	if z.held++; z.held >= z.checkAt && !s.activate(z) {
		z.checkAt = 2 * z.held
	}
}

// checkZones is addedInactive for every zone, when no zone is active and
// Add does not look its zone up: once s.adds doubles.
func (s *Index) checkZones() {
	for _, z := range s.zones {
		if !z.active {
			s.activate(z)
		}
	}
	s.checkAt = 2 * s.adds
}

// zoneAt returns the zone holding x, or nil.
func (s *Index) zoneAt(x u128.U128) *zone {
	if z := s.last; z != nil && !x.Less(z.lo) && !z.hi.Less(x) {
		return z
	}
	i := s.zoneFrom(x)
	if i < len(s.zones) && !x.Less(s.zones[i].lo) {
		s.last = s.zones[i]
		return s.last
	}
	return nil
}

// zoneFrom returns the index of the first zone that ends at or after x.
func (s *Index) zoneFrom(x u128.U128) int {
	lo, hi := 0, len(s.zones)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if s.zones[m].hi.Less(x) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// slot returns the zone holding x (nil if none), x's key in it, and
// whether x may be in its table: the zone is active and its table can
// hold the key. A narrow zone lies within one 2^64-aligned block, so x is
// in the narrow zone found last if it shares its upper half and its
// offset is in range; every offset of such a zone but 2^64-1 is a key
// (see table.keyOf).
func (s *Index) slot(x u128.U128) (*zone, key, bool) {
	if m := &s.memo; m.z != nil && m.x == x {
		return m.z, m.k, m.ok
	}
	z := s.last
	if z != nil && z.narrow && x.Hi == z.lo.Hi && x.Lo-z.lo.Lo <= z.hi.Lo-z.lo.Lo {
		off := x.Lo - z.lo.Lo
		ok := off != free && z.active
		s.memo.x, s.memo.z, s.memo.k, s.memo.ok = x, z, key{top: off}, ok
		return z, key{top: off}, ok
	}
	return s.slotSlow(x)
}

// slotSlow is slot past its memo and the narrow zone found last.
func (s *Index) slotSlow(x u128.U128) (*zone, key, bool) {
	z := s.zoneAt(x)
	if z == nil {
		return nil, key{}, false
	}
	k, ok := z.t.keyOf(x.Sub(z.lo))
	ok = ok && z.active
	s.memo.x, s.memo.z, s.memo.k, s.memo.ok = x, z, k, ok
	return z, k, ok
}

// forgetZones drops what slot remembers, after zones came or went.
func (s *Index) forgetZones() {
	s.last, s.memo.z = nil, nil
}

// value returns the value of key k of z.
func (z *zone) value(k key) u128.U128 { return z.lo.Add(z.t.offsetOf(k)) }

// keyIn returns the key of x, a value of z, or that of the last value z's
// table can hold if x is past it.
func (z *zone) keyIn(x u128.U128) key {
	if k, ok := z.t.keyOf(x.Sub(z.lo)); ok {
		return k
	}
	k, _ := z.t.pred(key{z.t.topLimit(), 0}) // keyOf refuses only a top of topLimit
	return k
}

// single reports whether x is a single.
func (s *Index) single(x u128.U128) bool {
	z, k, ok := s.slot(x)
	return ok && z.t.has(k)
}

// settle moves the keys z's table refused while resizing into the run
// set (each a single: nothing next to it is used), and drops z if it is
// no longer named and holds nothing.
func (s *Index) settle(z *zone) {
	if len(z.t.spilled) != 0 || !z.wanted && z.t.n == 0 {
		s.settleSlow(z)
	}
}

// settleSlow is settle when there is something to do.
func (s *Index) settleSlow(z *zone) {
	s.nSingles -= len(z.t.spilled)
	s.runSpilled(z)
	if !z.wanted && z.t.n == 0 {
		i := s.zoneFrom(z.lo)
		s.zones = slices.Delete(s.zones, i, i+1)
		s.forgetZones()
		s.recount()
	}
}

// runSpilled moves the keys z's table refused into the run set, where
// each is an isolated run (nothing next to a single is used). Callers
// count them out of nSingles if they were counted in.
func (s *Index) runSpilled(z *zone) {
	for _, k := range z.t.spilled {
		s.runs.Add(z.value(k))
	}
	z.t.spilled = z.t.spilled[:0]
}

// removeSingle removes x from its zone's table and reports whether it
// was there. (An emptied zone may go, so x's zone may be gone.)
func (s *Index) removeSingle(x u128.U128) bool {
	z, k, ok := s.slot(x)
	if !ok {
		return false
	}
	removed := z.t.remove(k)
	if removed {
		s.nSingles--
	}
	s.settle(z)
	return removed
}

// unsingle moves the single x into the run set.
func (s *Index) unsingle(x u128.U128) {
	s.removeSingle(x)
	s.runs.Add(x)
}

// Len returns the number of values, modulo 2^128. O(1).
func (s *Index) Len() u128.U128 { return s.runs.Len().Add64(uint64(s.nSingles)) }

// Runs returns the number of maximal runs of consecutive values. O(1).
func (s *Index) Runs() int { return s.runs.Runs() + s.nSingles }

// Contains reports whether x is in the set.
func (s *Index) Contains(x u128.U128) bool {
	return s.single(x) || s.runs.Contains(x)
}

// Add adds x and reports whether it was absent. A table lookup and a
// run set descent: a search of x's table answers for x and its
// neighbours (those in other zones, at its edges, take one more), and
// runset.Set.Near for the run set, whose search the Add that follows
// there reuses.
func (s *Index) Add(x u128.U128) bool {
	if s.activeZones == 0 { // no table holds anything
		if !s.runs.Add(x) {
			return false
		}
		if s.adds++; s.adds >= max(s.checkAt, s.activeFrom()) {
			s.checkZones()
		}
		return true
	}
	z, k, ok := s.slot(x)
	if z != nil && !z.active && x != z.lo && x != z.hi {
		// Neither x nor its neighbours can be singles.
		if !s.runs.Add(x) {
			return false
		}
		s.addedInactive(z)
		return true
	}
	var below, at, above bool // singles
	pos := -1                 // where x goes in z's table
	if ok {
		below, at, above, pos = z.t.around(k)
		if at {
			return false
		}
	}
	if !x.IsZero() && (!ok || k == key{}) { // x-1 is outside x's table
		below = s.single(x.Dec())
	}
	if x != u128.Max() && (!ok || !z.t.hasSucc(k)) {
		above = s.single(x.Inc())
	}
	var runBelow, inRun, runAbove bool
	if s.runs.Runs() != 0 {
		runBelow, inRun, runAbove = s.runs.Near(x)
		if inRun {
			return false
		}
	}
	if ok && !below && !above && !runBelow && !runAbove {
		var stored bool
		if pos >= 0 && !z.t.full() { // the table is as around found it
			stored = z.t.put(pos, k)
		} else {
			stored = z.t.insert(k)
		}
		if stored {
			s.nSingles++
		}
		s.settle(z)
		if stored {
			return true
		}
	}
	if below {
		s.unsingle(x.Dec())
	}
	if above {
		s.unsingle(x.Inc())
	}
	s.runs.Add(x)
	return true
}

// Remove removes x and reports whether it was present.
func (s *Index) Remove(x u128.U128) bool {
	if s.nSingles != 0 && s.removeSingle(x) {
		return true
	}
	return s.runs.Remove(x)
}

// NextFree returns the smallest value of [from, to] not in the set, and
// true; or false if there is none. One table lookup and one run set
// descent at most: the value after a single is free (its neighbours
// are), and so is the value after a run of the run set (no single is
// next to a used value).
func (s *Index) NextFree(from, to u128.U128) (u128.U128, bool) {
	if to.Less(from) {
		return u128.U128{}, false
	}
	if s.nSingles != 0 && s.single(from) {
		if from == to {
			return u128.U128{}, false
		}
		return from.Inc(), true
	}
	return s.runs.NextFree(from, to)
}

// singles calls yield with each single of [lo, hi] in ascending order
// until it returns false, and reports whether it never did. Each step
// searches afresh, so yield may change the set.
func (s *Index) singles(lo, hi u128.U128, yield func(u128.U128) bool) bool {
	for x := lo; !hi.Less(x); {
		i := s.zoneFrom(x)
		if i == len(s.zones) || hi.Less(s.zones[i].lo) {
			return true
		}
		z := s.zones[i]
		from, to := u128.MaxOf(x, z.lo), u128.Min(hi, z.hi)
		if fk, ok := z.t.keyOf(from.Sub(z.lo)); ok {
			if k, ok := z.t.next(fk); ok {
				if v := z.value(k); !to.Less(v) {
					if !yield(v) {
						return false
					}
					if v == hi {
						return true
					}
					x = v.Inc()
					continue
				}
			}
		}
		if to == hi {
			return true
		}
		x = to.Inc()
	}
	return true
}

// collect returns the singles of [lo, hi] in s.scratch.
func (s *Index) collect(lo, hi u128.U128) []u128.U128 {
	s.scratch = s.scratch[:0]
	s.singles(lo, hi, func(v u128.U128) bool {
		s.scratch = append(s.scratch, v)
		return true
	})
	return s.scratch
}

// AddRange adds every value of [lo, hi] and returns how many were absent,
// modulo 2^128; nothing if lo > hi.
func (s *Index) AddRange(lo, hi u128.U128) u128.U128 {
	if hi.Less(lo) {
		return u128.U128{}
	}
	if lo == hi {
		if s.Add(lo) {
			return u128.From64(1)
		}
		return u128.U128{}
	}
	// The singles in the range, and those next to it, join the range's run.
	a, b := lo, hi
	if !a.IsZero() {
		a = a.Dec()
	}
	if b != u128.Max() {
		b = b.Inc()
	}
	var inside uint64
	for _, v := range s.collect(a, b) {
		removed := s.removeSingle(v)
		if v.Less(lo) || hi.Less(v) {
			s.runs.Add(v)
		} else if removed {
			inside++
		}
	}
	return s.runs.AddRange(lo, hi).Sub64(inside)
}

// RemoveRange removes every value of [lo, hi] and returns how many there
// were, modulo 2^128.
func (s *Index) RemoveRange(lo, hi u128.U128) u128.U128 {
	if hi.Less(lo) {
		return u128.U128{}
	}
	var n u128.U128
	for _, v := range s.collect(lo, hi) {
		if s.removeSingle(v) {
			n = n.Inc()
		}
	}
	return n.Add(s.runs.RemoveRange(lo, hi))
}

// Count returns how many values lie in [lo, hi], modulo 2^128. It reads
// the run set's runs in the range and the part of each table in it.
func (s *Index) Count(lo, hi u128.U128) u128.U128 {
	n := s.runs.Count(lo, hi)
	if hi.Less(lo) {
		return n
	}
	for i := s.zoneFrom(lo); i < len(s.zones) && !hi.Less(s.zones[i].lo); i++ {
		z := s.zones[i]
		from, to := u128.MaxOf(lo, z.lo), u128.Min(hi, z.hi)
		if fk, ok := z.t.keyOf(from.Sub(z.lo)); ok {
			n = n.Add64(uint64(z.t.count(fk, z.keyIn(to))))
		}
	}
	return n
}

// Ranges yields, in ascending order, the maximal runs of the set
// intersected with [lo, hi]; nothing if lo > hi. The loop body may change
// the set: the iteration then goes on after the last yielded value, in
// the changed set.
func (s *Index) Ranges(lo, hi u128.U128) iter.Seq2[u128.U128, u128.U128] {
	return func(yield func(u128.U128, u128.U128) bool) {
		if hi.Less(lo) {
			return
		}
		one := func(v u128.U128) bool { return yield(v, v) }
		next := lo // the first value not yet read
		for a, b := range s.runs.Ranges(lo, hi) {
			if next.Less(a) && !s.singles(next, a.Dec(), one) {
				return
			}
			if !yield(a, b) || b == hi {
				return
			}
			next = b.Inc()
		}
		s.singles(next, hi, one)
	}
}

// Reset replaces the contents with sorted, which must be ascending
// without duplicates; otherwise it returns ErrNotSorted and changes
// nothing. The zones stay; those SetZones did not name go.
func (s *Index) Reset(sorted []u128.U128) error {
	for i := 1; i < len(sorted); i++ {
		if !sorted[i-1].Less(sorted[i]) {
			return ErrNotSorted
		}
	}
	s.zones = slices.DeleteFunc(s.zones, func(z *zone) bool { return !z.wanted })
	s.forgetZones()
	// Counted first, so that each list is made once at its size: a
	// million appends, growing, were a third of a cold start's time.
	held, lones, restN := make([]int, len(s.zones)), make([]int, len(s.zones)), 0
	s.walkZoned(sorted, func(_ u128.U128, zi int, lone bool) {
		switch {
		case zi < 0:
			restN++
		case lone:
			held[zi]++
			lones[zi]++
		default:
			held[zi]++
			restN++
		}
	})
	keys := make([][]key, len(s.zones))
	for i, n := range lones {
		keys[i] = make([]key, 0, n)
	}
	rest := make([]u128.U128, 0, restN)
	s.walkZoned(sorted, func(v u128.U128, zi int, lone bool) {
		if zi >= 0 && lone {
			if k, ok := s.zones[zi].t.keyOf(v.Sub(s.zones[zi].lo)); ok {
				keys[zi] = append(keys[zi], k)
				return
			}
		}
		rest = append(rest, v)
	})
	spilled := false
	s.adds, s.checkAt = 0, 0
	for i, z := range s.zones {
		z.active = s.worthATable(uint64(len(keys[i])), u128.From64(uint64(held[i])))
		z.held, z.checkAt = held[i], max(s.activeFrom(), 2*held[i])
		if !z.active {
			for _, k := range keys[i] {
				rest = append(rest, z.value(k))
			}
			spilled = spilled || len(keys[i]) > 0
			keys[i] = nil
		}
		z.t.load(keys[i])
		for _, k := range z.t.spilled {
			rest = append(rest, z.value(k))
			spilled = true
		}
		z.t.spilled = z.t.spilled[:0]
	}
	s.recount()
	if spilled {
		slices.SortFunc(rest, u128.U128.Cmp)
	}
	return s.runs.Reset(rest) // sorted and unique: cannot fail
}

// walkZoned calls f with each value of sorted (ascending), the index in
// s.zones of the zone holding it (-1 if none), and whether it is lone:
// neither neighbour is in sorted.
func (s *Index) walkZoned(sorted []u128.U128, f func(v u128.U128, zi int, lone bool)) {
	zi := 0
	for i, v := range sorted {
		lone := (i == 0 || sorted[i-1].Inc() != v) && (i == len(sorted)-1 || v.Inc() != sorted[i+1])
		for zi < len(s.zones) && s.zones[zi].hi.Less(v) {
			zi++
		}
		if zi < len(s.zones) && !v.Less(s.zones[zi].lo) {
			f(v, zi, lone)
		} else {
			f(v, -1, lone)
		}
	}
}

// SetZones makes the zones those of prefixes, each given as the first and
// last value of a range of 2^n values aligned on its size;
// other ranges are ignored, and of nested ones the outermost is kept.
// The singles of a zone that goes move to the zone that contains them,
// if one comes; a zone holding singles and not named again stays until
// its last single goes (so that no single moves when a pool is dropped),
// unless a new zone contains it.
func (s *Index) SetZones(prefixes [][2]u128.U128) {
	type want struct {
		lo   u128.U128
		span uint8
	}
	var ws []want
	for _, r := range prefixes {
		if r[1].Less(r[0]) {
			continue
		}
		last := r[1].Sub(r[0]) // 2^span - 1 for a range of 2^span values
		span := last.BitLen()
		if last != u128.Max().Rsh(uint(128-span)) || r[0].Lo&last.Lo != 0 || r[0].Hi&last.Hi != 0 {
			continue
		}
		ws = append(ws, want{r[0], uint8(span)})
	}
	// By first value, the larger first: an outer range before those in it.
	slices.SortFunc(ws, func(a, b want) int {
		if c := a.lo.Cmp(b.lo); c != 0 {
			return c
		}
		return int(b.span) - int(a.span)
	})
	old := s.zones
	var zones []*zone
	keep := func(z *zone) { // a zone not named: kept while it holds singles
		if z.t.n > 0 {
			z.wanted = false
			zones = append(zones, z)
		}
	}
	i := 0
	for _, w := range ws {
		hi := w.lo.Add(u128.Max().Rsh(uint(128 - w.span)))
		if n := len(zones); n > 0 && !w.lo.Less(zones[n-1].lo) && !zones[n-1].hi.Less(hi) {
			zones[n-1].wanted = true // inside the zone just kept or made
			continue
		}
		for i < len(old) && old[i].hi.Less(w.lo) {
			keep(old[i])
			i++
		}
		if i < len(old) && !w.lo.Less(old[i].lo) && !old[i].hi.Less(hi) {
			old[i].wanted = true // the same range, or one that holds it
			zones = append(zones, old[i])
			i++
			continue
		}
		z := s.newZone(w.lo, w.span)
		// Zones are aligned ranges: those of old that meet z lie inside it.
		for ; i < len(old) && !hi.Less(old[i].lo); i++ {
			o := old[i]
			z.held += o.held
			if o.t.n > 0 { // z takes o's singles: it is active
				z.active = true
			}
			for k := range o.t.keys {
				x := o.value(k)
				if nk, ok := z.t.keyOf(x.Sub(z.lo)); !ok || !z.t.insert(nk) {
					s.runs.Add(x)
				}
			}
		}
		zones = append(zones, z)
		s.runSpilled(z) // recount counts the singles
	}
	for ; i < len(old); i++ {
		keep(old[i])
	}
	s.zones = zones
	s.forgetZones()
	s.recount()
}

// recount sets nSingles and activeZones from the zones.
func (s *Index) recount() {
	s.nSingles, s.activeZones = 0, 0
	for _, z := range s.zones {
		s.nSingles += z.t.n
		if z.active {
			s.activeZones++
		}
	}
}

// Prefetch starts loading the line of x's table that a lookup of x reads
// first, if x is in a zone.
func (s *Index) Prefetch(x u128.U128) {
	if z, k, ok := s.slot(x); ok {
		z.t.prefetchKey(k)
	}
}

// Approach, Step and Adopt are those of the run set (runset.Set.Approach):
// they load, a level at a time, the nodes a lookup of a value will read.
func (s *Index) Approach(p *runset.Approach, x u128.U128) { s.runs.Approach(p, x) }

// ReadsAhead is runset.Set.ReadsAhead of the run set: whether approaches
// to its values load anything.
func (s *Index) ReadsAhead() bool { return s.runs.ReadsAhead() }

// Step is runset.Set.Step on the run set.
func (s *Index) Step(p *runset.Approach) bool { return s.runs.Step(p) }

// Adopt is runset.Set.Adopt on the run set.
func (s *Index) Adopt(p *runset.Approach) { s.runs.Adopt(p) }
