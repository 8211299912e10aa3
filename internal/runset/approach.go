package runset

import (
	"unsafe"

	"github.com/netipam/netipam/internal/prefetch"
	"github.com/netipam/netipam/internal/u128"
)

// Approach is a descent toward a value taken one level at a time, each
// step searching a node the step before had loaded and starting to load
// the next: a caller that knows the values it will look up some calls
// ahead (an allocator drawing its random starts in advance) steps each of
// them once per call, and finds the nodes of each in cache when it looks
// it up, instead of waiting for them one after the other then.
//
// An approach only loads memory; it changes nothing and answers nothing.
// The set may change between its steps: a node it holds may have left the
// tree, and is then searched all the same (it is still a node, and the
// garbage collector keeps it), which loads the wrong lines at worst. The
// zero value has nothing to do.
//
// An approach that reaches its leaf while no inner node changes is the
// descent a lookup of its value would make: Adopt hands it to the set, so
// that the lookup does not search the inner nodes a second time.
type Approach struct {
	x     u128.U128
	next  *inner // the node the next step searches; nil when done
	depth int    // next's depth: 0 for the root

	// The steps taken so far, the bounds their separators put on x (as
	// descend computes them), the set's sgen when the approach began, and
	// the leaf once reached (nil until then).
	path   [maxDepth]frame
	lo, hi u128.U128
	open   bool
	sgen   uint64
	lf     *leaf
}

// Approach starts an approach to x at the root, which every descent
// searches and so is in cache (a root leaf is loaded). It does nothing
// for a set small enough to stay in cache (below readAheadRuns runs).
func (s *Set) Approach(p *Approach, x u128.U128) {
	p.x, p.next, p.depth, p.lf = x, nil, 0, nil
	if !s.ReadsAhead() {
		return
	}
	if s.height == 0 {
		prefetch.Lines(unsafe.Pointer(s.leaf), leafLines)
		return
	}
	// Every descent searches the root: it is in cache, and is not loaded.
	p.next, p.sgen = s.root, s.sgen
	p.lo, p.hi, p.open = u128.U128{}, u128.Max(), true
}

// ReadsAhead reports whether s is large enough (readAheadRuns runs) for
// approaches to load anything: below, Approach leaves nothing to step.
func (s *Set) ReadsAhead() bool { return s.runs >= readAheadRuns-s.shrink.ahead }

// loadInner starts loading the lines of n that a search of it reads: its
// header and keys, and the array of children of its kind (leafKids, told
// by its depth, as n itself is not loaded yet).
func (s *Set) loadInner(n *inner, leafKids bool) {
	prefetch.Lines(unsafe.Pointer(n), keysLines)
	if leafKids {
		prefetch.Lines(unsafe.Pointer(&n.leaves), kidsLines)
	} else {
		prefetch.Lines(unsafe.Pointer(&n.kids), kidsLines)
	}
}

// keysLines and kidsLines are the lines an inner node's header and keys,
// and one of its arrays of children, span.
const (
	keysLines = int(unsafe.Offsetof(inner{}.kids)+63) / 64
	kidsLines = int(unsafe.Sizeof(inner{}.kids)+63)/64 + 1 // the array need not start a line
)

// Step takes p one level down: it searches the node loaded last and
// starts loading the child on the way to p's value (a leaf whole, an
// inner node's lines that a search reads). It reports whether there is a
// level left.
func (s *Set) Step(p *Approach) bool {
	n := p.next
	if n == nil || n.n == 0 { // done, or a node emptied since
		p.next = nil
		return false
	}
	i := n.find(p.x)
	if p.depth >= len(p.path) { // only through nodes unlinked since
		p.next = nil
		return false
	}
	p.path[p.depth] = frame{n, i}
	if i > 0 {
		p.lo, p.open = n.keys[i], false
	}
	if i+1 < n.n {
		p.hi = n.keys[i+1].Dec()
	}
	if n.leafKids {
		if l := n.leaves[i]; l != nil {
			prefetch.Lines(unsafe.Pointer(l), leafLines)
			p.lf = l
		}
		p.next = nil
		return false
	}
	p.next = n.kids[i]
	if p.next == nil {
		return false
	}
	p.depth++
	s.loadInner(p.next, p.depth == s.height-1)
	return true
}

// Adopt makes p's descent the set's finger, if p has reached its leaf and
// no inner node has changed since p began (sgen, and the root, are those
// p saw): a lookup of any value within p's bounds, such as p's own, then
// starts at that leaf instead of searching the inner nodes again. Adopt
// does nothing otherwise, and changes no value in the set either way.
func (s *Set) Adopt(p *Approach) {
	if p.lf == nil || p.sgen != s.sgen || s.height == 0 || p.depth+1 != s.height || p.path[0].n != s.root {
		return
	}
	f := &s.finger
	f.depth, f.lf = s.height, p.lf
	copy(f.path[:s.height], p.path[:s.height])
	s.fingerLo, s.fingerHi, s.fingerOpen, s.fingerGen = p.lo, p.hi, p.open, s.gen
}
