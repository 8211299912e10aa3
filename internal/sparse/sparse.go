// Package sparse is the allocator's index of the used addresses that no
// bitmap holds: those of huge pools (IPv6 shorter than /104) and those
// outside every pool. It is an ordered set of 128-bit values.
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
// line, which the caller can load ahead (Prefetch); the table stays
// sorted, so that ordered questions read only the part of it in their
// range. Everything else stays in the run set:
//
//   - a value is in at most one of the two;
//   - a single's neighbours are not in the index: when one is added, the
//     single moves to the run set with it, so the run set's runs and the
//     singles together are the index's maximal runs, and the value after
//     a run of the run set is no single;
//   - a table may refuse a value (an offset of 2^64-1, or one whose home
//     is crowded); it is then kept in the run set, as an isolated run.
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
	reach int     // how far from home a table keeps a key: 0 for probeMax (tests lower it)

	nSingles int // in all tables

	scratch []u128.U128 // the singles of a range being moved
}

// zone is a range of 2^span values, aligned on its size, whose singles
// are in t as offsets from lo.
type zone struct {
	lo, hi u128.U128
	t      table
	// wanted says that the last SetZones named the zone. A zone it did
	// not name is kept while it holds singles (so that dropping a pool
	// moves none of them) and goes when its last one does.
	wanted bool
}

// newZone returns an empty zone over [lo, lo+2^span).
func (s *Index) newZone(lo u128.U128, span uint8) *zone {
	z := &zone{lo: lo, hi: lo.Add(u128.Max().Rsh(uint(128 - span))), wanted: true}
	reach := s.reach
	if reach == 0 {
		reach = probeMax
	}
	z.t.init(span, reach)
	return z
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

// slot returns the zone holding x and x's offset in it, and whether its
// table can hold x.
// A zone lies within one 2^64-aligned block, so x is in the zone found
// last if it shares its upper half and its offset is in range; every
// offset but 2^64-1 fits a table (see table.limit).
func (s *Index) slot(x u128.U128) (*zone, uint64, bool) {
	if z := s.last; z != nil && x.Hi == z.lo.Hi && x.Lo-z.lo.Lo <= z.hi.Lo-z.lo.Lo {
		off := x.Lo - z.lo.Lo
		return z, off, off != free
	}
	return s.slotSlow(x)
}

// slotSlow is slot past the zone found last.
func (s *Index) slotSlow(x u128.U128) (*zone, uint64, bool) {
	z := s.zoneAt(x)
	if z == nil {
		return nil, 0, false
	}
	off := x.Sub(z.lo).Lo
	return z, off, off != free
}

// single reports whether x is a single.
func (s *Index) single(x u128.U128) bool {
	z, off, ok := s.slot(x)
	return ok && z.t.has(off)
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
	for _, k := range z.t.spilled {
		s.runs.Add(z.lo.Add64(k))
	}
	z.t.spilled = z.t.spilled[:0]
	if !z.wanted && z.t.n == 0 {
		i := s.zoneFrom(z.lo)
		s.zones = slices.Delete(s.zones, i, i+1)
		s.last = nil
	}
}

// removeSingle removes x from its zone's table and reports whether it
// was there. (An emptied zone may go, so x's zone may be gone.)
func (s *Index) removeSingle(x u128.U128) bool {
	z, off, ok := s.slot(x)
	if !ok {
		return false
	}
	removed := z.t.remove(off)
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
	z, off, ok := s.slot(x)
	var below, at, above bool // singles
	if ok {
		below, at, above = z.t.around(off)
		if at {
			return false
		}
	}
	if !x.IsZero() && (!ok || off == 0) {
		below = s.single(x.Dec())
	}
	if x != u128.Max() && (!ok || off+1 >= z.t.limit()) {
		above = s.single(x.Inc())
	}
	runBelow, inRun, runAbove := s.runs.Near(x)
	if inRun {
		return false
	}
	if ok && !below && !above && !runBelow && !runAbove {
		stored := z.t.insert(off)
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
	if z, off, ok := s.slot(x); ok && z.t.remove(off) {
		s.nSingles--
		s.settle(z)
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
	if s.single(from) {
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
		if k, ok := z.t.next(from.Sub(z.lo).Lo); ok {
			if v := z.lo.Add64(k); !to.Less(v) {
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
		n = n.Add64(uint64(z.t.count(from.Sub(z.lo).Lo, to.Sub(z.lo).Lo)))
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
	s.last = nil
	keys := make([][]uint64, len(s.zones))
	var rest []u128.U128
	zi := 0
	for i, v := range sorted {
		lone := (i == 0 || sorted[i-1].Inc() != v) && (i == len(sorted)-1 || v.Inc() != sorted[i+1])
		for zi < len(s.zones) && s.zones[zi].hi.Less(v) {
			zi++
		}
		if lone && zi < len(s.zones) && !v.Less(s.zones[zi].lo) {
			keys[zi] = append(keys[zi], v.Sub(s.zones[zi].lo).Lo)
			continue
		}
		rest = append(rest, v)
	}
	spilled := false
	s.nSingles = 0
	for i, z := range s.zones {
		z.t.load(keys[i])
		s.nSingles += z.t.n
		for _, k := range z.t.spilled {
			rest = append(rest, z.lo.Add64(k))
			spilled = true
		}
		z.t.spilled = z.t.spilled[:0]
	}
	if spilled {
		slices.SortFunc(rest, u128.U128.Cmp)
	}
	return s.runs.Reset(rest) // sorted and unique: cannot fail
}

// SetZones makes the zones those of prefixes, each given as the first and
// last value of a range of 2^n values (n at most 64) aligned on its size;
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
		if span > 64 || last != u128.Max().Rsh(uint(128-span)) || r[0].Lo&last.Lo != 0 {
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
			base := o.lo.Sub(z.lo).Lo
			for k, ok := o.t.next(0); ok; k, ok = o.t.next(k + 1) {
				if !z.t.insert(base + k) {
					s.runs.Add(o.lo.Add64(k))
				}
				if k+1 >= o.t.limit() {
					break
				}
			}
		}
		zones = append(zones, z)
		for _, k := range z.t.spilled {
			s.runs.Add(z.lo.Add64(k))
		}
		z.t.spilled = z.t.spilled[:0]
	}
	for ; i < len(old); i++ {
		keep(old[i])
	}
	s.zones, s.last = zones, nil
	s.nSingles = 0
	for _, z := range zones {
		s.nSingles += z.t.n
	}
}

// Prefetch starts loading the line of x's table that a lookup of x reads
// first, if x is in a zone.
func (s *Index) Prefetch(x u128.U128) {
	if z, off, ok := s.slot(x); ok {
		z.t.prefetchKey(off)
	}
}

// Approach, Step and Adopt are those of the run set (runset.Set.Approach):
// they load, a level at a time, the nodes a lookup of a value will read.
func (s *Index) Approach(p *runset.Approach, x u128.U128) { s.runs.Approach(p, x) }

// Step is runset.Set.Step on the run set.
func (s *Index) Step(p *runset.Approach) bool { return s.runs.Step(p) }

// Adopt is runset.Set.Adopt on the run set.
func (s *Index) Adopt(p *runset.Approach) { s.runs.Adopt(p) }
