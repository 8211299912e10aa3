package bench

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"unsafe"

	"github.com/netipam/netipam/internal/prefetch"
)

// BenchmarkCalibrate measures what this machine charges for the steps an
// allocation is made of, to read the other results against: an
// uncontended mutex lock and unlock, the harness's own choice of the next
// owner (part of every measured operation but the bitmap's), a Go map
// insert and delete, and a
// load from a random line of an array of a given size, which the next
// load depends on (a cache hit, a miss, and a TLB miss beyond a few MiB).
func BenchmarkCalibrate(b *testing.B) {
	b.Run("op=lock-unlock", func(b *testing.B) {
		var mu sync.Mutex
		for b.Loop() {
			mu.Lock()
			//lint:ignore SA2001 the lock and unlock are what is measured
			mu.Unlock()
		}
	})
	b.Run("op=owner-ring", func(b *testing.B) {
		var r ownerRing
		n := 0
		for b.Loop() {
			n += len(r.next().Name)
		}
		if n < 0 {
			b.Fatal("unreachable: keeps the owners alive")
		}
	})
	b.Run("op=map-insert-delete", func(b *testing.B) {
		// A map of a /16's size, with the key one allocation would add.
		m := make(map[netip.Addr]uint32, 1<<16)
		for i := range 1 << 16 {
			m[netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})] = uint32(i)
		}
		k := netip.AddrFrom4([4]byte{10, 0, 0, 1})
		for b.Loop() {
			m[k] = 1
			delete(m, k)
		}
	})
	sizes := []int{16 << 10, 1 << 20, 4 << 20, 16 << 20, 256 << 20}
	if full {
		sizes = append(sizes, 1<<30)
	}
	randomLoad := func(b *testing.B, size int, huge bool) {
		next, free := randomCycle(size, huge)
		defer free()
		p := 0
		for b.Loop() {
			p = next[p]
		}
		if p < 0 {
			b.Fatal("unreachable: keeps the loads alive")
		}
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("op=random-load/bytes=%s", fmtBytes(size)), func(b *testing.B) { randomLoad(b, size, false) })
		// The same on huge pages, past what the TLB covers: what is left
		// of a miss once the page walk is gone.
		if hugePagesAdvisable && size >= 16<<20 {
			b.Run(fmt.Sprintf("op=random-load/bytes=%s/pages=huge", fmtBytes(size)), func(b *testing.B) { randomLoad(b, size, true) })
		}
	}
	// What a prefetch hides: a step of dependent work (a little longer
	// than an allocation and release) that needs one random line,
	// prefetched ahead steps before (0: not prefetched), as the
	// allocator's drawn-ahead starts load theirs. Less the work alone,
	// what is left is what the line still costs though asked for in time.
	b.Run("op=work", func(b *testing.B) {
		x := uint64(1)
		for b.Loop() {
			x = chain(x, stepWork)
		}
		runtime.KeepAlive(x)
	})
	for _, size := range []int{16 << 20, sizes[len(sizes)-1]} {
		for _, ahead := range []int{0, 1, 4, 16} {
			b.Run(fmt.Sprintf("op=work-prefetched-load/bytes=%s/ahead=%d", fmtBytes(size), ahead), func(b *testing.B) {
				prefetchedLoad(b, size, ahead)
			})
		}
	}
	// Two random lines a step, both prefetched 4 steps ahead: one prefetch
	// right after the other (together), or one before each half of the
	// work (apart). Where a prefetch waits for its page walk, together
	// overlaps the two walks and apart does not.
	for _, together := range []bool{true, false} {
		size := sizes[len(sizes)-1]
		b.Run(fmt.Sprintf("op=work-prefetched-pair/bytes=%s/together=%t", fmtBytes(size), together), func(b *testing.B) {
			prefetchedPair(b, size, together)
		})
	}
	// One random line a step, prefetched in batches: once a batch, the
	// lines of the next batch, back to back. Where a prefetch waits for
	// its page walk and walks overlap, a batch of k costs less than k
	// walks. Then batches of 4 with gap multiplications (1.1 ns each
	// here) between the prefetches: how close together they must be
	// issued to overlap.
	size := sizes[len(sizes)-1]
	for _, batch := range []int{1, 2, 4, 8} {
		b.Run(fmt.Sprintf("op=work-prefetched-batch/bytes=%s/batch=%d", fmtBytes(size), batch), func(b *testing.B) {
			prefetchedBatch(b, size, batch, 0)
		})
	}
	for _, gap := range []int{10, 40, 100} {
		b.Run(fmt.Sprintf("op=work-prefetched-batch/bytes=%s/batch=4/gap=%d", fmtBytes(size), gap), func(b *testing.B) {
			prefetchedBatch(b, size, 4, gap)
		})
	}
}

// prefetchedBatch runs steps of work (a chain of stepWork) over a word
// at a random line of an array of size bytes; once every batch steps,
// the lines of the next batch are prefetched one after the other, with
// a chain of gap between two prefetches.
func prefetchedBatch(b *testing.B, size, batch, gap int) {
	words, ring := randomLines(size)
	mask := len(ring) - 1
	x, i := uint64(1), 0
	for b.Loop() {
		if i%batch == 0 {
			for j := range batch {
				prefetch.Line(unsafe.Pointer(&words[ring[(i+batch+j)&mask]]))
				if gap > 0 {
					x = chain(x, gap)
				}
			}
		}
		x = chain(x+uint64(words[ring[i&mask]]), stepWork)
		i++
	}
	runtime.KeepAlive(x)
}

// randomLines returns an array of size bytes, every page touched, and
// 2^16 indexes of words at random lines of it, drawn in advance so that
// no generator runs in a measured loop.
func randomLines(size int) (words []int, ring []uint32) {
	words = make([]int, size/8)
	for i := range words {
		words[i] = i & 1 // every page touched: no first-touch faults in the loop
	}
	ring = make([]uint32, 1<<16)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range ring {
		ring[i] = uint32(r.IntN(len(words)/8) * 8)
	}
	return words, ring
}

// stepWork is the length of a step's chain of multiplications: about
// 300 ns on the Zen 5 VM.
const stepWork = 256

// chain is n multiplications, each waiting for the one before (about
// 1.1 ns each on the Zen 5 VM), and no memory access.
//
//go:noinline
func chain(x uint64, n int) uint64 {
	for range n {
		x = x*0x9e3779b97f4a7c15 + 1
	}
	return x
}

// prefetchedLoad runs steps of work (a chain of stepWork) over a word
// at a random line of an array of size bytes, that line prefetched ahead
// steps before.
func prefetchedLoad(b *testing.B, size, ahead int) {
	words, ring := randomLines(size)
	mask := len(ring) - 1
	x, i := uint64(1), 0
	for b.Loop() {
		if ahead > 0 {
			prefetch.Line(unsafe.Pointer(&words[ring[(i+ahead)&mask]]))
		}
		x = chain(x+uint64(words[ring[i&mask]]), stepWork)
		i++
	}
	runtime.KeepAlive(x) // the loads and the work are what is measured
}

// prefetchedPair runs steps of work (a chain of stepWork, in two
// halves) over two words at random lines of an array of size bytes, both
// prefetched 4 steps before: one after the other, or each before its
// half.
func prefetchedPair(b *testing.B, size int, together bool) {
	const ahead = 4
	words, ring := randomLines(size)
	mask := len(ring) - 1
	x, i := uint64(1), 0
	for b.Loop() {
		next, now := 2*(i+ahead), 2*i
		prefetch.Line(unsafe.Pointer(&words[ring[next&mask]]))
		if together {
			prefetch.Line(unsafe.Pointer(&words[ring[(next+1)&mask]]))
		}
		x = chain(x+uint64(words[ring[now&mask]]), stepWork/2)
		if !together {
			prefetch.Line(unsafe.Pointer(&words[ring[(next+1)&mask]]))
		}
		x = chain(x+uint64(words[ring[(now+1)&mask]]), stepWork/2)
		i++
	}
	runtime.KeepAlive(x)
}

// randomCycle returns an array of size bytes in which, from index 0, each
// element names the next one to read: one per 64-byte line, every line
// once, in random order; and a function to call when done with it. With
// huge, the array is on memory advised to use huge pages.
func randomCycle(size int, huge bool) ([]int, func()) {
	const perLine = 64 / 8
	lines := size / 64
	var next []int
	free := func() {}
	if huge {
		next, free = hugeInts(lines * perLine)
	} else {
		next = make([]int, lines*perLine)
	}
	order := rand.New(rand.NewPCG(1, 2)).Perm(lines)
	for i, line := range order {
		next[line*perLine] = order[(i+1)%lines] * perLine
	}
	return next, free
}

// fmtBytes prints a power-of-two size as 16KiB, 4MiB, 1GiB.
func fmtBytes(n int) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}
