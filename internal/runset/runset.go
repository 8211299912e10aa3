// Package runset is an ordered set of 128-bit values stored as maximal runs
// of consecutive values. It is the free-space index of the address allocator:
// a value is an address number and the set holds the used addresses, so its
// memory grows with the number of runs, never with the numeric size of a range.
//
// The runs live in a B+tree keyed by run start. Leaves hold sorted arrays of
// runs and inner nodes hold, for each child, the smallest run start in that
// child's subtree. Every lookup is one descent of a few wide nodes, so it costs
// O(log n) with few cache misses even at ten million runs, and the hot paths
// (Add, Remove, Contains, NextFree) neither recurse nor allocate except when a
// node splits.
//
// Memory is what limits the allocator in huge IPv6 ranges, where randomly
// chosen addresses are each a run of their own, so leaves are kept small and
// full. (The allocator's sparse index, internal/sparse, keeps most such lone
// addresses in a table per prefix instead; the rest, and all runs, are
// here.) A leaf whose runs all lie in one /64 (share the upper 64 bits)
// stores only the lower halves, in the compact form, and holds twice as many
// runs.
// A full leaf first hands runs to a sibling with room, as in a B*-tree, and
// splits only when neither has any; random insertion then fills leaves to
// about 88% instead of 70%, about 19 bytes per run in a /64.
//
// Deletion removes only empty nodes and never rebalances under-full ones:
// rebalancing would add code and work to every Remove for little gain, since an
// allocator's free-space index mostly grows. The price is that the height is
// bounded by about log_32 of the number of leaves created since the last
// Reset, not of the current size: churn can leave a tall tree of sparse nodes.
// A split needs about 32 run insertions, and a single insertion makes a leaf
// only for a run of another /64 landing beside a compact leaf too large to
// widen, so there are never more new leaves than insertions. With the default
// node sizes that is at most 14 levels even after 2^64 insertions, and Reset
// rebuilds a shallow tree.
package runset

import (
	"errors"
	"iter"
	"unsafe"

	"github.com/netipam/netipam/internal/prefetch"
	"github.com/netipam/netipam/internal/u128"
)

// readAheadRuns is the number of runs from which a descent prefetches the
// whole leaf it reaches (leafLines lines). Measured on a Zen 2 with a 16
// MiB L3, in NextFree + Add + Remove: -8 % at 600k runs and -16 % at 10M,
// but +3 % at 300k and +13 % at 150k, whose leaves (2 KiB each) the
// caches mostly hold; see bench/SESSIONS.md, session 19.
const readAheadRuns = 1 << 19

// leafLines is the number of 64-byte lines a leaf spans.
const leafLines = int(unsafe.Sizeof(leaf{})+63) / 64

// Node capacities. Both node types then take 2032-2040 bytes, just under the
// 2048-byte allocation size class, so no memory is lost to rounding. A
// compact leaf holds twice as many runs as a wide one in the same words.
const (
	compactCap = 126
	wideCap    = compactCap / 2
	innerCap   = 63
	// maxDepth bounds the number of inner levels a cursor records. Each
	// level splits about innerCap/2 times less often than the one below, so
	// with the real sizes 2^64 new leaves (at most one per insertion) reach
	// 14 levels, and the tests' 2-entry nodes stay far below 40 too.
	// Exceeding it panics rather than corrupting the tree.
	maxDepth = 40
)

// shrink lowers a Set's node capacities below the real ones, so that tests
// get deep trees from a handful of runs, and its read-ahead threshold
// (readAheadRuns) by ahead, so that they take that path too. The zero
// value keeps the real sizes; a Set's capacities must stay within [2,
// compactCap], [2, wideCap] and [2, innerCap], and must not change while
// it holds values.
type shrink struct{ compact, wide, inner, ahead int }

// compactMax, wideMax and innerMax are the node capacities s uses.
func (s *Set) compactMax() int { return compactCap - s.shrink.compact }
func (s *Set) wideMax() int    { return wideCap - s.shrink.wide }
func (s *Set) innerMax() int   { return innerCap - s.shrink.inner }

// leafMax is the number of runs l may hold in its current form.
func (s *Set) leafMax(l *leaf) int {
	if l.compact {
		return s.compactMax()
	}
	return s.wideMax()
}

// inner is an interior node. keys[i] is the smallest run start in the subtree
// of child i (kept exact for every i, including 0, so that a split or a root
// change can hand the key up without a descent). Children are leaves when
// leafKids is set, else inner nodes; only the matching array is used.
type inner struct {
	n        int
	leafKids bool
	keys     [innerCap]u128.U128
	kids     [innerCap]*inner
	leaves   [innerCap]*leaf
}

// Set is an ordered set of u128.U128 values stored as maximal disjoint runs:
// consecutive runs never overlap nor touch (next.start > prev.end+1), so the
// value just after a run is always absent from the set.
//
// The zero value is an empty set ready to use. A Set must not be copied after
// first use (copies would share nodes); use Clone. It is not safe for
// concurrent use, not even by readers only: a lookup records its path (the
// finger below), so callers lock for reads too.
type Set struct {
	height int       // number of inner levels; 0 means the root is leaf
	root   *inner    // root when height > 0
	leaf   *leaf     // root when height == 0; nil until the first insertion
	runs   int       // number of runs
	n      u128.U128 // number of values, modulo 2^128
	gen    uint64    // bumped by every mutation, so Ranges notices them
	// sgen is bumped by every change to an inner node or to which node is
	// the root: while it holds, a descent taken earlier still reaches the
	// same leaf within the same bounds (Adopt relies on it). Mutations of
	// leaves alone, the allocator's common case, leave it.
	sgen uint64

	// finger is the path of the last descent (depth, path and lf; not i).
	// A descent for a value in [fingerLo, fingerHi], the bounds that the
	// separators passed on the way down put on that leaf, reuses it instead
	// of reading the inner nodes again, while fingerGen == gen and lf is not
	// nil. An allocator adds the value NextFree just found and soon removes
	// it again, and both land in the leaf NextFree visited: in a tree too
	// large for the cache, that saves two of the three descents. A mutation
	// keeps the finger only if it changed runs of the finger's leaf alone
	// (see keepFinger): the path then still holds, and so do the bounds,
	// but for the lower one when the leaf's first start rose (see
	// raiseFingerLo). fingerOpen says that no separator bounded the leaf
	// from below: it is the leftmost of the tree, and takes every value
	// below its first run, so that no change to that run moves its bounds.
	// A Sequential allocator in a huge, sparse IPv6 range works there,
	// adding and removing the first run of the set over and over.
	finger             cursor
	fingerGen          uint64
	fingerLo, fingerHi u128.U128
	fingerOpen         bool

	// found is the answer of a recent leaf search that still holds, so that
	// the allocator's NextFree, Add of the value found and Remove of it
	// search the leaf once instead of three times.
	found found

	shrink shrink // zero but in tests
}

// found records that lf.find(x) == i while gen == its Set's gen: every
// mutation bumps gen, and nothing else changes a leaf.
type found struct {
	gen uint64
	lf  *leaf
	x   u128.U128
	i   int
}

// remember records lf.find(x) == i; it must be called after the mutation
// that made it true, when gen has its final value.
func (s *Set) remember(lf *leaf, x u128.U128, i int) {
	f := &s.found
	f.gen, f.lf, f.x, f.i = s.gen, lf, x, i
}

// findIn is lf.find(x), from the record when it is the same search.
func (s *Set) findIn(lf *leaf, x u128.U128) int {
	if l, i, ok := s.recalled(x); ok && l == lf {
		return i
	}
	return lf.find(x)
}

// recalled returns the leaf a descent for x reaches and lf.find(x) there,
// from the record of a search for x that still holds. The tree has not
// changed since, so the leaf is still the one for x.
func (s *Set) recalled(x u128.U128) (*leaf, int, bool) {
	if f := &s.found; f.lf != nil && f.x == x && f.gen == s.gen {
		return f.lf, f.i, true
	}
	return nil, 0, false
}

// fingerAt reports whether the finger is live and ends at l, so that its
// path can stand for a cursor's at l.
func (s *Set) fingerAt(l *leaf) bool {
	return s.finger.lf == l && s.fingerGen == s.gen
}

// changedLeaf ends a mutation without a cursor that changed runs of one
// leaf alone, and its first start only if the finger was at that leaf (see
// newMin): a live finger, wherever it is, keeps its path and bounds.
func (s *Set) changedLeaf() {
	live := s.fingerGen == s.gen
	s.gen++
	if live {
		s.fingerGen = s.gen
	}
}

// newMin records that the first start of the finger's leaf (or of the root
// leaf, which has no separators) is now m: fixMin along the finger's path,
// and raiseFingerLo.
func (s *Set) newMin(m u128.U128) {
	if s.height > 0 {
		s.fixMin(&s.finger, s.finger.depth, m)
		s.raiseFingerLo(&s.finger, m)
	}
}

// frame is one step of a descent: node and the index of the child taken.
type frame struct {
	n *inner
	i int
}

// cursor is the position of a run together with the path leading to it, so
// that neighbouring leaves and the separators above can be updated in place.
// It lives on the caller's stack.
type cursor struct {
	depth int
	path  [maxDepth]frame
	lf    *leaf
	i     int // run index in lf; -1 when the position precedes the leaf's first run
}

// innerStride is the distance between the keys inner.find reads first: 4
// keys of 16 bytes, one cache line.
const innerStride = 4

// find returns the index of the last key in keys[1:n] that is <= x, or 0.
// keys[0] is not compared: child 0 also takes values below the node's minimum.
// As findSampled does for leaves, it reads one key per cache line first,
// with loads independent of each other, then the few keys between two of
// them.
func (n *inner) find(x u128.U128) int {
	if n.n == 1 {
		return 0
	}
	if n.keys[1].Hi == x.Hi && n.keys[n.n-1].Hi == x.Hi {
		return n.findLo(x.Lo)
	}
	c := 0 // sampled keys <= x, which come first
	for k := innerStride; k < n.n; k += innerStride {
		if !x.Less(n.keys[k]) {
			c++
		}
	}
	i := c * innerStride // 0, or a key <= x
	end := min(i+innerStride, n.n)
	for i+1 < end && !x.Less(n.keys[i+1]) {
		i++
	}
	return i
}

// findLo is find when keys[1:n] all have the upper half of x, as they do
// in a /64 (the allocator's huge, sparse case): one comparison of lower
// halves per key, and counts instead of loops that stop at the answer, so
// that the compiler emits no branch on the keys for the processor to
// mispredict once per loop.
func (n *inner) findLo(x uint64) int {
	keys := n.keys[:n.n]
	c := 0
	for k := innerStride; k < len(keys); k += innerStride {
		c += b2i(keys[k].Lo <= x)
	}
	i := c * innerStride
	// The keys between are sorted: those <= x come first.
	for _, k := range keys[i+1 : min(i+innerStride, len(keys))] {
		i += b2i(k.Lo <= x)
	}
	return i
}

// b2i is 1 for true and 0 for false; the compiler makes it a flag, not a
// branch.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (n *inner) insertChild(j int, key u128.U128, kid *inner, lf *leaf) {
	copy(n.keys[j+1:n.n+1], n.keys[j:n.n])
	n.keys[j] = key
	if n.leafKids {
		copy(n.leaves[j+1:n.n+1], n.leaves[j:n.n])
		n.leaves[j] = lf
	} else {
		copy(n.kids[j+1:n.n+1], n.kids[j:n.n])
		n.kids[j] = kid
	}
	n.n++
}

func (n *inner) removeChild(j int) {
	copy(n.keys[j:], n.keys[j+1:n.n])
	n.n--
	// Clear the vacated slot so that the node does not keep garbage alive.
	if n.leafKids {
		copy(n.leaves[j:], n.leaves[j+1:n.n+1])
		n.leaves[n.n] = nil
	} else {
		copy(n.kids[j:], n.kids[j+1:n.n+1])
		n.kids[n.n] = nil
	}
}

// locate returns the leaf that holds the last run starting at or before x,
// and that run's index (-1 if x precedes every run). The set must be non-empty.
// Exact keys make the answer always lie in the leaf reached by the descent.
func (s *Set) locate(x u128.U128) (*leaf, int) {
	l := s.leafFor(x)
	return l, l.find(x)
}

// leafFor is the leaf locate searches: the root leaf, or the one a
// descent reaches. It inlines, so that the hot callers (NextFree, Near)
// reach a root leaf without a call before its search.
func (s *Set) leafFor(x u128.U128) *leaf {
	if s.height == 0 {
		return s.leaf
	}
	return s.descend(x)
}

// descend returns the leaf a descent for x reaches, with its path in
// s.finger: the finger's own when x is within its bounds, else a new one.
// The tree must have inner nodes.
func (s *Set) descend(x u128.U128) *leaf {
	f := &s.finger
	if f.lf != nil && s.fingerGen == s.gen && !x.Less(s.fingerLo) && !s.fingerHi.Less(x) {
		return f.lf
	}
	// The bounds the deepest separators put on x are the tightest: a
	// subtree's keys lie between its parent's keys for it and the next.
	lo, hi, open := u128.U128{}, u128.Max(), true
	n := s.root
	for d := 0; ; d++ {
		i := n.find(x)
		f.path[d] = frame{n, i}
		if i > 0 {
			lo, open = n.keys[i], false
		}
		if i+1 < n.n {
			hi = n.keys[i+1].Dec()
		}
		if n.leafKids {
			f.depth, f.lf = d+1, n.leaves[i]
			if s.ReadsAhead() {
				// The leaf's header, its sampled starts and then the end
				// of the run found are three waits one after the other
				// in a tree past the caches; all its lines at once are one.
				prefetch.Lines(unsafe.Pointer(f.lf), leafLines)
			}
			break
		}
		n = n.kids[i]
	}
	s.fingerLo, s.fingerHi, s.fingerOpen, s.fingerGen = lo, hi, open, s.gen
	return f.lf
}

// keepFinger ends a mutation that used c: the finger stays valid if c is
// at the finger's leaf and the mutation was simple (it changed runs of
// that leaf only, and the separators above it only through fixMin, with
// raiseFingerLo told of a rise), and is dropped otherwise.
//
// A first start falls only in the leftmost leaf, whose bounds are open: a
// value below a bounded leaf's first start descends to the leaf before.
func (s *Set) keepFinger(c *cursor, simple bool) {
	if simple && c.lf == s.finger.lf {
		s.fingerGen = s.gen
	} else {
		s.finger.lf = nil
	}
}

// raiseFingerLo records that the first start of c's leaf rose to m, and
// fixMin moved the separator above it: values below m now go to the leaf
// before, unless none bounds the leaf from below.
func (s *Set) raiseFingerLo(c *cursor, m u128.U128) {
	if c.lf == s.finger.lf && !s.fingerOpen {
		s.fingerLo = m
	}
}

// seek positions c like locate, recording the path.
func (c *cursor) seek(s *Set, x u128.U128) {
	if s.height == 0 {
		c.depth, c.lf = 0, s.leaf
	} else {
		s.descend(x)
		c.copyFrom(&s.finger)
	}
	c.i = s.findIn(c.lf, x)
}

// copyFrom copies only the used part of the path, which is much shorter than
// maxDepth.
func (c *cursor) copyFrom(o *cursor) {
	c.depth, c.lf, c.i = o.depth, o.lf, o.i
	copy(c.path[:o.depth], o.path[:o.depth])
}

// nextLeaf moves c to the first run of the following leaf, if any.
func (c *cursor) nextLeaf() bool {
	d := c.depth - 1
	for d >= 0 && c.path[d].i+1 >= c.path[d].n.n {
		d--
	}
	if d < 0 {
		return false
	}
	c.path[d].i++
	for ; d < c.depth-1; d++ {
		c.path[d+1] = frame{c.path[d].n.kids[c.path[d].i], 0}
	}
	f := c.path[c.depth-1]
	c.lf, c.i = f.n.leaves[f.i], 0
	return true
}

// next moves c to the following run, if any.
func (c *cursor) next() bool {
	if c.i+1 < c.lf.n {
		c.i++
		return true
	}
	return c.nextLeaf()
}

// first positions c at the first run that ends at or after x, if any.
func (c *cursor) first(s *Set, x u128.U128) bool {
	if s.runs == 0 {
		return false
	}
	c.seek(s, x)
	if c.i >= 0 && !c.lf.end(c.i).Less(x) {
		return true
	}
	return c.next()
}

// fixMin records that the node at the given depth of c's path (depth c.depth
// is the leaf) now has minimum start m: the key naming it in its parent
// changes, and so on upwards while the node is its parent's first child.
func (s *Set) fixMin(c *cursor, depth int, m u128.U128) {
	if depth > 0 {
		s.sgen++
	}
	for d := depth - 1; d >= 0; d-- {
		f := c.path[d]
		f.n.keys[f.i] = m
		if f.i != 0 {
			return
		}
	}
}

// insertAt inserts run [start, end] at index j of c's leaf, moving runs to a
// sibling leaf or splitting nodes upwards as needed. It reports whether the
// leaf took the run as it was, in which case c's path still holds (at j = 0,
// fixMin moved the separators above to the new first start); otherwise c is
// stale.
func (s *Set) insertAt(c *cursor, j int, start, end u128.U128) bool {
	s.runs++
	if l := c.lf; l.n < s.leafMax(l) && l.fits(start, end) {
		s.insert(c, j, start, end)
		return true
	}
	s.insertSlow(c, j, start, end)
	return false
}

// insert inserts [start, end] at index j of c's leaf, which must have room
// for it in its form.
func (s *Set) insert(c *cursor, j int, start, end u128.U128) {
	c.lf.insert(j, start, end)
	if j == 0 {
		s.fixMin(c, c.depth, start)
	}
}

// insertSlow is insertAt for a run that c's leaf cannot take as it is: the
// leaf is full, or compact with another upper half than the run's.
func (s *Set) insertSlow(c *cursor, j int, start, end u128.U128) {
	l := c.lf
	if !l.fits(start, end) {
		// As runs are sorted, a run with another upper half goes first
		// (j == 0) or last (j == l.n) in a compact leaf.
		if l.n < s.wideMax() {
			l.widen()
			s.insert(c, j, start, end)
			return
		}
		// Widening this leaf would split it into two wide halves, doubling
		// the room its runs take: put the run in the next leaf or one of its
		// own, which later runs beside it fill.
		if j == l.n && s.giveNext(c, start, end) {
			return
		}
		s.addLeafBeside(c, j, start, end)
		return
	}
	// The leaf is full in its form. If it is wide only because of runs since
	// removed, compacting it makes room.
	if hi := start.Hi; !l.compact && l.n < s.compactMax() && end.Hi == hi && l.start(0).Hi == hi && l.end(l.n-1).Hi == hi {
		l.compactIfShared(s.compactMax())
		s.insert(c, j, start, end)
		return
	}
	if s.redistribute(c, j, start, end) {
		return
	}
	s.split(c, j, start, end)
}

// giveNext inserts [start, end], which follows every run of c's leaf, first
// in the leaf's next sibling, if that can take it without splitting.
func (s *Set) giveNext(c *cursor, start, end u128.U128) bool {
	if c.depth == 0 {
		return false
	}
	f := c.path[c.depth-1]
	if f.i+1 >= f.n.n {
		return false
	}
	r := f.n.leaves[f.i+1]
	switch {
	case r.n < s.leafMax(r) && r.fits(start, end):
	case r.compact && r.n < s.wideMax():
		r.widen()
	default:
		return false
	}
	r.insert(0, start, end)
	f.n.keys[f.i+1] = start
	s.sgen++
	return true
}

// addLeafBeside puts [start, end] alone in a new leaf just before c's leaf
// (j == 0) or just after it (j == c.lf.n).
func (s *Set) addLeafBeside(c *cursor, j int, start, end u128.U128) {
	l, r := c.lf, new(leaf)
	if j == 0 {
		// The new leaf must follow c's: it takes l's runs instead.
		*r = *l
		l.only(start, end)
		s.fixMin(c, c.depth, start)
	} else {
		r.only(start, end)
	}
	s.addChild(c, c.depth-1, r.start(0), nil, r)
}

// redistribute inserts [start, end] at index j of c's full leaf l by moving
// runs to a sibling under the same parent that has room, as a B*-tree does, so
// that random insertion leaves leaves fuller than splits alone would. It
// fills half the sibling's free room so that the next overflow is not
// immediate, and reports false if no sibling can take runs.
//
// Runs are counted in the sequence v of l's runs with the new one at j.
func (s *Set) redistribute(c *cursor, j int, start, end u128.U128) bool {
	if c.depth == 0 {
		return false
	}
	f := c.path[c.depth-1]
	p, i, l := f.n, f.i, c.lf
	n := l.n + 1 // length of v
	vrun := func(t int) run {
		switch {
		case t < j:
			return l.run(t)
		case t == j:
			return run{start, end}
		}
		return l.run(t - 1)
	}
	// kl runs of v may go to the left sibling and kr to the right one. As
	// runs are sorted, a compact sibling can take them if the first start
	// and the last end fit.
	var left, right *leaf
	kl, kr := 0, 0
	if i > 0 {
		left = p.leaves[i-1]
		kl = min((s.leafMax(left)-left.n+1)/2, n-1)
		if kl > 0 && !left.fits(vrun(0).start, vrun(kl-1).end) {
			kl = 0
		}
	}
	if i+1 < p.n {
		right = p.leaves[i+1]
		kr = min((s.leafMax(right)-right.n+1)/2, n-1)
		if kr > 0 && !right.fits(vrun(n-kr).start, vrun(n-1).end) {
			kr = 0
		}
	}
	switch {
	case kl == 0 && kr == 0:
		return false
	}
	s.sgen++ // a separator moves
	switch {
	case kl >= kr:
		// v[0:kl] go to the end of left, the rest stays in l.
		d := left.n
		if j < kl {
			copyRuns(left, d, l, 0, j)
			left.set(d+j, start, end)
			copyRuns(left, d+j+1, l, j, kl-1-j)
			left.n += kl
			l.cut(0, kl-1)
		} else {
			copyRuns(left, d, l, 0, kl)
			left.n += kl
			l.cut(0, kl)
			l.insert(j-kl, start, end)
		}
		p.keys[i] = l.start(0)
	default:
		// v[n-kr:] go to the front of right, the rest stays in l.
		right.open(0, kr)
		if m := n - kr; j >= m {
			copyRuns(right, 0, l, m, j-m)
			right.set(j-m, start, end)
			copyRuns(right, j-m+1, l, j, l.n-j)
			l.n = m
		} else {
			copyRuns(right, 0, l, m-1, kr)
			l.n = m - 1
			s.insert(c, j, start, end)
		}
		p.keys[i+1] = right.start(0)
	}
	return true
}

// split inserts [start, end] at index j of c's full leaf by moving its upper
// half to a new leaf. A wide half whose runs share their upper half becomes
// compact.
func (s *Set) split(c *cursor, j int, start, end u128.U128) {
	l, r := c.lf, new(leaf)
	h := (l.n + 1) / 2
	r.compact, r.hi = l.compact, l.hi
	copyRuns(r, 0, l, h, l.n-h)
	r.n, l.n = l.n-h, h
	if j <= h {
		s.insert(c, j, start, end)
	} else {
		r.insert(j-h, start, end)
	}
	l.compactIfShared(s.compactMax())
	r.compactIfShared(s.compactMax())
	s.addChild(c, c.depth-1, r.start(0), nil, r)
}

// addChild inserts a new child (kid or lf) with minimum key just after the
// child taken by c at depth d, splitting inner nodes upwards as needed.
func (s *Set) addChild(c *cursor, d int, key u128.U128, kid *inner, lf *leaf) {
	s.sgen++
	for ; d >= 0; d-- {
		p, j := c.path[d].n, c.path[d].i+1
		if p.n < s.innerMax() {
			p.insertChild(j, key, kid, lf)
			return
		}
		q := &inner{leafKids: p.leafKids}
		h := (p.n + 1) / 2
		q.n = copy(q.keys[:], p.keys[h:p.n])
		if p.leafKids {
			copy(q.leaves[:], p.leaves[h:p.n])
			clear(p.leaves[h:p.n])
		} else {
			copy(q.kids[:], p.kids[h:p.n])
			clear(p.kids[h:p.n])
		}
		p.n = h
		// j >= 1, so q never receives a child at index 0 and q.keys[0]
		// stays the minimum of q's subtree.
		if j <= h {
			p.insertChild(j, key, kid, lf)
		} else {
			q.insertChild(j-h, key, kid, lf)
		}
		key, kid, lf = q.keys[0], q, nil
	}
	// The root split: grow a new root above it.
	if s.height+1 > maxDepth {
		panic("runset: tree too deep")
	}
	r := &inner{n: 2, keys: [innerCap]u128.U128{1: key}}
	if s.height == 0 {
		r.leafKids = true
		r.keys[0] = s.leaf.start(0)
		r.leaves[0], r.leaves[1] = s.leaf, lf
		s.leaf = nil
	} else {
		r.keys[0] = s.root.keys[0]
		r.kids[0], r.kids[1] = s.root, kid
	}
	s.root = r
	s.height++
}

// removeLeaf unlinks c's (empty) leaf, then every ancestor left empty, then
// shrinks the root while it has a single child. c is stale afterwards.
func (s *Set) removeLeaf(c *cursor) {
	// The finger's path may run through what is unlinked here, or start at
	// a root shrunk away; an AddRange absorbing several leaves seeks again
	// within one mutation, when gen alone would not tell.
	s.finger.lf = nil
	if s.height == 0 {
		return // the root leaf stays, empty
	}
	s.sgen++
	for d := c.depth - 1; d >= 0; d-- {
		f := c.path[d]
		f.n.removeChild(f.i)
		if f.n.n > 0 {
			if f.i == 0 {
				s.fixMin(c, d, f.n.keys[0])
			}
			break
		}
	}
	for s.height > 0 && s.root.n == 1 {
		if s.root.leafKids {
			s.leaf = s.root.leaves[0]
			s.root = nil
		} else {
			s.root = s.root.kids[0]
		}
		s.height--
	}
}

// Len returns the number of values in the set. It is exact below 2^128: a set
// holding all 2^128 values reports 0, like the empty set (Runs tells them
// apart: 1 against 0). O(1).
func (s *Set) Len() u128.U128 { return s.n }

// Runs returns the number of maximal runs of consecutive values. O(1).
func (s *Set) Runs() int { return s.runs }

// Contains reports whether x is in the set. O(log n), no allocation.
func (s *Set) Contains(x u128.U128) bool {
	if s.runs == 0 {
		return false
	}
	l, i := s.locate(x)
	return i >= 0 && !l.end(i).Less(x)
}

// Near reports whether x-1, x and x+1 are in the set (below is false for
// x = 0, above for x = Max), with one descent, and two only when x+1 may
// start the next leaf. It records the search, so that an Add(x) that
// follows does not search again.
func (s *Set) Near(x u128.U128) (below, at, above bool) {
	if s.runs == 0 {
		return
	}
	l, i, ok := s.recalled(x) // NextFree, mostly, has just searched for x
	if !ok {
		l = s.leafFor(x) // locate, without its call
		i = l.find(x)
		s.remember(l, x, i)
	}
	if i >= 0 { // runs are maximal: x-1 is in run i or in none
		e := l.end(i)
		at = !e.Less(x)
		below = at && l.start(i).Less(x) || !at && e.Inc() == x
		if at && x.Less(e) {
			return below, true, true
		}
	}
	switch {
	case x == u128.Max():
	case i+1 < l.n:
		above = l.start(i+1) == x.Inc()
	case s.height > 0: // x's run, or the gap after it, ends the leaf
		above = s.Contains(x.Inc())
	}
	return below, at, above
}

// RunAt returns the maximal run [start, end] containing x, and ok=false if x
// is not in the set.
func (s *Set) RunAt(x u128.U128) (start, end u128.U128, ok bool) {
	if s.runs == 0 {
		return
	}
	l, i := s.locate(x)
	if i < 0 || l.end(i).Less(x) {
		return
	}
	return l.start(i), l.end(i), true
}

// NextFree returns the smallest value v with from <= v <= to that is not in
// the set, and true; or false if every value of [from, to] is in the set or
// from > to. O(log n), no allocation: runs are maximal, so the value after the
// run holding from is free, and no scan is needed.
func (s *Set) NextFree(from, to u128.U128) (u128.U128, bool) {
	if to.Less(from) {
		return u128.U128{}, false
	}
	if s.runs == 0 {
		return from, true
	}
	l := s.leafFor(from) // locate, without its call
	i := l.find(from)
	if i < 0 || l.end(i).Less(from) {
		s.remember(l, from, i)
		return from, true
	}
	e := l.end(i)
	if e == u128.Max() || !e.Less(to) {
		return u128.U128{}, false
	}
	// The next run starts after e+1 (runs never touch), so run i is also
	// the last one starting at or before e+1.
	s.remember(l, e.Inc(), i)
	return e.Inc(), true
}

// Count returns how many values of the set lie in [lo, hi] (0 if lo > hi),
// modulo 2^128 like Len. O(log n + runs in range).
func (s *Set) Count(lo, hi u128.U128) u128.U128 {
	var sum u128.U128
	if hi.Less(lo) {
		return sum
	}
	var c cursor
	for ok := c.first(s, lo); ok && !hi.Less(c.lf.start(c.i)); ok = c.next() {
		a, b := u128.MaxOf(c.lf.start(c.i), lo), u128.Min(c.lf.end(c.i), hi)
		sum = sum.Add(b.Sub(a).Inc())
	}
	return sum
}

// Ranges yields, in ascending order, every run of the set intersected with
// [lo, hi] (so the first and last may be clipped); nothing if lo > hi.
// O(log n + runs yielded). The set may be modified by the loop body: the
// iteration then resumes after the last yielded value, in the modified set.
func (s *Set) Ranges(lo, hi u128.U128) iter.Seq2[u128.U128, u128.U128] {
	return func(yield func(u128.U128, u128.U128) bool) {
		if hi.Less(lo) {
			return
		}
		var c cursor
		for ok := c.first(s, lo); ok && !hi.Less(c.lf.start(c.i)); {
			a, b := u128.MaxOf(c.lf.start(c.i), lo), u128.Min(c.lf.end(c.i), hi)
			gen := s.gen
			if !yield(a, b) || b == hi {
				return
			}
			if s.gen != gen {
				// The path may be stale: find the place again.
				lo = b.Inc()
				ok = c.first(s, lo)
			} else {
				ok = c.next()
			}
		}
	}
}

// Add adds x and reports whether it was absent. It merges x with the runs on
// either side, so runs stay maximal. O(log n), no allocation unless a node
// splits (or on the first insertion into a zero Set).
func (s *Set) Add(x u128.U128) bool {
	if l, i, ok := s.recalled(x); ok {
		if added, done := s.addIn(l, i, x); done {
			return added
		}
	}
	return !s.AddRange(x, x).IsZero()
}

// addIn is Add(x) without a descent nor a cursor, when a recent search put
// x after run i of leaf l (i == -1: before its first) and adding it changes
// l alone: x is in run i, or becomes a run of its own that l has room for.
// It reports false for done, having changed nothing, otherwise; AddRange
// then does the general case. This is the allocator's common case in a
// sparse range: the value NextFree found, with free neighbours. Like
// removeIn, it repeats what AddRange does in that case to spare the cursor
// and descent.
func (s *Set) addIn(l *leaf, i int, x u128.U128) (added, done bool) {
	if i >= 0 {
		e := l.end(i)
		if !e.Less(x) {
			return false, true // x is in run i
		}
		if e.Inc() == x {
			return false, false // x extends run i
		}
	}
	j := i + 1
	switch {
	case j < l.n && l.start(j) == x.Inc(), // x extends run j
		j == l.n && s.height > 0, // the next leaf's first run may touch x
		l.n == s.leafMax(l) || !l.fits(x, x),
		j == 0 && s.height > 0 && !s.fingerAt(l): // no path for fixMin
		return false, false
	}
	l.insert(j, x, x)
	if j == 0 {
		s.newMin(x)
	}
	s.runs++
	s.n = s.n.Inc()
	s.changedLeaf()
	s.remember(l, x, j) // for a Remove(x) that follows
	return true, true
}

// AddRange adds every value of [lo, hi] and returns how many were absent
// (modulo 2^128: adding all of [0, Max] to an empty set returns 0). It does
// nothing and returns 0 if lo > hi. All runs overlapping or touching the range
// merge into one. O(log n + runs absorbed).
func (s *Set) AddRange(lo, hi u128.U128) u128.U128 {
	if hi.Less(lo) {
		return u128.U128{}
	}
	added := hi.Sub(lo).Inc()
	if s.runs == 0 {
		s.gen++
		if s.leaf == nil {
			s.leaf = new(leaf)
		}
		s.leaf.only(lo, hi)
		s.runs, s.n = 1, added
		s.remember(s.leaf, lo, 0) // for a Remove(lo) that follows
		return added
	}
	// touches reports whether a run starting at start merges with [.., hi].
	touches := func(start u128.U128) bool { return hi == u128.Max() || !hi.Inc().Less(start) }

	var c cursor
	c.seek(s, lo) // before the generation changes, so that it may use the finger
	s.gen++
	l, j := c.lf, c.i
	if j < 0 || (!lo.IsZero() && l.end(j).Less(lo.Dec())) {
		// The run before lo, if any, does not reach it: the first run to
		// merge is the next one, possibly in the next leaf.
		j++
		if j == l.n {
			var c2 cursor
			c2.copyFrom(&c)
			if c2.nextLeaf() && touches(c2.lf.start(0)) {
				c.copyFrom(&c2)
				l, j = c.lf, 0
			}
		}
		if j == l.n || !touches(l.start(j)) {
			simple := s.insertAt(&c, j, lo, hi)
			s.keepFinger(&c, simple)
			if simple {
				s.remember(l, lo, j) // for a Remove(lo) that follows
			}
			s.n = s.n.Add(added)
			return added
		}
	}
	simple := true // no leaf but l changed, and not l's first start
	// Run j merges with [lo, hi]; grow it over every following run that
	// does. Its new bounds are stored last, as they may not fit the leaf's
	// form; until then the tree holds its old start, which finds it again.
	start := l.start(j)
	added = added.Sub(overlap(start, l.end(j), lo, hi))
	end := u128.MaxOf(l.end(j), hi)
	for {
		k := j + 1
		for ; k < l.n && touches(l.start(k)); k++ {
			added = added.Sub(overlap(l.start(k), l.end(k), lo, hi))
			end = u128.MaxOf(end, l.end(k))
		}
		if k > j+1 {
			l.cut(j+1, k)
			s.runs -= k - j - 1
		}
		if j+1 < l.n {
			break // the next run does not touch
		}
		var c2 cursor
		c2.copyFrom(&c)
		if !c2.nextLeaf() {
			break
		}
		l2 := c2.lf
		m := 0
		for ; m < l2.n && touches(l2.start(m)); m++ {
			added = added.Sub(overlap(l2.start(m), l2.end(m), lo, hi))
			end = u128.MaxOf(end, l2.end(m))
		}
		if m == 0 {
			break
		}
		simple = false
		s.runs -= m
		if m < l2.n {
			l2.cut(0, m)
			s.fixMin(&c2, c2.depth, l2.start(0))
			break
		}
		// The whole next leaf merged: drop it, find our run again (its leaf
		// and index are unchanged, but the path may not be), go on.
		l2.n = 0
		s.removeLeaf(&c2)
		c.seek(s, start)
		l, j = c.lf, c.i
	}
	simple = s.setRun(&c, j, u128.Min(start, lo), end) && simple
	s.keepFinger(&c, simple)
	if simple {
		s.remember(l, lo, j) // run j holds lo, and the next starts after it
	}
	s.n = s.n.Add(added)
	return added
}

// setRun grows run j of c's leaf to [start, end], which overlaps or touches
// no other run. It reports whether that changed c's leaf only (and the
// separators above it, if the first start fell); otherwise c is stale.
func (s *Set) setRun(c *cursor, j int, start, end u128.U128) bool {
	l := c.lf
	if !l.fits(start, end) {
		if l.n > s.wideMax() {
			// Too many runs to widen the leaf: take the run out and insert
			// it anew, which puts it beside the leaf. As runs are sorted,
			// the run is the leaf's first or last one, so l keeps runs.
			l.cut(j, j+1)
			if j == 0 {
				s.fixMin(c, c.depth, l.start(0))
			}
			s.runs--
			c.seek(s, start)
			s.insertAt(c, c.i+1, start, end)
			return false
		}
		l.widen()
	}
	old := l.start(j)
	l.set(j, start, end)
	if j == 0 && start != old {
		s.fixMin(c, c.depth, start)
	}
	return true
}

// overlap returns the size of [a, b] ∩ [lo, hi], which must not be empty
// unless the two merely touch (then 0).
func overlap(a, b, lo, hi u128.U128) u128.U128 {
	a, b = u128.MaxOf(a, lo), u128.Min(b, hi)
	if b.Less(a) {
		return u128.U128{}
	}
	return b.Sub(a).Inc()
}

// Remove removes x and reports whether it was present. Removing a value
// inside a run splits it in two. O(log n), no allocation unless that split
// overflows a node.
func (s *Set) Remove(x u128.U128) bool {
	if l, i, ok := s.recalled(x); ok {
		if removed, done := s.removeIn(l, i, x); done {
			return removed
		}
	}
	return !s.RemoveRange(x, x).IsZero()
}

// removeIn is Remove(x) without a descent nor a cursor, when a recent
// search put x after run i of leaf l (i == -1: before its first) and
// removing it changes l alone: no leaf but the root one empties, no split
// overflows l, and a change of l's first start has the finger's path to
// go up. It reports false for done, having changed nothing, otherwise;
// RemoveRange then does the general case. The allocator's common case is
// removing the value it has just added, a run of its own.
//
// Its four ways of taking a value out of a run are RemoveRange's, for one
// value, repeated on purpose: RemoveRange's cursor and descent cost about
// 400 instructions more (a Remove in the allocator's fresh /64 took 490
// through RemoveRange, and takes about 130 here).
func (s *Set) removeIn(l *leaf, i int, x u128.U128) (removed, done bool) {
	if i < 0 || l.end(i).Less(x) {
		return false, true // x is in no run
	}
	start, end := l.start(i), l.end(i)
	first := i == 0 && start == x // l's first start changes
	switch {
	case first && s.height > 0 && (l.n == 1 && start == end || !s.fingerAt(l)),
		start != x && end != x && l.n == s.leafMax(l):
		return false, false
	}
	switch {
	case start == end:
		l.cut(i, i+1)
		s.runs--
	case start == x:
		l.setStart(i, x.Inc())
	case end == x:
		l.setEnd(i, x.Dec())
	default:
		// Within the run: the bounds keep fitting the leaf's form.
		l.setEnd(i, x.Dec())
		l.insert(i+1, x.Inc(), end)
		s.runs++
	}
	if first && l.n > 0 {
		s.newMin(l.start(0))
	}
	s.n = s.n.Dec()
	s.changedLeaf()
	return true, true
}

// RemoveRange removes every value of [lo, hi] and returns how many there
// were. O(k log n) for the k runs it touches; a run that [lo, hi] cuts in
// the middle is split in two.
func (s *Set) RemoveRange(lo, hi u128.U128) u128.U128 {
	var removed u128.U128
	for !hi.Less(lo) {
		var c cursor
		if !c.first(s, lo) {
			break
		}
		l, i := c.lf, c.i
		start, end := l.start(i), l.end(i)
		if hi.Less(start) {
			break
		}
		a, b := u128.MaxOf(start, lo), u128.Min(end, hi)
		n := b.Sub(a).Inc()
		removed = removed.Add(n)
		s.n = s.n.Sub(n)
		s.gen++
		simple := true
		switch {
		case start == a && end == b:
			l.cut(i, i+1)
			s.runs--
			if l.n == 0 {
				s.removeLeaf(&c)
				simple = false
			} else if i == 0 {
				s.fixMin(&c, c.depth, l.start(0))
				s.raiseFingerLo(&c, l.start(0))
			}
		case start == a:
			// Within the run: the bounds keep fitting the leaf's form.
			l.setStart(i, b.Inc())
			if i == 0 {
				s.fixMin(&c, c.depth, b.Inc())
				s.raiseFingerLo(&c, b.Inc())
			}
		case end == b:
			l.setEnd(i, a.Dec())
		default:
			l.setEnd(i, a.Dec())
			simple = s.insertAt(&c, i+1, b.Inc(), end)
		}
		s.keepFinger(&c, simple)
		if b == hi {
			break
		}
		lo = b.Inc()
	}
	return removed
}

// ErrNotSorted is returned by Reset when its input is not strictly ascending.
var ErrNotSorted = errors.New("runset: values not sorted ascending and unique")

// Reset replaces the contents with the given values, which must be sorted
// ascending without duplicates; otherwise it returns ErrNotSorted and leaves
// the set unchanged. It builds the tree bottom-up in O(n), filling nodes to
// three quarters so that the first insertions after a cold start rarely split,
// with compact leaves wherever runs share a /64.
func (s *Set) Reset(sorted []u128.U128) error {
	runs := 0
	for i, v := range sorted {
		if i > 0 {
			p := sorted[i-1]
			if !p.Less(v) {
				return ErrNotSorted
			}
			if v == p.Inc() {
				continue
			}
		}
		runs++
	}
	gen, sgen := s.gen+1, s.sgen+1
	*s = Set{gen: gen, sgen: sgen, runs: runs, n: u128.From64(uint64(len(sorted))), shrink: s.shrink}
	if runs == 0 {
		return nil
	}
	// Leaves are allocated one by one rather than as one slab so that a leaf
	// emptied later is freed instead of pinning the whole slab. Each takes
	// runs up to three quarters of its form's capacity: compact while the
	// runs share their upper half, else wide. A compact leaf meeting another
	// upper half widens if it has room, else the next leaf starts: every leaf
	// but the last holds at least wideFill runs.
	compactFill := max(1, s.compactMax()-s.compactMax()/4)
	wideFill := max(1, s.wideMax()-s.wideMax()/4)
	leaves := make([]*leaf, 0, (runs+compactFill-1)/compactFill)
	var l *leaf
	for v := 0; v < len(sorted); {
		start := sorted[v]
		for v++; v < len(sorted) && sorted[v] == sorted[v-1].Inc(); v++ {
		}
		end := sorted[v-1]
		switch {
		case l == nil:
		case !l.fits(start, end):
			if l.n < wideFill {
				l.widen()
				l.insert(l.n, start, end)
				continue
			}
		case l.compact && l.n < compactFill, !l.compact && l.n < wideFill:
			l.insert(l.n, start, end)
			continue
		}
		l = new(leaf)
		l.only(start, end)
		leaves = append(leaves, l)
	}
	nl := len(leaves)
	if nl == 1 {
		s.leaf = leaves[0]
		return nil
	}
	// Build the level above the leaves, then levels above that until one
	// node remains; a level of two or more nodes yields a root with at least
	// two children.
	ifill := max(2, s.innerMax()-s.innerMax()/4)
	level := group(nl, ifill, func(p *inner, c int) {
		p.leafKids = true
		p.leaves[p.n], p.keys[p.n] = leaves[c], leaves[c].start(0)
	})
	s.height = 1
	for len(level) > 1 {
		kids := level
		level = group(len(kids), ifill, func(p *inner, c int) {
			p.kids[p.n], p.keys[p.n] = kids[c], kids[c].keys[0]
		})
		s.height++
	}
	s.root = level[0]
	return nil
}

// share returns how many of n items part k of parts gets when they are spread
// evenly: never 0 when parts <= n, and never more than ceil(n/parts).
func share(n, parts, k int) int {
	if k < n%parts {
		return n/parts + 1
	}
	return n / parts
}

// group makes ceil(n/fill) inner nodes over n children, spread evenly;
// add(p, c) stores child c at index p.n of p.
func group(n, fill int, add func(p *inner, c int)) []*inner {
	out := make([]*inner, (n+fill-1)/fill)
	c := 0
	for k := range out {
		p := new(inner)
		for want := share(n, len(out), k); p.n < want; p.n++ {
			add(p, c)
			c++
		}
		out[k] = p
	}
	return out
}

// Clone returns an independent deep copy of the set. O(n).
func (s *Set) Clone() *Set {
	c := &Set{height: s.height, runs: s.runs, n: s.n, shrink: s.shrink}
	if s.leaf != nil {
		l := *s.leaf
		c.leaf = &l
	}
	if s.root != nil {
		c.root = cloneInner(s.root)
	}
	return c
}

// cloneInner copies a subtree; its recursion depth is the tree height.
func cloneInner(n *inner) *inner {
	m := &inner{n: n.n, leafKids: n.leafKids, keys: n.keys}
	for i := range n.n {
		if n.leafKids {
			l := *n.leaves[i]
			m.leaves[i] = &l
		} else {
			m.kids[i] = cloneInner(n.kids[i])
		}
	}
	return m
}
