package allocator

import (
	"sync"
	"testing"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/store/memory"
)

// defaultStarts are the two forms of the default generator: the Strategy
// RandomStart(nil) returns, which allocators may share, and the one an
// allocator makes of it for its own use under its lock.
func defaultStarts() map[string]Strategy {
	return map[string]Strategy{
		"shared": RandomStart(nil),
		"owned":  RandomStart(nil).(mixedStart).own(),
	}
}

// chiSquare returns Pearson's statistic of counts against a uniform
// expectation.
func chiSquare(counts []int, draws int) float64 {
	want := float64(draws) / float64(len(counts))
	var sum float64
	for _, c := range counts {
		d := float64(c) - want
		sum += d * d / want
	}
	return sum
}

// The default RandomStart (its own generator) is uniform over a small
// band, one draw at a time and in pairs of consecutive draws (which a
// counter without its mixer fails). The seed is random, so the bounds are
// ones a uniform source exceeds with a chance under 1e-12 (chi-square
// with 9 and 63 degrees of freedom).
func TestRandomStartDefaultIsUniform(t *testing.T) {
	for name, s := range defaultStarts() {
		t.Run(name, func(t *testing.T) { testUniform(t, s) })
	}
}

func testUniform(t *testing.T, s Strategy) {
	const draws = 200_000
	singles := make([]int, 10)
	for range draws {
		off := s.Start(cidrset.CountOf(10))
		if off.Hi != 0 || off.Lo >= 10 {
			t.Fatalf("Start(10) = %v", off)
		}
		singles[off.Lo]++
	}
	if x := chiSquare(singles, draws); x > 80 {
		t.Fatalf("offsets of a band of 10: chi-square %.1f over 9 degrees of freedom; counts %v", x, singles)
	}
	pairs := make([]int, 64)
	for range draws {
		first, second := s.Start(cidrset.CountOf(8)), s.Start(cidrset.CountOf(8))
		pairs[first.Lo*8+second.Lo]++
	}
	if x := chiSquare(pairs, draws); x > 180 {
		t.Fatalf("consecutive offsets of a band of 8: chi-square %.1f over 63 degrees of freedom", x)
	}
}

// A band whose size is just over a power of two (2^63 + 2^62 here) is
// where taking the high word of draw × n without throwing any draw back
// is most biased: every third value comes twice as often. Counting the
// offsets by their residue mod 3 sees it.
func TestRandomStartDefaultIsUniformOverAHugeBand(t *testing.T) {
	for name, s := range defaultStarts() {
		t.Run(name, func(t *testing.T) { testUniformOverAHugeBand(t, s) })
	}
}

func testUniformOverAHugeBand(t *testing.T, s Strategy) {
	n := cidrset.Count{Lo: 3 << 62}
	const draws = 120_000
	residues := make([]int, 3)
	for range draws {
		off := s.Start(n)
		if off.Hi != 0 || off.Lo >= n.Lo {
			t.Fatalf("Start(%v) = %v", n, off)
		}
		residues[off.Lo%3]++
	}
	if x := chiSquare(residues, draws); x > 60 {
		t.Fatalf("offsets mod 3 of a band of 3<<62: chi-square %.1f over 2 degrees of freedom; counts %v", x, residues)
	}
	// And past 64 bits, where the draw takes two words.
	wide := cidrset.Count{Hi: 5, Lo: 7}
	for range 1000 {
		if off := s.Start(wide); off.Cmp(wide) >= 0 {
			t.Fatalf("Start(%v) = %v", wide, off)
		}
	}
	if off := s.Start(cidrset.CountOf(1)); !off.IsZero() {
		t.Fatalf("Start(1) = %v", off)
	}
}

// Each RandomStart(nil) is seeded anew: two of them do not draw the same
// offsets (four draws out of 2^32 agreeing by chance: 2^-128).
func TestRandomStartDefaultSeedsEachStrategy(t *testing.T) {
	a, b := RandomStart(nil), RandomStart(nil)
	n := cidrset.CountOf(1 << 32)
	same := true
	for range 4 {
		if a.Start(n) != b.Start(n) {
			same = false
		}
	}
	if same {
		t.Fatal("two RandomStart(nil) drew the same four offsets")
	}
}

// One default Strategy may be shared by allocators with different locks:
// concurrent draws are safe (under -race) and stay in the band.
func TestRandomStartDefaultIsSafeForConcurrentUse(t *testing.T) {
	s := RandomStart(nil)
	var wg sync.WaitGroup
	counts := make([][]int, 4)
	for g := range counts {
		counts[g] = make([]int, 7)
		wg.Go(func() {
			for range 5000 {
				off := s.Start(cidrset.CountOf(7))
				if off.Hi != 0 || off.Lo >= 7 {
					t.Errorf("Start(7) = %v", off)
					return
				}
				counts[g][off.Lo]++
			}
		})
	}
	wg.Wait()
	for g, c := range counts {
		for off, k := range c {
			// 5000 draws over 7 offsets: about 714 each; under 400 has
			// a chance far below 1e-12.
			if k < 400 {
				t.Fatalf("goroutine %d drew offset %d %d times of 5000", g, off, k)
			}
		}
	}
}

// An allocator draws from a generator of its own, not from the shared
// one's atomic counter (an atomic add per allocation costs about as much
// as the rest of the draw), and two allocators given one RandomStart(nil)
// still draw apart.
func TestEachAllocatorOwnsItsDefaultGenerator(t *testing.T) {
	shared := RandomStart(nil)
	st := memory.New()
	a, b, c := newTestAllocator(t, st, WithStrategy(shared)), newTestAllocator(t, st, WithStrategy(shared)), newTestAllocator(t, st)
	var owned [3]*ownedStart
	for i, x := range []*Allocator{a, b, c} {
		o, ok := x.cfg.strategy.(*ownedStart)
		if !ok {
			t.Fatalf("allocator %d draws from a %T, not a generator of its own", i, x.cfg.strategy)
		}
		owned[i] = o
	}
	if owned[0] == owned[1] {
		t.Fatal("two allocators given one RandomStart(nil) share its generator")
	}
	n := cidrset.CountOf(1 << 32)
	same := true
	for range 4 {
		if owned[0].Start(n) != owned[1].Start(n) {
			same = false
		}
	}
	if same {
		t.Fatal("two allocators given one RandomStart(nil) drew the same four offsets")
	}
}
