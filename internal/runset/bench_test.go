package runset

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/netipam/netipam/internal/u128"
)

const million = 1_000_000

// scattered returns n sorted distinct random values of a /64-sized space,
// almost never adjacent, so that each one is a run of its own.
func scattered(n int, seed uint64) []u128.U128 {
	r := rand.New(rand.NewPCG(seed, 1))
	seen := make(map[uint64]bool, n)
	out := make([]u128.U128, 0, n)
	for len(out) < n {
		x := r.Uint64()
		if !seen[x] {
			seen[x] = true
			out = append(out, u128.U128{Hi: 0x20010db800000000, Lo: x})
		}
	}
	slices.SortFunc(out, u128.U128.Cmp)
	return out
}

// randoms returns a ring of random probe values, drawn before the timer
// starts so that the loop measures the set only.
func randoms(n int, f func(r *rand.Rand) u128.U128) []u128.U128 {
	r := rand.New(rand.NewPCG(7, 8))
	out := make([]u128.U128, n)
	for i := range out {
		out[i] = f(r)
	}
	return out
}

// BenchmarkAddRemove adds then removes a random value in a set of 1M
// scattered runs (a new run each time, so both operations restructure).
func BenchmarkAddRemove(b *testing.B) {
	var s Set
	if err := s.Reset(scattered(million, 1)); err != nil {
		b.Fatal(err)
	}
	xs := randoms(1<<16, func(r *rand.Rand) u128.U128 { return u128.U128{Hi: 0x20010db800000000, Lo: r.Uint64()} })
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		x := xs[i&(len(xs)-1)]
		added := s.Add(x)
		if added {
			s.Remove(x)
		}
	}
}

// BenchmarkAddRemoveFirst is what a Sequential allocator does in a huge,
// sparse range: find the lowest free value, below every run of 1M
// scattered ones, add it as the set's new first run, remove it again.
func BenchmarkAddRemoveFirst(b *testing.B) {
	var s Set
	vals := scattered(million, 1)
	if err := s.Reset(vals); err != nil {
		b.Fatal(err)
	}
	from := u128.U128{Hi: vals[0].Hi}
	growStack(32)
	b.ReportAllocs()
	for b.Loop() {
		x, ok := s.NextFree(from, u128.Max())
		if !ok || !s.Add(x) || !s.Remove(x) {
			b.Fatal("lowest free value not added and removed")
		}
	}
}

// BenchmarkContains probes random values in a set of 1M scattered runs.
func BenchmarkContains(b *testing.B) {
	var s Set
	vals := scattered(million, 1)
	if err := s.Reset(vals); err != nil {
		b.Fatal(err)
	}
	xs := randoms(1<<16, func(r *rand.Rand) u128.U128 { return vals[r.IntN(len(vals))] })
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if !s.Contains(xs[i&(len(xs)-1)]) {
			b.Fatal("missing")
		}
	}
}

// BenchmarkNextFreeFull looks for a free value from a random point of a
// 1M-value range that is 99.99% used: one run broken by 100 holes.
func BenchmarkNextFreeFull(b *testing.B) {
	var s Set
	s.AddRange(u128.From64(0), u128.From64(million-1))
	r := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		s.Remove(u128.From64(r.Uint64N(million)))
	}
	xs := randoms(1<<16, func(r *rand.Rand) u128.U128 { return u128.From64(r.Uint64N(million)) })
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, ok := s.NextFree(xs[i&(len(xs)-1)], u128.Max()); !ok {
			b.Fatal("full")
		}
	}
}

// BenchmarkReset1M is the allocator's cold start over 1M stored addresses,
// scattered (1M runs, the worst case) or contiguous (one run).
func BenchmarkReset1M(b *testing.B) {
	contiguous := make([]u128.U128, million)
	for i := range contiguous {
		contiguous[i] = u128.From64(uint64(i))
	}
	for _, bc := range []struct {
		name string
		vals []u128.U128
	}{{"scattered", scattered(million, 2)}, {"contiguous", contiguous}} {
		b.Run(bc.name, func(b *testing.B) {
			if b.N > 1000 {
				// A fixed -benchtime such as 200000x, meant for the
				// per-value benchmarks, would take hours here.
				b.Skipf("%d resets of 1M values is too many; use e.g. -benchtime 20x", b.N)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				var s Set
				if err := s.Reset(bc.vals); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHeapPerRun reports the heap the index takes per run for 1M
// scattered values of one /64 (each a run of its own, the allocator's worst
// case in a huge IPv6 range), built by Add in random order or by Reset.
func BenchmarkHeapPerRun(b *testing.B) {
	sorted := scattered(million, 5)
	shuffled := slices.Clone(sorted)
	rand.New(rand.NewPCG(5, 6)).Shuffle(len(shuffled), func(i, j int) {
		shuffled[i], shuffled[j] = shuffled[j], shuffled[i]
	})
	for _, bc := range []struct {
		name  string
		build func(s *Set)
	}{
		{"Add", func(s *Set) {
			for _, x := range shuffled {
				s.Add(x)
			}
		}},
		{"Reset", func(s *Set) {
			if err := s.Reset(sorted); err != nil {
				b.Fatal(err)
			}
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var total uint64
			for range b.N {
				var before, after runtime.MemStats
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.StartTimer()
				s := new(Set)
				bc.build(s)
				b.StopTimer()
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.StartTimer()
				if s.Runs() != million {
					b.Fatalf("%d runs", s.Runs())
				}
				total += after.HeapAlloc - before.HeapAlloc
				runtime.KeepAlive(s)
			}
			b.ReportMetric(float64(total)/float64(b.N)/million, "B/run")
		})
	}
}

// scatteredSorted is scattered without the map, so that 10M values build in
// seconds: random values sorted, duplicates dropped (so it may return a few
// fewer than n; a /64 makes that rare).
func scatteredSorted(n int, seed uint64) []u128.U128 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]u128.U128, n)
	for i := range out {
		out[i] = u128.U128{Hi: 0x20010db800000000, Lo: r.Uint64()}
	}
	slices.SortFunc(out, u128.U128.Cmp)
	return slices.Compact(out)
}

// BenchmarkNextFreeAddRemove is the allocator's cycle in a huge, sparse
// /64: the first free value from a random point, added, then removed, over
// an empty set (a fresh pool: the root leaf alone) or 1k, 1M or 10M
// scattered runs.
func BenchmarkNextFreeAddRemove(b *testing.B) {
	for _, bc := range []struct {
		name string
		runs int
	}{{"runs=0", 0}, {"runs=1k", 1000}, {"runs=1M", million}, {"runs=10M", 10 * million}} {
		b.Run(bc.name, func(b *testing.B) {
			var s Set
			if err := s.Reset(scatteredSorted(bc.runs, 9)); err != nil {
				b.Fatal(err)
			}
			end := u128.U128{Hi: 0x20010db800000000, Lo: ^uint64(0)}
			xs := randoms(1<<16, func(r *rand.Rand) u128.U128 { return u128.U128{Hi: end.Hi, Lo: r.Uint64()} })
			growStack(32)
			b.ReportAllocs()
			b.ResetTimer()
			nextFreeAddRemove(b, &s, xs, end)
		})
	}
}

// nextFreeAddRemove is the loop of BenchmarkNextFreeAddRemove, apart so that
// callgrind can count inside it alone (--toggle-collect), which needs a
// function of its own, not one inlined into the benchmark.
//
//go:noinline
func nextFreeAddRemove(b *testing.B, s *Set, xs []u128.U128, end u128.U128) {
	for i := range b.N {
		v, ok := s.NextFree(xs[i&(len(xs)-1)], end)
		if !ok || !s.Add(v) || !s.Remove(v) {
			b.Fatal("free value not added and removed")
		}
	}
}

// growStack grows the goroutine's stack by about n KiB before the loop, so
// that the runtime does not move it inside the loop: callgrind, which
// tracks calls by the stack pointer, would lose the frame of the function
// it counts in (--toggle-collect) and stop counting.
//
//go:noinline
func growStack(n int) byte {
	var pad [1024]byte
	pad[n%len(pad)] = byte(n)
	if n == 0 {
		return pad[0]
	}
	return growStack(n-1) + pad[n%len(pad)]
}
