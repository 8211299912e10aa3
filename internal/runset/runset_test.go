package runset

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/netipam/netipam/internal/u128"
	"pgregory.net/rapid"
)

var (
	top   = u128.Max()
	two64 = u128.U128{Hi: 1}
)

func v(x uint64) u128.U128 { return u128.From64(x) }

// check walks the whole tree and validates every invariant: leaves all at
// the same depth, no empty node (except an empty root leaf), no leaf over its
// form's capacity, runs sorted, disjoint and non-adjacent across leaves,
// exact minimum keys in inner nodes, no single-child root, and the maintained
// Runs and Len.
func (s *Set) check() error {
	var (
		runs    int
		n       u128.U128
		prevEnd u128.U128
		have    bool
	)
	visitLeaf := func(l *leaf) error {
		if l.n > s.leafMax(l) || (l.compact && l.n > compactCap) || (!l.compact && l.n > wideCap) {
			return fmt.Errorf("leaf (compact %v) holds %d runs", l.compact, l.n)
		}
		for i := range l.n {
			a, b := l.start(i), l.end(i)
			if b.Less(a) {
				return fmt.Errorf("run [%v, %v] reversed", a, b)
			}
			if have && (prevEnd == u128.Max() || !prevEnd.Inc().Less(a)) {
				return fmt.Errorf("run [%v, %v] overlaps or touches previous end %v", a, b, prevEnd)
			}
			prevEnd, have = b, true
			runs++
			n = n.Add(b.Sub(a).Inc())
		}
		return nil
	}
	var walk func(p *inner, depth int) error
	walk = func(p *inner, depth int) error {
		if p.n < 1 || (depth == 0 && p.n < 2) {
			return fmt.Errorf("inner node at depth %d has %d children", depth, p.n)
		}
		if p.leafKids != (depth == s.height-1) {
			return fmt.Errorf("leafKids=%v at depth %d of %d", p.leafKids, depth, s.height)
		}
		for i := range p.n {
			if p.leafKids {
				l := p.leaves[i]
				if l.n == 0 {
					return fmt.Errorf("empty leaf under depth %d", depth)
				}
				if p.keys[i] != l.start(0) {
					return fmt.Errorf("key %v != leaf min %v", p.keys[i], l.start(0))
				}
				if err := visitLeaf(l); err != nil {
					return err
				}
			} else {
				k := p.kids[i]
				if p.keys[i] != k.keys[0] {
					return fmt.Errorf("key %v != child min %v at depth %d", p.keys[i], k.keys[0], depth)
				}
				if err := walk(k, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	switch {
	case s.height == 0 && s.root != nil:
		return errors.New("height 0 with inner root")
	case s.height > 0 && (s.root == nil || s.leaf != nil):
		return errors.New("height > 0 without inner root, or with root leaf")
	case s.height == 0 && s.leaf != nil:
		if err := visitLeaf(s.leaf); err != nil {
			return err
		}
	case s.height > 0:
		if err := walk(s.root, 0); err != nil {
			return err
		}
	}
	if err := s.checkFinger(); err != nil {
		return err
	}
	// A live record of a leaf search must be that search's answer, and its
	// leaf one of the tree's.
	if f := s.found; f.gen == s.gen && f.lf != nil {
		if got := f.lf.find(f.x); got != f.i {
			return fmt.Errorf("found says %v at run %d, the leaf says %d", f.x, f.i, got)
		}
		if l, _ := s.locate(f.x); l != f.lf {
			return fmt.Errorf("found's leaf for %v is not the tree's", f.x)
		}
	}
	if runs != s.runs {
		return fmt.Errorf("Runs()=%d, tree has %d", s.runs, runs)
	}
	if n != s.n {
		return fmt.Errorf("Len()=%v, tree has %v", s.n, n)
	}
	return nil
}

// checkFinger validates a live finger against fresh descents: its path is
// the one to its leaf, its bounds are exactly the values that reach that
// leaf, and fingerOpen says whether nothing bounds the leaf from below.
func (s *Set) checkFinger() error {
	f := &s.finger
	if s.height == 0 || f.lf == nil || s.fingerGen != s.gen {
		return nil
	}
	route := func(x u128.U128) *leaf {
		n := s.root
		for {
			i := n.find(x)
			if n.leafKids {
				return n.leaves[i]
			}
			n = n.kids[i]
		}
	}
	if f.depth != s.height {
		return fmt.Errorf("finger depth %d, tree height %d", f.depth, s.height)
	}
	open := true
	n := s.root
	for d := range f.depth {
		fr := f.path[d]
		if fr.n != n || fr.i >= n.n {
			return fmt.Errorf("finger path leaves the tree at depth %d", d)
		}
		open = open && fr.i == 0
		if d+1 < f.depth {
			n = n.kids[fr.i]
		} else if n.leaves[fr.i] != f.lf {
			return errors.New("finger path does not end at its leaf")
		}
	}
	switch {
	case open != s.fingerOpen:
		return fmt.Errorf("fingerOpen %v, path says %v", s.fingerOpen, open)
	case s.fingerHi.Less(s.fingerLo):
		return fmt.Errorf("finger bounds [%v, %v] reversed", s.fingerLo, s.fingerHi)
	case route(s.fingerLo) != f.lf || route(s.fingerHi) != f.lf:
		return fmt.Errorf("finger bounds [%v, %v] reach other leaves", s.fingerLo, s.fingerHi)
	case open && !s.fingerLo.IsZero():
		return fmt.Errorf("open finger with lower bound %v", s.fingerLo)
	case !open && (s.fingerLo.IsZero() || route(s.fingerLo.Dec()) == f.lf):
		return fmt.Errorf("finger lower bound %v is not the leaf's separator", s.fingerLo)
	case s.fingerHi != u128.Max() && route(s.fingerHi.Inc()) == f.lf:
		return fmt.Errorf("finger upper bound %v is not the next separator", s.fingerHi)
	}
	return nil
}

type rng = [2]u128.U128

func ranges(s *Set, lo, hi u128.U128) []rng {
	var out []rng
	for a, b := range s.Ranges(lo, hi) {
		out = append(out, rng{a, b})
	}
	return out
}

func mustCheck(t testing.TB, s *Set) {
	t.Helper()
	if err := s.check(); err != nil {
		t.Fatal(err)
	}
}

func TestZeroValue(t *testing.T) {
	var s Set
	mustCheck(t, &s)
	if s.Contains(v(0)) || s.Contains(top) || !s.Len().IsZero() || s.Runs() != 0 {
		t.Fatal("zero Set not empty")
	}
	if got, ok := s.NextFree(top, top); !ok || got != top {
		t.Fatalf("NextFree on empty = %v, %v", got, ok)
	}
	if _, _, ok := s.RunAt(v(5)); ok {
		t.Fatal("RunAt on empty")
	}
	if s.Remove(v(0)) || !s.Count(v(0), top).IsZero() || ranges(&s, v(0), top) != nil {
		t.Fatal("empty set reports content")
	}
	c := s.Clone()
	mustCheck(t, c)
}

func TestEdges(t *testing.T) {
	type op func(s *Set) bool
	add := func(x u128.U128) op { return func(s *Set) bool { return s.Add(x) } }
	rem := func(x u128.U128) op { return func(s *Set) bool { return s.Remove(x) } }
	addr := func(lo, hi u128.U128, want u128.U128) op {
		return func(s *Set) bool { return s.AddRange(lo, hi) == want }
	}
	tests := []struct {
		name string
		ops  []op
		want []rng
		len  u128.U128
	}{
		{"zero", []op{add(v(0))}, []rng{{v(0), v(0)}}, v(1)},
		{"top", []op{add(top)}, []rng{{top, top}}, v(1)},
		{"zero and top stay apart", []op{add(v(0)), add(top)}, []rng{{v(0), v(0)}, {top, top}}, v(2)},
		{"duplicate", []op{add(v(7)), func(s *Set) bool { return !s.Add(v(7)) }}, []rng{{v(7), v(7)}}, v(1)},
		{"merge left", []op{add(v(5)), add(v(6))}, []rng{{v(5), v(6)}}, v(2)},
		{"merge right", []op{add(v(6)), add(v(5))}, []rng{{v(5), v(6)}}, v(2)},
		{"merge both", []op{add(v(5)), add(v(7)), add(v(6))}, []rng{{v(5), v(7)}}, v(3)},
		{"merge both at zero", []op{add(v(0)), add(v(2)), add(v(1))}, []rng{{v(0), v(2)}}, v(3)},
		{"merge both at top", []op{add(top), add(top.Sub64(2)), add(top.Dec())}, []rng{{top.Sub64(2), top}}, v(3)},
		{"merge across 2^64", []op{add(two64.Dec()), add(two64)}, []rng{{two64.Dec(), two64}}, v(2)},
		{"remove absent", []op{add(v(5)), func(s *Set) bool { return !s.Remove(v(6)) && !s.Remove(v(4)) }}, []rng{{v(5), v(5)}}, v(1)},
		{"remove single", []op{add(v(5)), rem(v(5))}, nil, v(0)},
		{"split middle", []op{addr(v(1), v(9), v(9)), rem(v(5))}, []rng{{v(1), v(4)}, {v(6), v(9)}}, v(8)},
		{"split at start", []op{addr(v(1), v(9), v(9)), rem(v(1))}, []rng{{v(2), v(9)}}, v(8)},
		{"split at end", []op{addr(v(1), v(9), v(9)), rem(v(9))}, []rng{{v(1), v(8)}}, v(8)},
		{"remove zero", []op{addr(v(0), v(3), v(4)), rem(v(0))}, []rng{{v(1), v(3)}}, v(3)},
		{"remove top", []op{addr(top.Sub64(3), top, v(4)), rem(top)}, []rng{{top.Sub64(3), top.Dec()}}, v(3)},
		{"remove near top", []op{addr(top.Sub64(3), top, v(4)), rem(top.Dec())}, []rng{{top.Sub64(3), top.Sub64(2)}, {top, top}}, v(3)},
		{"range touching zero and top", []op{addr(v(0), v(10), v(11)), addr(top.Sub64(10), top, v(11))},
			[]rng{{v(0), v(10)}, {top.Sub64(10), top}}, v(22)},
		{"range absorbs", []op{add(v(3)), add(v(5)), addr(v(10), v(12), v(3)), addr(v(4), v(9), v(5))},
			[]rng{{v(3), v(12)}}, v(10)},
		{"range touches both sides", []op{add(v(3)), add(v(9)), addr(v(4), v(8), v(5))}, []rng{{v(3), v(9)}}, v(7)},
		{"range inside run", []op{addr(v(0), v(100), v(101)), addr(v(5), v(6), v(0))}, []rng{{v(0), v(100)}}, v(101)},
		{"range reversed", []op{addr(v(6), v(5), v(0))}, nil, v(0)},
		{"range below top", []op{add(top), addr(v(0), top.Sub64(2), top.Dec())}, []rng{{v(0), top.Sub64(2)}, {top, top}}, top},
		{"almost everything", []op{addr(v(0), top.Dec(), top)}, []rng{{v(0), top.Dec()}}, top},
		// Len wraps to 0 when the set holds all 2^128 values (documented).
		{"everything", []op{addr(v(0), top, v(0))}, []rng{{v(0), top}}, v(0)},
		{"everything by merge", []op{add(v(0)), add(top), addr(v(1), top.Dec(), top.Dec())}, []rng{{v(0), top}}, v(0)},
		{"remove from everything", []op{addr(v(0), top, v(0)), rem(two64)}, []rng{{v(0), two64.Dec()}, {two64.Inc(), top}}, top},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Set
			for i, o := range tt.ops {
				if !o(&s) {
					t.Fatalf("op %d returned the wrong result", i)
				}
				mustCheck(t, &s)
			}
			if got := ranges(&s, v(0), top); !slices.Equal(got, tt.want) {
				t.Fatalf("runs %v, want %v", got, tt.want)
			}
			if s.Len() != tt.len || s.Runs() != len(tt.want) {
				t.Fatalf("Len %v Runs %d, want %v %d", s.Len(), s.Runs(), tt.len, len(tt.want))
			}
		})
	}
}

func TestNextFree(t *testing.T) {
	var s Set
	s.AddRange(v(0), v(9))
	s.AddRange(v(20), v(29))
	s.AddRange(top.Sub64(5), top)
	tests := []struct {
		from, to u128.U128
		want     u128.U128
		ok       bool
	}{
		{v(0), v(100), v(10), true},
		{v(0), v(9), v(0), false},
		{v(0), v(10), v(10), true},
		{v(5), v(5), v(0), false},
		{v(10), v(10), v(10), true},
		{v(15), v(25), v(15), true},
		{v(20), v(29), v(0), false},
		{v(20), top, v(30), true},
		{v(11), v(10), v(0), false}, // from > to
		{top.Sub64(5), top, v(0), false},
		{top.Sub64(6), top, top.Sub64(6), true},
		{top, top, v(0), false},
		{top, v(0), v(0), false},
	}
	for _, tt := range tests {
		got, ok := s.NextFree(tt.from, tt.to)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("NextFree(%v, %v) = %v, %v; want %v, %v", tt.from, tt.to, got, ok, tt.want, tt.ok)
		}
	}
	var full Set
	full.AddRange(v(0), top)
	if _, ok := full.NextFree(v(0), top); ok {
		t.Error("NextFree on the full set found a value")
	}
	if got, ok := (&Set{}).NextFree(v(0), v(0)); !ok || got != v(0) {
		t.Error("NextFree on an empty set")
	}
}

func TestQueries(t *testing.T) {
	var s Set
	s.AddRange(v(10), v(19))
	s.AddRange(v(30), v(39))
	s.AddRange(top.Sub64(9), top)
	if got := s.Count(v(15), v(34)); got != v(10) {
		t.Errorf("Count = %v", got)
	}
	if got := s.Count(v(0), top); got != v(30) {
		t.Errorf("Count all = %v", got)
	}
	if got := s.Count(v(20), v(29)); !got.IsZero() {
		t.Errorf("Count gap = %v", got)
	}
	if got := s.Count(v(20), v(10)); !got.IsZero() {
		t.Errorf("Count reversed = %v", got)
	}
	if got := ranges(&s, v(15), v(34)); !slices.Equal(got, []rng{{v(15), v(19)}, {v(30), v(34)}}) {
		t.Errorf("Ranges = %v", got)
	}
	if got := ranges(&s, top.Dec(), top); !slices.Equal(got, []rng{{top.Dec(), top}}) {
		t.Errorf("Ranges at top = %v", got)
	}
	if got := ranges(&s, v(5), v(4)); got != nil {
		t.Errorf("Ranges reversed = %v", got)
	}
	for a := range s.Ranges(v(0), top) {
		if a != v(10) {
			t.Errorf("early stop yielded %v", a)
		}
		break
	}
	if a, b, ok := s.RunAt(v(35)); !ok || a != v(30) || b != v(39) {
		t.Errorf("RunAt(35) = %v %v %v", a, b, ok)
	}
	if a, b, ok := s.RunAt(top); !ok || a != top.Sub64(9) || b != top {
		t.Errorf("RunAt(top) = %v %v %v", a, b, ok)
	}
	if _, _, ok := s.RunAt(v(25)); ok {
		t.Error("RunAt in a gap")
	}
	var full Set
	full.AddRange(v(0), top)
	if got := full.Count(v(0), top.Dec()); got != top {
		t.Errorf("Count(0, Max-1) of the full set = %v", got)
	}
}

func TestReset(t *testing.T) {
	var s Set
	s.AddRange(v(1), v(3))
	for _, bad := range [][]u128.U128{{v(2), v(1)}, {v(1), v(1)}, {v(0), top, v(5)}} {
		if err := s.Reset(bad); !errors.Is(err, ErrNotSorted) {
			t.Fatalf("Reset(%v) = %v", bad, err)
		}
		if got := ranges(&s, v(0), top); !slices.Equal(got, []rng{{v(1), v(3)}}) {
			t.Fatalf("failed Reset changed the set: %v", got)
		}
	}
	if err := s.Reset([]u128.U128{v(0), v(1), v(5), two64.Dec(), two64, top}); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, &s)
	if got := ranges(&s, v(0), top); !slices.Equal(got, []rng{{v(0), v(1)}, {v(5), v(5)}, {two64.Dec(), two64}, {top, top}}) {
		t.Fatalf("after Reset: %v", got)
	}
	if s.Len() != v(6) {
		t.Fatalf("Len = %v", s.Len())
	}
	if err := s.Reset(nil); err != nil || s.Runs() != 0 || !s.Len().IsZero() {
		t.Fatal("Reset(nil) did not empty the set")
	}
	mustCheck(t, &s)
	s.Add(v(3))
	mustCheck(t, &s)
}

func TestClone(t *testing.T) {
	var s Set
	for i := range uint64(5000) {
		s.Add(v(i * 3))
	}
	c := s.Clone()
	want := ranges(&s, v(0), top)
	for i := range uint64(5000) {
		s.Add(v(i*3 + 1))
	}
	s.Remove(v(0))
	mustCheck(t, &s)
	mustCheck(t, c)
	if got := ranges(c, v(0), top); !slices.Equal(got, want) || c.Len() != v(5000) {
		t.Fatal("clone changed with the original")
	}
}

// TestRangesModify removes values while iterating; the iteration must go on
// over the modified set without skipping or repeating runs.
func TestRangesModify(t *testing.T) {
	var s Set
	s.setCaps(3, 2, 3)
	for i := range uint64(300) {
		s.Add(v(i * 4))
		s.Add(v(i*4 + 1))
	}
	if s.height < 3 {
		t.Fatalf("height %d: the tiny nodes did not make a deep tree", s.height)
	}
	var got []u128.U128
	for a, b := range s.Ranges(v(0), top) {
		got = append(got, a)
		s.Remove(a) // shrinks or deletes the yielded run
		if b.Lo < 1500 {
			s.Add(b.Add64(100)) // past 1197, creates runs ahead that must be visited
		}
	}
	mustCheck(t, &s)
	// The same loop on the model: each step takes the first run after the
	// last yielded value, in the model as modified so far.
	var m model
	for i := range uint64(300) {
		m = m.addRange(v(i*4), v(i*4+1))
	}
	var want []u128.U128
	for pos := v(0); ; {
		rs := m.clip(pos, top)
		if len(rs) == 0 {
			break
		}
		a, b := rs[0][0], rs[0][1]
		want = append(want, a)
		m = m.remove(a)
		if b.Lo < 1500 {
			m = m.addRange(b.Add64(100), b.Add64(100))
		}
		pos = b.Inc()
	}
	if !slices.Equal(got, want) {
		t.Fatalf("visited %v\nwant %v", got, want)
	}
	if !slices.Equal(ranges(&s, v(0), top), []rng(m)) {
		t.Fatal("final content differs from the model")
	}
}

// setCaps shrinks s's node sizes so that a few runs make a deep tree, and
// has every descent read ahead. s must be empty.
func (s *Set) setCaps(compact, wide, inner int) {
	s.shrink = shrink{compact: compactCap - compact, wide: wideCap - wide, inner: innerCap - inner, ahead: readAheadRuns}
}

// TestLarge builds trees several levels deep with the real node sizes, near
// 0, 2^64 and Max, and checks every invariant along the way.
func TestLarge(t *testing.T) {
	const n = 200_000
	for _, base := range []u128.U128{v(0), two64.Sub64(n), top.Sub64(3 * n)} {
		t.Run(base.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			val := func(k int) u128.U128 { return base.Add64(uint64(3 * k)) }
			perm := r.Perm(n)
			var s Set
			for _, k := range perm {
				if !s.Add(val(k)) {
					t.Fatal("Add of a new value returned false")
				}
			}
			mustCheck(t, &s)
			if s.Runs() != n || s.height < 2 {
				t.Fatalf("Runs %d height %d", s.Runs(), s.height)
			}
			in := make([]bool, n)
			for k := range in {
				in[k] = true
			}
			for _, k := range perm[:n/2] {
				if !s.Remove(val(k)) {
					t.Fatal("Remove of a present value returned false")
				}
				in[k] = false
			}
			mustCheck(t, &s)
			for k := range n {
				if s.Contains(val(k)) != in[k] || s.Contains(val(k).Inc()) {
					t.Fatalf("Contains(%d) wrong", k)
				}
			}
			// Emptying a copy must shrink the tree back to a single leaf.
			e := s.Clone()
			for _, k := range perm[n/2:] {
				e.Remove(val(k))
			}
			mustCheck(t, e)
			if e.Runs() != 0 || e.height != 0 {
				t.Fatalf("emptied set: Runs %d height %d", e.Runs(), e.height)
			}
			e.Add(val(0))
			mustCheck(t, e)
			// Rebuild the same content bottom-up and compare.
			var sorted []u128.U128
			for k := range n {
				if in[k] {
					sorted = append(sorted, val(k))
				}
			}
			var r2 Set
			if err := r2.Reset(sorted); err != nil {
				t.Fatal(err)
			}
			mustCheck(t, &r2)
			if !slices.Equal(ranges(&s, v(0), top), ranges(&r2, v(0), top)) {
				t.Fatal("Reset and incremental sets differ")
			}
			// Fill gaps so that runs merge, then absorb thousands of runs
			// spanning many leaves with one AddRange.
			for k := 1000; k < 2000; k++ {
				s.AddRange(val(k).Inc(), val(k+1).Dec())
			}
			mustCheck(t, &s)
			for _, set := range []*Set{&s, &r2} {
				before := set.Count(val(10_000), val(150_000))
				added := set.AddRange(val(10_000), val(150_000))
				mustCheck(t, set)
				if added.Add(before) != val(150_000).Sub(val(10_000)).Inc() {
					t.Fatalf("AddRange added %v with %v before", added, before)
				}
				if set.Count(val(10_000), val(150_000)) != val(150_000).Sub(val(10_000)).Inc() {
					t.Fatal("range not full after AddRange")
				}
			}
		})
	}
}

// model is a deliberately naive reference: a sorted slice of maximal
// intervals, rebuilt by sort-and-merge after every change, with sizes summed
// in big.Int so that it does not share Set's modular arithmetic.
type model []rng

func (m model) normalize() model {
	slices.SortFunc(m, func(a, b rng) int { return a[0].Cmp(b[0]) })
	var out model
	for _, r := range m {
		if k := len(out) - 1; k >= 0 && (out[k][1] == top || !out[k][1].Inc().Less(r[0])) {
			out[k][1] = u128.MaxOf(out[k][1], r[1])
			continue
		}
		out = append(out, r)
	}
	return out
}

func (m model) addRange(lo, hi u128.U128) model {
	return append(slices.Clone(m), rng{lo, hi}).normalize()
}

func (m model) remove(x u128.U128) model {
	var out model
	for _, r := range m {
		if x.Less(r[0]) || r[1].Less(x) {
			out = append(out, r)
			continue
		}
		if r[0] != x {
			out = append(out, rng{r[0], x.Dec()})
		}
		if r[1] != x {
			out = append(out, rng{x.Inc(), r[1]})
		}
	}
	return out
}

// removeRange removes [lo, hi] (lo <= hi) from every run.
func (m model) removeRange(lo, hi u128.U128) model {
	var out model
	for _, r := range m {
		if hi.Less(r[0]) || r[1].Less(lo) {
			out = append(out, r)
			continue
		}
		if r[0].Less(lo) {
			out = append(out, rng{r[0], lo.Dec()})
		}
		if hi.Less(r[1]) {
			out = append(out, rng{hi.Inc(), r[1]})
		}
	}
	return out
}

func (m model) runAt(x u128.U128) (rng, bool) {
	for _, r := range m {
		if !x.Less(r[0]) && !r[1].Less(x) {
			return r, true
		}
	}
	return rng{}, false
}

func (m model) clip(lo, hi u128.U128) []rng {
	var out []rng
	for _, r := range m {
		a, b := u128.MaxOf(r[0], lo), u128.Min(r[1], hi)
		if !b.Less(a) {
			out = append(out, rng{a, b})
		}
	}
	return out
}

var two128 = new(big.Int).Lsh(big.NewInt(1), 128)

// size returns the number of values in rs, modulo 2^128.
func size(rs []rng) u128.U128 {
	sum := new(big.Int)
	for _, r := range rs {
		d := new(big.Int).Sub(r[1].Big(), r[0].Big())
		sum.Add(sum, d.Add(d, big.NewInt(1)))
	}
	sum.Mod(sum, two128)
	return u128.U128{Hi: new(big.Int).Rsh(sum, 64).Uint64(), Lo: sum.Uint64()}
}

func (m model) nextFree(from, to u128.U128) (u128.U128, bool) {
	if to.Less(from) {
		return u128.U128{}, false
	}
	x := from
	for {
		r, ok := m.runAt(x)
		if !ok {
			break
		}
		if r[1] == top {
			return u128.U128{}, false
		}
		x = r[1].Inc()
	}
	if to.Less(x) {
		return u128.U128{}, false
	}
	return x, true
}

// windows are the small value ranges the property test draws from: both
// ends of the space, both sides of 2^64, and the middle of the first two
// /64s, so that leaves hold runs of one or of several upper halves and switch
// between the compact and wide forms.
var windows = [][2]u128.U128{
	{v(0), v(40)},
	{v(1 << 63), v(1<<63 + 40)},
	{two64.Sub64(20), two64.Add64(20)},
	{two64.Add64(1 << 63), two64.Add64(1<<63 + 40)},
	{top.Sub64(40), top},
}

func genValue() *rapid.Generator[u128.U128] {
	return rapid.Custom(func(t *rapid.T) u128.U128 {
		w := windows[rapid.IntRange(0, len(windows)-1).Draw(t, "window")]
		return w[0].Add64(rapid.Uint64Range(0, w[1].Sub(w[0]).Lo).Draw(t, "offset"))
	})
}

func TestProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		// Tiny nodes make multi-level trees out of a few dozen runs; the
		// real sizes are drawn too. Compact leaves may be smaller or larger
		// than wide ones.
		compactMax := rapid.SampledFrom([]int{2, 3, 4, 6, 8, compactCap}).Draw(t, "compactMax")
		wideMax := rapid.SampledFrom([]int{2, 3, 4, wideCap}).Draw(t, "wideMax")
		innerMax := rapid.SampledFrom([]int{2, 3, 4, innerCap}).Draw(t, "innerMax")
		var s Set
		s.setCaps(compactMax, wideMax, innerMax)
		var m model
		val := genValue()
		// Approaches started before mutations and stepped after them
		// search nodes that split, emptied or left the tree: they must
		// neither fail nor change anything, which every check verifies.
		var approaches [3]Approach
		t.Repeat(map[string]func(*rapid.T){
			"Approach": func(t *rapid.T) {
				s.Approach(&approaches[rapid.IntRange(0, len(approaches)-1).Draw(t, "i")], val.Draw(t, "x"))
			},
			"Step": func(t *rapid.T) {
				for i := range approaches {
					s.Step(&approaches[i])
				}
			},
			// An approach adopted after mutations must be refused unless
			// its descent still holds: check's checkFinger verifies the
			// finger against a fresh descent, and every lookup after it
			// against the model.
			"Adopt": func(t *rapid.T) {
				i := rapid.IntRange(0, len(approaches)-1).Draw(t, "i")
				s.Adopt(&approaches[i])
				if err := s.checkFinger(); err != nil {
					t.Fatalf("after Adopt: %v", err)
				}
			},
			"Add": func(t *rapid.T) {
				x := val.Draw(t, "x")
				_, had := m.runAt(x)
				if got := s.Add(x); got == had {
					t.Fatalf("Add(%v) = %v", x, got)
				}
				m = m.addRange(x, x)
			},
			// Batches grow deep trees within rapid's default 30 steps.
			"AddMany": func(t *rapid.T) {
				for _, x := range rapid.SliceOfN(val, 1, 40).Draw(t, "xs") {
					_, had := m.runAt(x)
					if got := s.Add(x); got == had {
						t.Fatalf("Add(%v) = %v", x, got)
					}
					m = m.addRange(x, x)
				}
			},
			"RemoveMany": func(t *rapid.T) {
				for _, x := range rapid.SliceOfN(val, 1, 40).Draw(t, "xs") {
					_, had := m.runAt(x)
					if got := s.Remove(x); got != had {
						t.Fatalf("Remove(%v) = %v", x, got)
					}
					m = m.remove(x)
				}
			},
			"Remove": func(t *rapid.T) {
				x := val.Draw(t, "x")
				_, had := m.runAt(x)
				if got := s.Remove(x); got != had {
					t.Fatalf("Remove(%v) = %v", x, got)
				}
				m = m.remove(x)
			},
			"RemoveRange": func(t *rapid.T) {
				lo, hi := val.Draw(t, "lo"), val.Draw(t, "hi")
				want := u128.U128{}
				if !hi.Less(lo) {
					want = size(m).Sub(size(m.removeRange(lo, hi)))
					m = m.removeRange(lo, hi)
				}
				if got := s.RemoveRange(lo, hi); got != want {
					t.Fatalf("RemoveRange(%v, %v) = %v, want %v", lo, hi, got, want)
				}
			},
			"AddRange": func(t *rapid.T) {
				lo, hi := val.Draw(t, "lo"), val.Draw(t, "hi")
				want := u128.U128{}
				if !hi.Less(lo) {
					want = size(m.addRange(lo, hi)).Sub(size(m))
					m = m.addRange(lo, hi)
				}
				if got := s.AddRange(lo, hi); got != want {
					t.Fatalf("AddRange(%v, %v) = %v, want %v", lo, hi, got, want)
				}
			},
			"Reset": func(t *rapid.T) {
				vals := rapid.SliceOfN(val, 0, 80).Draw(t, "vals")
				sorted := rapid.Bool().Draw(t, "sort")
				if sorted {
					slices.SortFunc(vals, u128.U128.Cmp)
					vals = slices.Compact(vals)
				}
				ok := slices.IsSortedFunc(vals, u128.U128.Cmp) && len(slices.Compact(slices.Clone(vals))) == len(vals)
				err := s.Reset(vals)
				if (err == nil) != ok {
					t.Fatalf("Reset(%v) = %v", vals, err)
				}
				if ok {
					m = nil
					for _, x := range vals {
						m = append(m, rng{x, x})
					}
					m = m.normalize()
				}
			},
			"Clone": func(t *rapid.T) {
				s = *s.Clone()
			},
			"NextFree": func(t *rapid.T) {
				from, to := val.Draw(t, "from"), val.Draw(t, "to")
				got, ok := s.NextFree(from, to)
				want, wok := m.nextFree(from, to)
				if ok != wok || got != want {
					t.Fatalf("NextFree(%v, %v) = %v %v, want %v %v", from, to, got, ok, want, wok)
				}
			},
			// The allocator's sequence: Add the value NextFree found, maybe
			// after another operation, and maybe Remove it right after. Add
			// and Remove then reuse NextFree's leaf search (Set.found).
			"NextFreeAdd": func(t *rapid.T) {
				from := val.Draw(t, "from")
				to := rapid.SampledFrom([]u128.U128{top, val.Draw(t, "to")}).Draw(t, "to")
				x, ok := s.NextFree(from, to)
				if want, wok := m.nextFree(from, to); ok != wok || (ok && x != want) {
					t.Fatalf("NextFree(%v, %v) = %v %v, want %v %v", from, to, x, ok, want, wok)
				}
				if !ok {
					return
				}
				switch y := val.Draw(t, "y"); rapid.IntRange(0, 4).Draw(t, "between") {
				case 1:
					s.Add(y)
					m = m.addRange(y, y)
				case 2:
					s.Remove(y)
					m = m.remove(y)
				case 3:
					s.Contains(y)
				case 4:
					s.NextFree(y, top)
				}
				if rapid.Bool().Draw(t, "near") { // as the sparse index does before an Add
					s.Near(x)
				}
				_, had := m.runAt(x)
				if got := s.Add(x); got == had {
					t.Fatalf("Add(%v) = %v after NextFree", x, got)
				}
				m = m.addRange(x, x)
				if rapid.Bool().Draw(t, "remove") {
					if !s.Remove(x) {
						t.Fatalf("Remove(%v) = false right after Add", x)
					}
					m = m.remove(x)
				}
			},
			"Query": func(t *rapid.T) {
				lo, hi := val.Draw(t, "lo"), val.Draw(t, "hi")
				if got, want := s.Count(lo, hi), size(m.clip(lo, hi)); got != want {
					t.Fatalf("Count(%v, %v) = %v, want %v", lo, hi, got, want)
				}
				if got, want := ranges(&s, lo, hi), m.clip(lo, hi); !slices.Equal(got, want) {
					t.Fatalf("Ranges(%v, %v) = %v, want %v", lo, hi, got, want)
				}
			},
			"": func(t *rapid.T) {
				if err := s.check(); err != nil {
					t.Fatal(err)
				}
				// The drawn capacities are the Set's: no leaf holds more.
				if s.height == 0 && s.runs > max(compactMax, wideMax) {
					t.Fatalf("%d runs in a root leaf with capacities %d/%d", s.runs, compactMax, wideMax)
				}
				if got := ranges(&s, v(0), top); !slices.Equal(got, []rng(m)) {
					t.Fatalf("runs %v, model %v", got, m)
				}
				if s.Runs() != len(m) || s.Len() != size(m) {
					t.Fatalf("Runs %d Len %v, model %d %v", s.Runs(), s.Len(), len(m), size(m))
				}
				// Every value of every window, and the values just outside.
				for _, w := range windows {
					for x := w[0].Dec(); ; x = x.Inc() {
						r, in := m.runAt(x)
						if s.Contains(x) != in {
							t.Fatalf("Contains(%v) = %v", x, !in)
						}
						_, inBelow := m.runAt(x.Dec())
						_, inAbove := m.runAt(x.Inc())
						inBelow = inBelow && !x.IsZero()
						inAbove = inAbove && x != top
						if b, a, c := s.Near(x); b != inBelow || a != in || c != inAbove {
							t.Fatalf("Near(%v) = %v %v %v, want %v %v %v", x, b, a, c, inBelow, in, inAbove)
						}
						a, b, ok := s.RunAt(x)
						if ok != in || (ok && (rng{a, b}) != r) {
							t.Fatalf("RunAt(%v) = %v %v %v, want %v %v", x, a, b, ok, r, in)
						}
						if got, ok := s.NextFree(x, top); ok {
							if want, _ := m.nextFree(x, top); got != want {
								t.Fatalf("NextFree(%v, Max) = %v, want %v", x, got, want)
							}
						} else if _, wok := m.nextFree(x, top); wok {
							t.Fatalf("NextFree(%v, Max) failed", x)
						}
						if got, ok := s.NextFree(x, x); ok == in || (ok && got != x) {
							t.Fatalf("NextFree(%v, %v) = %v %v", x, x, got, ok)
						}
						if in {
							if got, ok := s.NextFree(r[0], r[1]); ok {
								t.Fatalf("NextFree over run %v = %v", r, got)
							}
						}
						if x == w[1].Inc() {
							break
						}
					}
				}
			},
		})
	})
}

// leafStats counts the leaves, the compact ones among them, and the room for
// runs they have in their forms.
func leafStats(s *Set) (leaves, compact, room int) {
	visit := func(l *leaf) {
		leaves++
		room += s.leafMax(l)
		if l.compact {
			compact++
		}
	}
	var walk func(p *inner)
	walk = func(p *inner) {
		for i := range p.n {
			if p.leafKids {
				visit(p.leaves[i])
			} else {
				walk(p.kids[i])
			}
		}
	}
	switch {
	case s.height > 0:
		walk(s.root)
	case s.leaf != nil:
		visit(s.leaf)
	}
	return
}

// TestLeafForms walks through the form changes with the real node sizes.
func TestLeafForms(t *testing.T) {
	p64 := func(hi, lo uint64) u128.U128 { return u128.U128{Hi: hi, Lo: lo} }
	forms := func(t *testing.T, s *Set, wantLeaves, wantCompact int) {
		t.Helper()
		mustCheck(t, s)
		if leaves, compact, _ := leafStats(s); leaves != wantLeaves || compact != wantCompact {
			t.Fatalf("%d leaves, %d compact; want %d, %d", leaves, compact, wantLeaves, wantCompact)
		}
	}
	t.Run("widen and compact again", func(t *testing.T) {
		var s Set
		s.Add(p64(5, 10))
		forms(t, &s, 1, 1)
		s.Add(p64(6, 0)) // few runs: the leaf widens
		forms(t, &s, 1, 0)
		s.Remove(p64(6, 0))
		for i := range uint64(wideCap) {
			s.Add(p64(5, 20+2*i)) // the leaf is full, but compacts instead of splitting
		}
		forms(t, &s, 1, 1)
		if s.Runs() != wideCap+1 {
			t.Fatalf("Runs %d", s.Runs())
		}
	})
	t.Run("other /64 beside a large compact leaf", func(t *testing.T) {
		var s Set
		for i := range uint64(wideCap + 1) {
			s.Add(p64(5, 2*i))
		}
		s.Add(p64(6, 100)) // after the leaf: a leaf of its own
		forms(t, &s, 2, 2)
		s.Add(p64(6, 50)) // also after it: joins the next leaf
		forms(t, &s, 2, 2)
		s.Add(p64(4, 0)) // before the leaf: a leaf of its own, first
		forms(t, &s, 3, 3)
		s.Add(p64(7, 0)) // the last leaf has few runs: it widens
		forms(t, &s, 3, 2)
		if got := ranges(&s, p64(6, 0), p64(7, 0)); !slices.Equal(got, []rng{{p64(6, 50), p64(6, 50)}, {p64(6, 100), p64(6, 100)}, {p64(7, 0), p64(7, 0)}}) {
			t.Fatalf("runs %v", got)
		}
	})
	t.Run("run grown across a /64 boundary", func(t *testing.T) {
		var s Set
		for i := range uint64(wideCap + 2) {
			s.Add(p64(5, 1<<63+2*i))
		}
		last := p64(5, 1<<63+2*(wideCap+1))
		// Growing the last run into the next /64 moves it to a leaf of
		// its own; growing the first one down into the previous /64 too,
		// as too many runs are left to widen the leaf.
		if got := s.AddRange(last, p64(6, 7)); got != p64(6, 7).Sub(last) {
			t.Fatalf("AddRange added %v", got)
		}
		forms(t, &s, 2, 1)
		s.AddRange(p64(4, 3), p64(5, 1<<63))
		forms(t, &s, 3, 1)
		if a, b, ok := s.RunAt(p64(5, 0)); !ok || a != p64(4, 3) || b != p64(5, 1<<63) {
			t.Fatalf("RunAt = %v %v %v", a, b, ok)
		}
		// A leaf of wideCap runs widens instead.
		var w Set
		for i := range uint64(wideCap) {
			w.Add(p64(5, 10+2*i))
		}
		w.AddRange(p64(4, 0), p64(5, 10))
		forms(t, &w, 1, 0)
		if w.Runs() != wideCap {
			t.Fatalf("Runs %d", w.Runs())
		}
	})
	t.Run("Reset", func(t *testing.T) {
		var vals []u128.U128
		for hi := range uint64(3) {
			for lo := range uint64(200) {
				vals = append(vals, p64(hi, 2*lo))
			}
		}
		vals = append(vals, p64(3, ^uint64(0)), p64(4, 0), p64(4, 5)) // a run across a boundary
		for lo := range uint64(10) {
			vals = append(vals, p64(5+lo, 0)) // a wide leaf
		}
		var s Set
		if err := s.Reset(vals); err != nil {
			t.Fatal(err)
		}
		mustCheck(t, &s)
		// Leaves take up to 94 runs when compact and 47 when wide, in
		// order: the 12 runs left of the first /64 share a wide leaf with
		// 35 of the second, which leaves 165 runs for two compact leaves.
		//   c0:94 c0:94 w0:12+1:35 c1:94 c1:71 c2:94 c2:94 w2:12+13
		leaves, compact, _ := leafStats(&s)
		if leaves != 8 || compact != 6 {
			t.Fatalf("%d leaves, %d compact", leaves, compact)
		}
	})
}

// TestRandomFill checks that random insertion leaves leaves mostly full, in
// one /64 (compact leaves) and over many (wide ones), and that values built
// both ways agree.
func TestRandomFill(t *testing.T) {
	for _, hiBits := range []uint{0, 16} {
		r := rand.New(rand.NewPCG(uint64(hiBits), 3))
		var s Set
		for range 100_000 {
			s.Add(u128.U128{Hi: 1<<40 + r.Uint64N(1<<hiBits), Lo: r.Uint64()})
		}
		mustCheck(t, &s)
		leaves, compact, room := leafStats(&s)
		if fill := float64(s.Runs()) / float64(room); fill < 0.8 {
			t.Errorf("%d /64s: leaves %.2f full", 1<<hiBits, fill)
		}
		if (hiBits == 0) != (compact == leaves) || (hiBits > 0 && compact != 0) {
			t.Errorf("%d /64s: %d of %d leaves compact", 1<<hiBits, compact, leaves)
		}
	}
}

// The sampled searches of leaves and inner nodes agree with a plain search
// for the last key <= x, at every node size up to the real capacities.
func TestSampledSearchesAgree(t *testing.T) {
	// Sorted low halves, up to a compact leaf's capacity; inner nodes
	// take the first innerCap of them.
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, compactCap).Draw(rt, "n")
		base := rapid.Uint64Range(0, 1<<20).Draw(rt, "base")
		keys := make([]uint64, n)
		for i := range keys {
			base += rapid.Uint64Range(1, 4).Draw(rt, "gap")
			keys[i] = base
		}
		x := rapid.Uint64Range(0, base+5).Draw(rt, "x")
		want := -1
		for i, k := range keys {
			if k <= x {
				want = i
			}
		}
		if got := findSampled(keys, x); got != want {
			rt.Fatalf("findSampled(%v, %d) = %d, want %d", keys, x, got, want)
		}
		if n > innerCap {
			return
		}
		var in inner
		in.n = n
		for i, k := range keys {
			in.keys[i] = u128.U128{Hi: 7, Lo: k}
		}
		if got := in.find(u128.U128{Hi: 7, Lo: x}); got != max(want, 0) {
			rt.Fatalf("inner.find(%d) over %v = %d, want %d", x, keys, got, max(want, 0))
		}
		// Another upper half than the keys': below all of them, or above.
		if got := in.find(u128.U128{Hi: 6, Lo: x}); got != 0 {
			rt.Fatalf("inner.find(6:%d) over 7:%v = %d, want 0", x, keys, got)
		}
		if got := in.find(u128.U128{Hi: 8, Lo: x}); got != n-1 {
			rt.Fatalf("inner.find(8:%d) over 7:%v = %d, want %d", x, keys, got, n-1)
		}
	})
	// Wide starts: pairs of words, several upper halves.
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, wideCap).Draw(rt, "n")
		words := make([]uint64, 0, 2*n)
		var starts []u128.U128
		cur := u128.U128{Hi: 5, Lo: ^uint64(0) - 8}
		for range n {
			cur = cur.Add64(rapid.Uint64Range(1, 4).Draw(rt, "gap"))
			starts = append(starts, cur)
			words = append(words, cur.Hi, cur.Lo)
		}
		x := u128.U128{Hi: 5, Lo: ^uint64(0) - 10}.Add64(rapid.Uint64Range(0, uint64(4*n+4)).Draw(rt, "x"))
		want := -1
		for i, st := range starts {
			if !x.Less(st) {
				want = i
			}
		}
		if got := findSampledWide(words, x); got != want {
			rt.Fatalf("findSampledWide(%v, %v) = %d, want %d", starts, x, got, want)
		}
		// The same starts as inner keys, of one or two upper halves.
		var in inner
		in.n = copy(in.keys[:], starts)
		if got := in.find(x); got != max(want, 0) {
			rt.Fatalf("inner.find(%v) over %v = %d, want %d", x, starts, got, max(want, 0))
		}
	})
}

// TestAddRangeAbsorbingLeavesKeepsTheTree: an AddRange that swallows
// several whole leaves unlinks them and may shrink the root between two
// seeks of one mutation; a finger kept across that would send a later
// split up a path through the detached root, losing half the tree.
func TestAddRangeAbsorbingLeavesKeepsTheTree(t *testing.T) {
	var s Set
	s.setCaps(4, 2, 2)
	for _, x := range []u128.U128{v(0), v(1 << 63), v(2), v(4), two64, two64.Sub64(20), two64.Add64(1 << 63), top.Sub64(40)} {
		s.Add(x)
	}
	mustCheck(t, &s)
	if s.height < 2 {
		t.Fatalf("height %d: the tiny nodes did not make a deep tree", s.height)
	}
	s.AddRange(v(1<<63+2), top.Sub64(40))
	mustCheck(t, &s)
	want := []run{{v(0), v(0)}, {v(2), v(2)}, {v(4), v(4)}, {v(1 << 63), v(1 << 63)}, {v(1<<63 + 2), top.Sub64(40)}}
	var got []run
	for a, b := range s.Ranges(v(0), top) {
		got = append(got, run{a, b})
	}
	if !slices.Equal(got, want) || s.Runs() != len(want) {
		t.Fatalf("after AddRange: %v (%d runs), want %v", got, s.Runs(), want)
	}
}

// TestNextFreeAddReal runs the allocator's sequence (NextFree from a random
// point, Add of the value found, sometimes Remove of it) at the real node
// sizes until leaves fill, split and hand runs to their siblings, checking
// the tree and every value added against a map.
func TestNextFreeAddReal(t *testing.T) {
	var s Set
	r := rand.New(rand.NewPCG(11, 12))
	hi := uint64(0x20010db800000000)
	used := map[u128.U128]bool{}
	for k := range 40000 {
		// A narrow window makes NextFree land on run ends, extending and
		// joining runs; a few values of the next /64 widen leaves.
		from := u128.U128{Hi: hi, Lo: r.Uint64N(200000)}
		if k%97 == 0 {
			from.Hi++
		}
		x, ok := s.NextFree(from, top)
		if !ok {
			t.Fatalf("NextFree(%v) failed", from)
		}
		if !s.Add(x) || used[x] {
			t.Fatalf("Add(%v) of a free value failed", x)
		}
		used[x] = true
		if k%3 == 0 {
			if !s.Remove(x) {
				t.Fatalf("Remove(%v) right after Add failed", x)
			}
			delete(used, x)
		}
	}
	mustCheck(t, &s)
	if s.Len() != u128.From64(uint64(len(used))) {
		t.Fatalf("Len %v, want %d", s.Len(), len(used))
	}
	for x := range used {
		if !s.Contains(x) {
			t.Fatalf("%v missing", x)
		}
	}
}

// TestLeafFastPaths drives Add and Remove through addIn and removeIn (a
// recent search of the value is on record) at every value around a few
// layouts of single values and runs, over trees of tiny nodes and a root
// leaf, checking the tree, the finger and the record after every step. Each
// case starts afresh from its layout, so the fast paths meet a leaf's first
// and last runs, full leaves, leaves of one run, and the finger at another
// leaf: cases TestProperty reaches rarely, such as a Remove of a leaf's
// first start right after an Add of it, which must move the separators and
// the finger's lower bound.
func TestLeafFastPaths(t *testing.T) {
	// Gaps of one, two and three values: a value NextFree finds may
	// touch the run before, the run after, both or neither.
	runs := []rng{{v(2), v(2)}, {v(4), v(4)}, {v(7), v(8)}, {v(10), v(12)}, {v(16), v(16)},
		{v(18), v(19)}, {v(22), v(22)}, {v(26), v(29)}, {v(31), v(31)}, {v(34), v(34)},
		{v(36), v(37)}, {v(41), v(41)}, {v(43), v(45)}, {v(48), v(48)}, {v(50), v(50)}}
	layouts := map[string]func(s *Set, base u128.U128){
		"empty": func(*Set, u128.U128) {},
		// A root leaf of one /64 for values of the next one to meet.
		"one": func(s *Set, base u128.U128) { s.Add(base.Add64(2)) },
		"ascending": func(s *Set, base u128.U128) {
			for _, r := range runs {
				s.AddRange(base.Add(r[0]), base.Add(r[1]))
			}
		},
		"descending": func(s *Set, base u128.U128) {
			for _, r := range slices.Backward(runs) {
				s.AddRange(base.Add(r[1]), base.Add(r[1])) // grown downwards
				s.AddRange(base.Add(r[0]), base.Add(r[1]))
			}
		},
		// Every other run added, then removed: leaves of one run.
		"thinned": func(s *Set, base u128.U128) {
			for _, r := range runs {
				s.AddRange(base.Add(r[0]), base.Add(r[1]))
			}
			for k, r := range runs {
				if k%2 == 1 {
					s.RemoveRange(base.Add(r[0]), base.Add(r[1]))
				}
			}
		},
	}
	type op func(s *Set, m model, x u128.U128) model
	add := func(s *Set, m model, x u128.U128) model {
		_, had := m.runAt(x)
		if got := s.Add(x); got == had {
			t.Fatalf("Add(%v) = %v", x, got)
		}
		return m.addRange(x, x)
	}
	remove := func(s *Set, m model, x u128.U128) model {
		_, had := m.runAt(x)
		if got := s.Remove(x); got != had {
			t.Fatalf("Remove(%v) = %v", x, got)
		}
		return m.remove(x)
	}
	// Searches that leave a record of x for the next step; "away" moves
	// the finger to another leaf and keeps the record.
	nextFree := func(s *Set, m model, x u128.U128) model { s.NextFree(x, x); return m }
	away := func(s *Set, m model, x u128.U128) model { s.Contains(x.Add64(1000)); return m }
	cases := map[string][]op{
		"Add,Remove":                 {add, remove},
		"Add,Add,Remove,Remove":      {add, add, remove, remove},
		"NextFree,Add,Remove":        {nextFree, add, remove},
		"NextFree,away,Add,Remove":   {nextFree, away, add, remove},
		"Add,away,Remove,Add":        {add, away, remove, add},
		"Remove,NextFree,Add,Remove": {remove, nextFree, add, remove},
	}
	// At base, the values share a /64; at baseSplit, the 2^64 boundary
	// falls among them, so compact leaves meet values they cannot hold.
	baseSplit := two64.Sub64(21)
	for _, caps := range [][3]int{{2, 2, 2}, {3, 2, 3}, {4, 2, 2}, {compactCap, wideCap, innerCap}} {
		for _, base := range []u128.U128{v(0), baseSplit} {
			for lname, build := range layouts {
				for cname, steps := range cases {
					for off := range uint64(53) {
						var s Set
						s.setCaps(caps[0], caps[1], caps[2])
						build(&s, base)
						var m model
						for a, b := range s.Ranges(v(0), top) {
							m = append(m, rng{a, b})
						}
						if lname == "ascending" && caps[0] == 2 && s.height < 2 {
							t.Fatalf("height %d: the tiny nodes did not make a deep tree", s.height)
						}
						if lname != "empty" && lname != "one" {
							far := base.Add64(1000) // a leaf for "away"
							s.Add(far)
							m = m.addRange(far, far)
						}
						x := base.Add64(off)
						for k, step := range steps {
							m = step(&s, m, x)
							// The checks' own descents move the
							// finger: put it back where the step
							// left it, for the next step.
							f, gen, lo, hi, open := s.finger, s.fingerGen, s.fingerLo, s.fingerHi, s.fingerOpen
							if err := s.check(); err != nil {
								t.Fatalf("caps %v, base %v, %s, %s at %v, step %d: %v", caps, base, lname, cname, x, k, err)
							}
							if got := ranges(&s, v(0), top); !slices.Equal(got, []rng(m)) {
								t.Fatalf("caps %v, base %v, %s, %s at %v, step %d: runs %v, model %v", caps, base, lname, cname, x, k, got, m)
							}
							s.finger, s.fingerGen, s.fingerLo, s.fingerHi, s.fingerOpen = f, gen, lo, hi, open
						}
					}
				}
			}
		}
	}
}
