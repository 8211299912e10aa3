package allocator

import (
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// mixedStart is RandomStart's own generator: a counter, advanced
// atomically so that allocators with different locks may share it, whose
// every value goes through a 64-bit finalizing mixer (SplitMix64's). That
// is a bijection of a sequence that never repeats within 2^64 draws, and
// it passes the usual statistical batteries; a draw costs a dozen
// instructions where the global ChaCha8 source costs ten times that.
type mixedStart struct{ counter *atomic.Uint64 }

// mixGamma, odd, steps the counter through every 64-bit value; it is
// 2^64 divided by the golden ratio, which spreads consecutive counters far
// apart before the mixer.
const mixGamma = 0x9e3779b97f4a7c15

func (s mixedStart) uint64() uint64 { return splitMix(s.counter.Add(mixGamma)) }

func (s mixedStart) Start(n cidrset.Count) cidrset.Count {
	if n.Hi != 0 {
		return cidrset.Count(u128.RandBelow(u128.U128(n), s.uint64))
	}
	for {
		if off, ok := lemireBelow(s.uint64(), n.Lo); ok {
			return cidrset.Count{Lo: off}
		}
	}
}

// own returns the generator one allocator uses in place of s: the same
// mixer over a counter of its own, started at a draw of s, so that
// allocators sharing s draw apart. Its Start runs under that allocator's
// lock, as Strategy's contract says, and so needs no atomic add: on the
// benchmark host one costs about 10 ns, more than the rest of a draw.
func (s mixedStart) own() *ownedStart { return &ownedStart{counter: s.uint64()} }

// ownedStart is mixedStart for one caller at a time.
type ownedStart struct{ counter uint64 }

func (s *ownedStart) uint64() uint64 {
	s.counter += mixGamma
	return splitMix(s.counter)
}

func (s *ownedStart) Start(n cidrset.Count) cidrset.Count {
	if n.Hi != 0 {
		return cidrset.Count(u128.RandBelow(u128.U128(n), s.uint64))
	}
	for {
		if off, ok := lemireBelow(s.uint64(), n.Lo); ok {
			return cidrset.Count{Lo: off}
		}
	}
}

// splitMix is SplitMix64's finalizer.
func splitMix(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// lemireBelow maps a draw into [0, n) by Lemire's multiply-shift: the high
// word of draw × n, uniform once the draws whose low word falls below
// 2^64 mod n are thrown back (ok false: draw again). The first compare
// rules that out at once but for a chance of n in 2^64. An n of 0
// (outside Start's contract) gives 0.
func lemireBelow(draw, n uint64) (off uint64, ok bool) {
	hi, lo := bits.Mul64(draw, n)
	return hi, lo >= n || lo >= -n%n
}

// RandomStart is the Kubernetes strategy and the default: a uniformly random
// starting point, then the first free address upward. With src nil it uses
// a generator of its own, seeded at random from math/rand/v2 on each call
// of RandomStart: cheap and uniform, but, like the reference's math/rand,
// not meant to keep the next address from someone who watched earlier
// ones. Pass a seeded source for reproducible runs. The Strategy is safe
// for concurrent use: a src, which need not be, is read under a lock of
// its own.
func RandomStart(src rand.Source) Strategy {
	if src == nil {
		s := mixedStart{counter: new(atomic.Uint64)}
		s.counter.Store(rand.Uint64())
		return s
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
// does through Go's map order: every distinct prefix not known to be full
// is equally likely to be tried first (CIDRs with the same prefix count as
// one; see Policy). The allocator then goes on from there in the usual
// order rather than drawing a whole permutation per allocation.
func RandomOrder() Policy { return randomOrder{} }

type randomOrder struct{}

func (randomOrder) Order(c []Candidate) {
	rand.Shuffle(len(c), func(i, j int) { c[i], c[j] = c[j], c[i] })
}
