package bitmap

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// model is the obvious set: one bool per integer.
type model []bool

func (m model) nextClear(from, to uint64) (uint64, bool) {
	for i := from; i <= to && i < uint64(len(m)); i++ {
		if !m[i] {
			return i, true
		}
	}
	return 0, false
}

func (m model) runs(lo, hi uint64) [][2]uint64 {
	var out [][2]uint64
	for i := lo; i <= hi && i < uint64(len(m)); i++ {
		if !m[i] {
			continue
		}
		if n := len(out); n > 0 && out[n-1][1] == i-1 {
			out[n-1][1] = i
		} else {
			out = append(out, [2]uint64{i, i})
		}
	}
	return out
}

// checkNonEmpty compares every nonEmpty level with the level it sums up.
func (b *Bitmap) checkNonEmpty() error {
	if len(b.levels[0]) <= nonEmptyMin {
		if b.nonEmpty != nil {
			return fmt.Errorf("nonEmpty kept for %d words", len(b.levels[0]))
		}
		return nil
	}
	below := b.levels[0]
	for k, level := range b.nonEmpty {
		want := make([]uint64, max((len(below)+63)/64, 1))
		for i, w := range below {
			if w != 0 {
				want[i/64] |= 1 << (i % 64)
			}
		}
		if len(level) != len(want) {
			return fmt.Errorf("nonEmpty[%d] has %d words, want %d", k, len(level), len(want))
		}
		for i := range want {
			if level[i] != want[i] {
				return fmt.Errorf("nonEmpty[%d][%d] = %x, want %x", k, i, level[i], want[i])
			}
		}
		below = level
	}
	if len(below) != 1 {
		return fmt.Errorf("the last nonEmpty level has %d words", len(below))
	}
	return nil
}

func collectRuns(b *Bitmap, lo, hi uint64) [][2]uint64 {
	var out [][2]uint64
	for s, e := range b.Runs(lo, hi) {
		out = append(out, [2]uint64{s, e})
	}
	return out
}

// Sizes around word and summary boundaries, where padding matters.
var sizes = []uint64{0, 1, 63, 64, 65, 127, 4095, 4096, 4097, 64*64*64 + 1}

func TestBitmapFollowsAModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.SampledFrom(sizes).Draw(rt, "n")
		b, m := New(n), make(model, n)
		index := func(name string) uint64 {
			// Mostly near the ends and boundaries, where bugs live.
			return rapid.OneOf(
				rapid.Uint64Range(0, n+2),
				rapid.SampledFrom([]uint64{0, 62, 63, 64, 65, 4095, 4096, 4097, n - 1, n}),
			).Draw(rt, name)
		}
		// A dense start makes full words and full summaries common.
		if n > 0 && rapid.Bool().Draw(rt, "dense") {
			for i := range n {
				if i%997 != 5 {
					b.Set(i)
					m[i] = true
				}
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"set": func(rt *rapid.T) {
				i := index("i")
				if i >= n {
					rt.Skip("out of range")
				}
				if got, want := b.Set(i), !m[i]; got != want {
					rt.Fatalf("Set(%d) = %v, want %v", i, got, want)
				}
				m[i] = true
			},
			"clear": func(rt *rapid.T) {
				i := index("i")
				if i >= n {
					rt.Skip("out of range")
				}
				if got, want := b.Clear(i), m[i]; got != want {
					rt.Fatalf("Clear(%d) = %v, want %v", i, got, want)
				}
				m[i] = false
			},
			"nextClear": func(rt *rapid.T) {
				from, to := index("from"), index("to")
				got, ok := b.NextClear(from, to)
				want, wok := m.nextClear(from, to)
				if got != want || ok != wok {
					rt.Fatalf("NextClear(%d, %d) = %d, %v; want %d, %v", from, to, got, ok, want, wok)
				}
			},
			"countRange": func(rt *rapid.T) {
				lo, hi := index("lo"), index("hi")
				var want uint64
				for i := lo; i <= hi && i < n; i++ {
					if m[i] {
						want++
					}
				}
				if got := b.CountRange(lo, hi); got != want {
					rt.Fatalf("CountRange(%d, %d) = %d, want %d", lo, hi, got, want)
				}
			},
			"runs": func(rt *rapid.T) {
				lo, hi := index("lo"), index("hi")
				if got, want := collectRuns(b, lo, hi), m.runs(lo, hi); !slices.Equal(got, want) {
					rt.Fatalf("Runs(%d, %d) = %v, want %v", lo, hi, got, want)
				}
			},
			"": func(rt *rapid.T) {
				var want uint64
				for i, v := range m {
					if v {
						want++
					}
					if b.Has(uint64(i)) != v {
						rt.Fatalf("Has(%d) = %v, want %v", i, !v, v)
					}
				}
				if b.Count() != want || b.Len() != n {
					rt.Fatalf("Count, Len = %d, %d; want %d, %d", b.Count(), b.Len(), want, n)
				}
				if err := b.checkNonEmpty(); err != nil {
					rt.Fatal(err)
				}
			},
		})
	})
}

// TestLargeSparseRunsFollowAModel: past nonEmptyMin words, Runs skips
// empty stretches through the nonEmpty summaries. A few bits set and
// cleared around word and summary boundaries far apart must read back as
// a plain map says, and the summaries must match the words after every
// change.
func TestLargeSparseRunsFollowAModel(t *testing.T) {
	const n = 64*nonEmptyMin + 64*64*64 + 17 // three summary levels, a partial last word
	var anchors []uint64
	for _, a := range []uint64{0, 64, 64 * 64, 64 * 64 * 64, 64 * nonEmptyMin, 64*nonEmptyMin + 4096, n - 70} {
		anchors = append(anchors, a, a+1, a+63)
	}
	anchors = append(anchors, n-1)
	rapid.Check(t, func(rt *rapid.T) {
		b, m := New(n), map[uint64]bool{}
		at := rapid.SampledFrom(anchors)
		rt.Repeat(map[string]func(*rapid.T){
			"set": func(rt *rapid.T) {
				i := at.Draw(rt, "i")
				if b.Set(i) == m[i] {
					rt.Fatalf("Set(%d) disagrees", i)
				}
				m[i] = true
			},
			"clear": func(rt *rapid.T) {
				i := at.Draw(rt, "i")
				if b.Clear(i) != m[i] {
					rt.Fatalf("Clear(%d) disagrees", i)
				}
				delete(m, i)
			},
			"runs": func(rt *rapid.T) {
				lo, hi := at.Draw(rt, "lo"), at.Draw(rt, "hi")
				var want [][2]uint64
				for _, i := range slices.Sorted(maps.Keys(m)) {
					if i < lo || i > hi {
						continue
					}
					if k := len(want); k > 0 && want[k-1][1] == i-1 {
						want[k-1][1] = i
					} else {
						want = append(want, [2]uint64{i, i})
					}
				}
				if got := collectRuns(b, lo, hi); !slices.Equal(got, want) {
					rt.Fatalf("Runs(%d, %d) = %v, want %v", lo, hi, got, want)
				}
			},
			"": func(rt *rapid.T) {
				if err := b.checkNonEmpty(); err != nil {
					rt.Fatal(err)
				}
			},
		})
	})
}

// Filling every integer one by one leaves no clear bit; freeing any one
// makes it the only answer, from anywhere before it.
func TestBitmapFullThenOneFree(t *testing.T) {
	const n = 64*64*64*2 + 7 // four levels, a partial last word
	b := New(n)
	for i := range uint64(n) {
		if x, ok := b.NextClear(0, n-1); !ok || x != i {
			t.Fatalf("filling in order: NextClear = %d, %v; want %d", x, ok, i)
		}
		b.Set(i)
	}
	if x, ok := b.NextClear(0, n-1); ok {
		t.Fatalf("full: NextClear = %d", x)
	}
	for _, i := range []uint64{0, 63, 64, 4095, 4096, 262143, 262144, n - 1} {
		b.Clear(i)
		if x, ok := b.NextClear(0, n-1); !ok || x != i {
			t.Fatalf("only %d free: NextClear = %d, %v", i, x, ok)
		}
		if _, ok := b.NextClear(i+1, n-1); ok {
			t.Fatalf("only %d free: found one after it", i)
		}
		b.Set(i)
	}
}

func TestZeroBitmapIsEmpty(t *testing.T) {
	var b Bitmap
	if _, ok := b.NextClear(0, 10); ok || b.Has(0) || b.CountRange(0, 10) != 0 || b.Len() != 0 {
		t.Fatal("the zero Bitmap is not an empty set over nothing")
	}
	for range b.Runs(0, 10) {
		t.Fatal("the zero Bitmap has runs")
	}
}

func BenchmarkNextClearSetClear(b *testing.B) {
	for _, fill := range []float64{0, 0.5, 0.9999} {
		b.Run(fmt.Sprintf("fill=%g", fill), func(b *testing.B) {
			const n = 1 << 20
			bm := New(n)
			step := 1.0 / (1 - fill + 1e-9)
			free := 0.0
			for i := range uint64(n) {
				if float64(i) < free {
					bm.Set(i)
				} else {
					free += step
				}
			}
			x := uint64(12345)
			for b.Loop() {
				x = x*6364136223846793005 + 1442695040888963407
				y, ok := bm.NextClear(x%n, n-1)
				if !ok {
					y, _ = bm.NextClear(0, n-1)
				}
				bm.Set(y)
				bm.Clear(y)
			}
		})
	}
}
