package sparse

import (
	"unsafe"

	"github.com/netipam/netipam/internal/prefetch"
)

// free marks an empty slot. It is above every key a table holds, so a
// scan for a key stops at the first slot holding that key, a greater one,
// or nothing, with one comparison.
const free = ^uint64(0)

const (
	// minBits is the log2 of the homes of the smallest table: 64 slots, so
	// that a zone holding a few addresses costs half a kilobyte.
	minBits = 6
	// probeMax is how far past its home a key may sit, and so how many
	// slots a lookup reads at most (with uniform keys at the load tables
	// keep, a key is a slot or two past its home: probeMax is only met
	// by keys that crowd, and those are refused).
	probeMax = 64
)

// table is a set of offsets below 2^span, sorted in an array with gaps:
// an ordered hash table whose hash is the key's top bits. The home of key
// k is k >> (span - bits), so homes rise with keys; every key sits at its
// home or at most probeMax slots after it, every slot from a key's home
// to the key is taken, and taken slots hold ascending keys. A lookup
// reads from the home to the first slot not below the key: one line,
// mostly. Keys that are spread evenly over the span, as randomly chosen
// addresses are, land like hashed ones, one or two slots from home; keys
// that crowd into a few homes would need longer moves, and insert refuses
// them, so that no operation reads or moves more than about probeMax
// slots. The zero value holds nothing and refuses every key: init it.
type table struct {
	slots []uint64 // 1<<bits homes, then probeMax+1 slots of overflow (the last always free)
	bits  uint8    // log2 of the number of homes; at most span
	span  uint8    // keys are below 2^span; at most 64
	n     int
	reach int // probeMax, or a smaller one in tests

	shrinkAt int // remove tries a smaller table when n falls below it

	// spilled holds the keys a resize refused, which are no longer in t:
	// the caller keeps them elsewhere and empties it.
	spilled []uint64
}

// init empties t for keys below 2^span, with keys at most probeLimit
// slots from home.
func (t *table) init(span uint8, probeLimit int) {
	*t = table{span: span, reach: probeLimit}
}

// home returns the home slot of k.
func (t *table) home(k uint64) int {
	return int(k >> (t.span - t.bits))
}

// find returns the first slot at or after i, and at or after k's home,
// that holds k or more (or nothing), and whether it holds k.
func (t *table) find(i int, k uint64) (int, bool) {
	i = max(i, t.home(k))
	for t.slots[i] < k {
		i++
	}
	return i, t.slots[i] == k
}

// has reports whether k is in t.
func (t *table) has(k uint64) bool {
	if t.n == 0 || k >= t.limit() {
		return false
	}
	_, ok := t.find(0, k)
	return ok
}

// around reports which of k-1, k and k+1 are in t (k-1 for k > 0, k+1
// below 2^span), in one scan: the three sit in one stretch of slots.
func (t *table) around(k uint64) (below, at, above bool) {
	if t.n == 0 || k >= t.limit() {
		return
	}
	i := 0
	if k > 0 {
		i, below = t.find(0, k-1)
	}
	i, at = t.find(i, k)
	if k+1 < t.limit() {
		_, above = t.find(i, k+1)
	}
	return
}

// limit returns the first key t cannot hold: 2^span, or 2^64-1 for a
// span of 64 (free, which marks empty slots, is never a key).
func (t *table) limit() uint64 {
	if t.span == 64 {
		return free
	}
	return 1 << t.span
}

// prefetchKey starts loading the line a lookup of k reads first.
func (t *table) prefetchKey(k uint64) {
	if t.n != 0 && k < t.limit() {
		prefetch.Line(unsafe.Pointer(&t.slots[t.home(k)]))
	}
}

// insert adds k, reporting whether it is in t afterwards: false if k is
// refused (it is past limit, or it or a key it would move would land
// more than reach slots from home). Growing the table may refuse keys
// already in it: they go to spilled.
func (t *table) insert(k uint64) bool {
	if k == free || k >= t.limit() {
		return false
	}
	if t.slots == nil {
		t.resize(min(minBits, t.span))
	} else if t.n >= 3<<t.bits/4 && t.bits < t.span {
		t.resize(t.bits + 1)
	}
	h := t.home(k)
	i, ok := t.find(h, k)
	if ok {
		return true
	}
	if i-h > t.reach {
		return false
	}
	if t.slots[i] == free && i < len(t.slots)-1 { // mostly: nothing moves
		t.slots[i] = k
		t.n++
		return true
	}
	// The keys from i to the first free slot move up one; each must stay
	// within reach of their homes, and the last slot stays free.
	j := i
	for ; t.slots[j] != free; j++ {
		if j+1-t.home(t.slots[j]) > t.reach {
			return false
		}
	}
	if j == len(t.slots)-1 {
		return false
	}
	copy(t.slots[i+1:j+1], t.slots[i:j])
	t.slots[i] = k
	t.n++
	return true
}

// remove removes k and reports whether it was in t. The keys after it
// that sit past their homes move down one, so that every key's slots
// from home stay taken. The table shrinks only if no key is refused.
func (t *table) remove(k uint64) bool {
	if t.n == 0 || k >= t.limit() {
		return false
	}
	i, ok := t.find(0, k)
	if !ok {
		return false
	}
	j := i + 1
	for ; t.slots[j] != free && t.home(t.slots[j]) < j; j++ {
		t.slots[j-1] = t.slots[j]
	}
	t.slots[j-1] = free
	t.n--
	if t.n == 0 && t.bits > minBits {
		// Nothing left: give the memory back. (The smallest table stays,
		// or a pool that holds one address at a time, taken and released,
		// would make one each time.)
		t.slots, t.bits, t.shrinkAt = nil, 0, 0
	} else if t.n < t.shrinkAt {
		// At an eighth of the homes, half of them will do, if the keys
		// fit: those left may crowd into part of the span (a range was
		// removed), and a table half the size would refuse some. Then
		// try again at half as many.
		if t.bits > minBits && t.fits(t.bits-1) {
			t.resize(t.bits - 1)
		} else {
			t.shrinkAt = t.n / 2
		}
	}
	return true
}

// fits reports whether every key would stay within reach of its home in
// a table of 1<<bits homes.
func (t *table) fits(bits uint8) bool {
	last, end := -1, 1<<bits+t.reach
	for _, k := range t.slots {
		if k == free {
			continue
		}
		h := int(k >> (t.span - bits))
		p := max(h, last+1)
		if p-h > t.reach || p >= end {
			return false
		}
		last = p
	}
	return true
}

// next returns the smallest key of t that is k or more.
func (t *table) next(k uint64) (uint64, bool) {
	if t.n == 0 || k >= t.limit() {
		return 0, false
	}
	i, _ := t.find(0, k)
	for ; i < len(t.slots)-1; i++ {
		if v := t.slots[i]; v != free {
			return v, true
		}
	}
	return 0, false
}

// count returns how many keys of t lie in [lo, hi].
func (t *table) count(lo, hi uint64) int {
	if t.n == 0 || hi < lo || lo >= t.limit() {
		return 0
	}
	hi = min(hi, t.limit()-1)
	if lo == 0 && hi == t.limit()-1 {
		return t.n
	}
	n := 0
	for i, _ := t.find(0, lo); i < len(t.slots)-1; i++ {
		v := t.slots[i]
		if v == free {
			if i > t.home(hi)+t.reach { // no key at most hi sits this far
				break
			}
			continue
		}
		if v > hi {
			break
		}
		n++
	}
	return n
}

// resize moves the keys into a table of 1<<bits homes, each at its home
// or just after the key before it; a key that would land more than max
// slots from home goes to spilled instead.
func (t *table) resize(bits uint8) {
	old := t.slots
	t.bits, t.shrinkAt = bits, 1<<bits/8
	t.slots = make([]uint64, 1<<bits+t.reach+1)
	for i := range t.slots {
		t.slots[i] = free
	}
	last := -1
	for _, k := range old {
		if k == free {
			continue
		}
		h := t.home(k)
		p := max(h, last+1)
		if p-h > t.reach || p >= len(t.slots)-1 {
			t.n--
			t.spilled = append(t.spilled, k)
			continue
		}
		t.slots[p] = k
		last = p
	}
}

// load replaces t's keys with keys, which must be sorted ascending,
// unique, sizing the table for them; those it refuses go to spilled.
func (t *table) load(keys []uint64) {
	t.slots, t.n, t.bits = nil, 0, 0
	if len(keys) == 0 {
		return
	}
	bits := uint8(minBits)
	for bits < t.span && len(keys) >= 3<<bits/4 {
		bits++
	}
	t.bits = min(bits, t.span)
	t.shrinkAt = 1 << t.bits / 8
	t.slots = make([]uint64, 1<<t.bits+t.reach+1)
	for i := range t.slots {
		t.slots[i] = free
	}
	last := -1
	for _, k := range keys {
		if k >= t.limit() {
			t.spilled = append(t.spilled, k)
			continue
		}
		h := t.home(k)
		p := max(h, last+1)
		if p-h > t.reach || p >= len(t.slots)-1 {
			t.spilled = append(t.spilled, k)
			continue
		}
		t.slots[p] = k
		last = p
		t.n++
	}
}
