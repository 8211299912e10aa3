// Package bitmap is a dense set of the integers [0, n): one bit each, plus a
// hierarchy of summaries in which a bit is set when the word it stands for
// is full. Finding the next clear bit from any point reads at most two words
// per level, so it costs the same at 1 % and at 99.99 % fill, and it never
// allocates. In a large bitmap a second hierarchy, in which a bit is set
// when its word is not empty, lets Runs skip empty stretches the same way.
// It is the allocator's free-space index for ranges of up to a few million
// addresses, where a bit per address is smaller than any list of runs once
// the range is partly used.
package bitmap

import (
	"iter"
	"math/bits"
)

// Bitmap is a set of the integers [0, Len()). The zero value is an empty
// set over no integers; New sizes one.
//
// Invariants: levels[0] holds one bit per integer; levels[k][i] has bit j
// set iff word 64*i+j of levels[k-1] is all ones; the last level is one
// word; bits past the end of every level are set, so a padded word reads as
// full and searches never return an integer >= n. nonEmpty is nil up to
// nonEmptyMin words; past that, nonEmpty[0][i] has bit j set iff word
// 64*i+j of levels[0] is not zero, and nonEmpty[k][i] bit j iff word
// 64*i+j of nonEmpty[k-1] is not zero; its last level is one word, and its
// bits past the end are clear.
type Bitmap struct {
	n        uint64
	count    uint64
	levels   [][]uint64
	nonEmpty [][]uint64
}

// New returns an empty set over [0, n).
func New(n uint64) *Bitmap {
	b := &Bitmap{n: n}
	size := n // bits at the current level
	for {
		words := (size + 63) / 64
		level := make([]uint64, max(words, 1))
		if rem := size % 64; rem != 0 {
			level[words-1] = ^uint64(0) << rem
		}
		if size == 0 {
			level[0] = ^uint64(0)
		}
		b.levels = append(b.levels, level)
		if words <= 1 {
			break
		}
		size = words
	}
	if len(b.levels[0]) <= nonEmptyMin {
		return b
	}
	for size := uint64(len(b.levels[0])); ; { // words below the level
		words := (size + 63) / 64
		b.nonEmpty = append(b.nonEmpty, make([]uint64, max(words, 1)))
		if words <= 1 {
			break
		}
		size = words
	}
	for wi, w := range b.levels[0] {
		if w != 0 { // a padded last word
			b.markNonEmpty(uint64(wi))
		}
	}
	return b
}

// nonEmptyMin is the most words a bitmap may have without nonEmpty: a scan
// of 16384 words (1M bits) costs microseconds, and keeping the summaries
// costs every Set into an empty word and every Clear that empties one a
// few nanoseconds.
const nonEmptyMin = 1 << 14

// markNonEmpty records that word wi of levels[0] is no longer empty. Not
// inlined: Set and Clear stay as small as they were for bitmaps without
// nonEmpty.
//
//go:noinline
func (b *Bitmap) markNonEmpty(wi uint64) {
	for _, level := range b.nonEmpty {
		w := &level[wi/64]
		was := *w
		*w |= 1 << (wi % 64)
		if was != 0 {
			return
		}
		wi /= 64
	}
}

// markEmpty records that word wi of levels[0] became empty.
//
//go:noinline
func (b *Bitmap) markEmpty(wi uint64) {
	for _, level := range b.nonEmpty {
		w := &level[wi/64]
		*w &^= 1 << (wi % 64)
		if *w != 0 {
			return
		}
		wi /= 64
	}
}

// nextWord returns the index of the first word of levels[0] at or after wi
// that is not empty, or false.
func (b *Bitmap) nextWord(wi uint64) (uint64, bool) {
	i := wi
	for k, level := range b.nonEmpty {
		if i/64 >= uint64(len(level)) {
			return 0, false
		}
		if w := level[i/64] &^ (uint64(1)<<(i%64) - 1); w != 0 {
			j := i&^63 | uint64(bits.TrailingZeros64(w))
			for k--; k >= 0; k-- {
				j = j*64 + uint64(bits.TrailingZeros64(b.nonEmpty[k][j]))
			}
			return j, true
		}
		i = i/64 + 1
	}
	return 0, false
}

// Len returns n, the number of integers the set ranges over.
func (b *Bitmap) Len() uint64 { return b.n }

// Count returns the number of integers in the set.
func (b *Bitmap) Count() uint64 { return b.count }

// Has reports whether i is in the set.
func (b *Bitmap) Has(i uint64) bool {
	return i < b.n && b.levels[0][i/64]&(1<<(i%64)) != 0
}

// Set adds i and reports whether it was absent. i must be < Len().
func (b *Bitmap) Set(i uint64) bool {
	w := &b.levels[0][i/64]
	bit := uint64(1) << (i % 64)
	if *w&bit != 0 {
		return false
	}
	if *w == 0 && b.nonEmpty != nil {
		b.markNonEmpty(i / 64)
	}
	*w |= bit
	b.count++
	// A word that became full sets its bit one level up, and so on.
	for k := 1; *w == ^uint64(0) && k < len(b.levels); k++ {
		i /= 64
		w = &b.levels[k][i/64]
		*w |= 1 << (i % 64)
	}
	return true
}

// Clear removes i and reports whether it was present. i must be < Len().
func (b *Bitmap) Clear(i uint64) bool {
	w := &b.levels[0][i/64]
	bit := uint64(1) << (i % 64)
	if *w&bit == 0 {
		return false
	}
	wasFull := *w == ^uint64(0)
	*w &^= bit
	b.count--
	if *w == 0 && b.nonEmpty != nil {
		b.markEmpty(i / 64)
	}
	// A word that stops being full clears its bit one level up, and so on.
	for k := 1; wasFull && k < len(b.levels); k++ {
		i /= 64
		w = &b.levels[k][i/64]
		wasFull = *w == ^uint64(0)
		*w &^= 1 << (i % 64)
	}
	return true
}

// NextClear returns the smallest integer of [from, to] not in the set.
func (b *Bitmap) NextClear(from, to uint64) (uint64, bool) {
	if to >= b.n {
		to = b.n - 1
	}
	if from > to || b.n == 0 {
		return 0, false
	}
	i := from
	for k, level := range b.levels {
		if i/64 >= uint64(len(level)) {
			return 0, false
		}
		// Bits below i count as set: only i and after are candidates.
		w := level[i/64] | (uint64(1)<<(i%64) - 1)
		if w != ^uint64(0) {
			j := i&^63 | uint64(bits.TrailingZeros64(^w))
			// Each summary bit found clear names a word below that is
			// not full; every such word lies after from's.
			for k--; k >= 0; k-- {
				j = j*64 + uint64(bits.TrailingZeros64(^b.levels[k][j]))
			}
			if j > to {
				return 0, false
			}
			return j, true
		}
		// This word is full from i on: go on at the next word, found
		// through the level above.
		i = i/64 + 1
	}
	return 0, false
}

// CountRange returns the number of integers of [lo, hi] in the set.
func (b *Bitmap) CountRange(lo, hi uint64) uint64 {
	if hi >= b.n {
		hi = b.n - 1
	}
	if b.n == 0 || lo > hi {
		return 0
	}
	if lo == 0 && hi == b.n-1 {
		return b.count
	}
	words := b.levels[0]
	first, last := lo/64, hi/64
	loMask := ^uint64(0) << (lo % 64)
	hiMask := ^uint64(0) >> (63 - hi%64)
	if first == last {
		return uint64(bits.OnesCount64(words[first] & loMask & hiMask))
	}
	n := bits.OnesCount64(words[first]&loMask) + bits.OnesCount64(words[last]&hiMask)
	for _, w := range words[first+1 : last] {
		n += bits.OnesCount64(w)
	}
	return uint64(n)
}

// Runs yields the maximal runs [start, end] of integers in the set that
// lie within [lo, hi], in order. Past nonEmptyMin words it reads only the
// words that hold set bits, skipping empty stretches through the nonEmpty
// summaries, so a large sparse set is read in O(runs × levels), not
// O(words).
func (b *Bitmap) Runs(lo, hi uint64) iter.Seq2[uint64, uint64] {
	return func(yield func(uint64, uint64) bool) {
		if hi >= b.n {
			hi = b.n - 1
		}
		if b.n == 0 || lo > hi {
			return
		}
		words := b.levels[0]
		inRun := false
		var start uint64
		for wi := lo / 64; wi <= hi/64; wi++ {
			w := words[wi]
			if wi == lo/64 {
				w &= ^uint64(0) << (lo % 64)
			}
			if wi == hi/64 {
				w &= ^uint64(0) >> (63 - hi%64)
			}
			base := wi * 64
			if !inRun && w == 0 {
				if b.nonEmpty == nil {
					continue
				}
				// Skip to the next word that is not empty.
				next, ok := b.nextWord(wi + 1)
				if !ok || next > hi/64 {
					return
				}
				wi = next - 1
				continue
			}
			for pos := uint64(0); pos < 64; {
				if inRun {
					// The run goes on while bits are set.
					ones := uint64(bits.TrailingZeros64(^(w >> pos)))
					if pos+ones < 64 {
						if !yield(start, base+pos+ones-1) {
							return
						}
						inRun = false
					}
					pos += ones
				} else {
					if w>>pos == 0 {
						break
					}
					pos += uint64(bits.TrailingZeros64(w >> pos))
					start, inRun = base+pos, true
				}
			}
		}
		if inRun {
			yield(start, hi)
		}
	}
}
