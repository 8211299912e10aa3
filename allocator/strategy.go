package allocator

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/internal/u128"
)

// Strategy chooses where, inside a band, dynamic allocation starts looking:
// the allocator takes the first free address at or after that point,
// wrapping around to the band's start. Start is called with the allocator's
// lock held, never concurrently by one allocator; but allocators over a
// store that is not the memory store each have their own lock, so a
// Strategy value given to several of them must be safe for concurrent use,
// as the built-in ones are.
type Strategy interface {
	// Start returns an offset in [0, n) for a band of n addresses (n >= 1).
	// An offset past the band is taken modulo n.
	Start(n cidrset.Count) cidrset.Count
}

type randomStart struct{ next func() uint64 }

func (s randomStart) Start(n cidrset.Count) cidrset.Count {
	return cidrset.Count(u128.RandBelow(u128.U128(n), s.next))
}

// RandomStart is the Kubernetes strategy and the default: a uniformly random
// starting point, then the first free address upward. With src nil it uses
// math/rand/v2's global source; pass a seeded source for reproducible runs.
// The Strategy is safe for concurrent use: a src, which need not be, is
// read under a lock of its own.
func RandomStart(src rand.Source) Strategy {
	if src == nil {
		return randomStart{next: rand.Uint64}
	}
	l := &lockedSource{src: src}
	return randomStart{next: l.Uint64}
}

// lockedSource serializes a rand.Source that allocators share.
type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

func (l *lockedSource) Uint64() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src.Uint64()
}

type sequential struct{}

func (sequential) Start(cidrset.Count) cidrset.Count { return cidrset.Count{} }

// Sequential always takes the lowest free address of a band.
func Sequential() Strategy { return sequential{} }

// Candidate is one prefix that can serve a dynamic allocation.
type Candidate struct {
	CIDR    string
	Prefix  netip.Prefix
	Created time.Time
	// Used and Size count the addresses the prefix offers.
	Used, Size cidrset.Count
}

// Policy orders the candidates of a dynamic allocation when more than one
// distinct live prefix serves the family; the allocator tries them in that
// order, skipping full ones. A candidate is a prefix: live CIDRs with the
// same prefix share one, named, served and fenced by the oldest of them.
// Order is called with the allocator's lock held (one Policy value given
// to several allocators must be safe for concurrent use, as for
// Strategy), on every such allocation, with every candidate of the family
// (oldest first): a policy
// of its own costs the allocator that much each time,
// which matters from a few hundred CIDRs on. The built-in policies are not
// called: the allocator keeps OldestFirst's order, and finds MostFree's
// and RandomOrder's first choice without ordering the rest.
type Policy interface {
	// Order reorders cands in place. Candidates it drops (by repeating
	// others) or makes up are tried after, or skipped: an allocation
	// fails as full only when every live CIDR is.
	Order(cands []Candidate)
}

// PolicyFunc adapts a function to Policy.
type PolicyFunc func(cands []Candidate)

// Order calls f.
func (f PolicyFunc) Order(cands []Candidate) { f(cands) }

// OldestFirst, the default, fills the oldest CIDR first (by creation time,
// then name): addresses stay in the original range until it is full, and a
// CIDR added to extend the range takes over only then. Its order changes
// only with the CIDRs, so the allocator keeps it rather than asking for it
// on every allocation: with a thousand CIDRs, sorting them per allocation
// would cost a hundred times the allocation.
func OldestFirst() Policy { return oldestFirst{} }

type oldestFirst struct{}

func (oldestFirst) Order(c []Candidate) {
	slices.SortStableFunc(c, func(a, b Candidate) int { return compareAge(a.Created, a.CIDR, b.Created, b.CIDR) })
}

// compareAge orders CIDRs oldest first, then by name.
func compareAge(created1 time.Time, name1 string, created2 time.Time, name2 string) int {
	if d := created1.Compare(created2); d != 0 {
		return d
	}
	return strings.Compare(name1, name2)
}

// MostFree prefers the CIDR with the most free addresses, spreading load
// (the oldest first among equals). The allocator keeps that CIDR at hand,
// at O(log CIDRs) per allocation and release, rather than asking for the
// whole order.
func MostFree() Policy { return mostFree{} }

type mostFree struct{}

func (mostFree) Order(c []Candidate) {
	slices.SortStableFunc(c, func(a, b Candidate) int {
		return b.Size.Sub(b.Used).Cmp(a.Size.Sub(a.Used))
	})
}

// RandomOrder tries the CIDRs in random order, as the Kubernetes allocator
// does through Go's map order: every distinct prefix is equally likely to
// be tried first (CIDRs with the same prefix count as one; see Policy). The allocator then goes on from there in the usual order rather
// than drawing a whole permutation per allocation.
func RandomOrder() Policy { return randomOrder{} }

type randomOrder struct{}

func (randomOrder) Order(c []Candidate) {
	rand.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
}
