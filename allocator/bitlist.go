package allocator

import "math/bits"

// bitList is a list of bits that can grow or shrink at any place, by a
// shift of the words above it. It marks the pools of live that are open
// (not known full), so that a walk over live skips full pools 64 at a
// time and a CIDR change moves the marks with the pools. The zero value
// is empty.
type bitList struct {
	w []uint64
	n int // bits in use; those of w beyond n are zero
}

func (b *bitList) set(i int, v bool) {
	if v {
		b.w[i/64] |= 1 << (i % 64)
	} else {
		b.w[i/64] &^= 1 << (i % 64)
	}
}

// has reports whether bit i is set.
func (b *bitList) has(i int) bool {
	return i < b.n && b.w[i/64]&(1<<(i%64)) != 0
}

// insert puts a bit v at i (0 <= i <= len), after shifting bit i and the
// ones above it up by one.
func (b *bitList) insert(i int, v bool) {
	b.n++
	if len(b.w) < (b.n+63)/64 {
		b.w = append(b.w, 0)
	}
	wi := i / 64
	for k := len(b.w) - 1; k > wi; k-- {
		b.w[k] = b.w[k]<<1 | b.w[k-1]>>63
	}
	below := uint64(1)<<(i%64) - 1
	b.w[wi] = b.w[wi]&below | (b.w[wi]&^below)<<1
	b.set(i, v)
}

// remove takes out bit i (0 <= i < len), shifting the ones above it down.
func (b *bitList) remove(i int) {
	wi := i / 64
	below := uint64(1)<<(i%64) - 1
	b.w[wi] = b.w[wi]&below | (b.w[wi]>>1)&^below
	for k := wi; k+1 < len(b.w); k++ {
		b.w[k] |= b.w[k+1] << 63
		b.w[k+1] >>= 1
	}
	b.n--
	b.w = b.w[:(b.n+63)/64]
}

// reset makes the list n zero bits.
func (b *bitList) reset(n int) {
	b.w = append(b.w[:0], make([]uint64, (n+63)/64)...)
	b.n = n
}

// next returns the first set bit at or after i, or -1.
func (b *bitList) next(i int) int {
	if i >= b.n {
		return -1
	}
	wi := i / 64
	w := b.w[wi] &^ (1<<(i%64) - 1)
	for {
		if w != 0 {
			return wi*64 + bits.TrailingZeros64(w)
		}
		if wi++; wi == len(b.w) {
			return -1
		}
		w = b.w[wi]
	}
}

// any reports whether a bit is set.
func (b *bitList) any() bool {
	for _, w := range b.w {
		if w != 0 {
			return true
		}
	}
	return false
}

// count returns the number of set bits.
func (b *bitList) count() int {
	n := 0
	for _, w := range b.w {
		n += bits.OnesCount64(w)
	}
	return n
}

// nth returns the place of set bit k (0 <= k < count), counted from 0.
func (b *bitList) nth(k int) int {
	for wi, w := range b.w {
		if c := bits.OnesCount64(w); k >= c {
			k -= c
			continue
		}
		for ; k > 0; k-- {
			w &= w - 1 // clear the lowest set bit
		}
		return wi*64 + bits.TrailingZeros64(w)
	}
	return -1
}
