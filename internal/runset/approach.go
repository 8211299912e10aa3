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
type Approach struct {
	x     u128.U128
	next  *inner // the node the next step searches; nil when done
	depth int    // next's depth: 0 for the root
}

// Approach starts an approach to x, and loads the first node on the way.
// It does nothing for a set small enough to stay in cache (below
// readAheadRuns runs).
func (s *Set) Approach(p *Approach, x u128.U128) {
	p.x, p.next, p.depth = x, nil, 0
	if s.runs < readAheadRuns-s.shrink.ahead {
		return
	}
	if s.height == 0 {
		prefetch.Lines(unsafe.Pointer(s.leaf), leafLines)
		return
	}
	p.next = s.root
	s.loadInner(p.next, s.height == 1)
}

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
	if n.leafKids {
		if l := n.leaves[i]; l != nil {
			prefetch.Lines(unsafe.Pointer(l), leafLines)
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
