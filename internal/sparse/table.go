package sparse

import (
	"iter"
	"slices"
	"unsafe"

	"github.com/netipam/netipam/internal/prefetch"
	"github.com/netipam/netipam/internal/u128"
)

// free marks an empty slot. It is above every key's top a table holds,
// so a scan for a key stops at the first slot holding that key, a
// greater one, or nothing.
const free = ^uint64(0)

const (
	// minBits is the log2 of the homes of the smallest table: 64 slots, so
	// that a zone holding a few addresses costs a kilobyte or two.
	minBits = 6
	// probeMax is how far past its home a key may sit, and so how many
	// slots a lookup reads at most (with uniform keys at the load tables
	// keep, a key is a slot or two past its home: probeMax is only met
	// by keys that crowd, and those are refused).
	probeMax = 64
)

// key is an offset in a table's span, split in two for spans past 2^64:
// top is its upper 64 bits (all of it in a narrower span) and low the
// rest (0 in a narrower span). Keys order by top, then low.
type key struct{ top, low uint64 }

func (k key) less(o key) bool { return k.top < o.top || k.top == o.top && k.low < o.low }

// table is a set of offsets below 2^span, sorted in an array with gaps:
// an ordered hash table whose hash is the key's top bits. The home of a
// key is the top bits of its top, so homes rise with keys; every key
// sits at its home or at most reach slots after it, every slot from a
// key's home to the key is taken, and taken slots hold ascending keys. A
// lookup reads from the home to the first slot not below the key: one
// line, mostly. Keys that are spread evenly over the span, as randomly
// chosen addresses are, land like hashed ones, one or two slots from
// home; keys that crowd into a few homes would need longer moves, and
// insert refuses them, so that no operation reads or moves more than
// about reach slots. The zero value holds nothing and refuses every key:
// init it.
type table struct {
	slots []uint64 // tops: 1<<bits homes, then reach+1 slots of overflow (the last always free)
	lows  []uint64 // lows, beside slots, for a span past 64; else nil
	bits  uint8    // log2 of the number of homes; at most maxBits
	span  uint8    // keys are below 2^span; at most 128
	shift uint8    // a top's home is top >> shift
	n     int
	reach int // probeMax, or a smaller one in tests

	shrinkAt int // remove tries a smaller table when n falls below it

	// spilled holds the keys a resize refused, which are no longer in t:
	// the caller keeps them elsewhere and empties it.
	spilled []key
}

// init empties t for keys below 2^span, with keys at most reach slots
// from home.
func (t *table) init(span uint8, reach int) {
	*t = table{span: span, reach: reach}
}

// wide reports whether t's keys have a low part.
func (t *table) wide() bool { return t.span > 64 }

// topLimit returns the first top t cannot hold: 2^span for a span below
// 64, else 2^64-1 (free, which marks empty slots, is never a top).
func (t *table) topLimit() uint64 {
	if t.span >= 64 {
		return free
	}
	return 1 << t.span
}

// lowMax returns the largest low of t's keys.
func (t *table) lowMax() uint64 {
	if !t.wide() {
		return 0
	}
	return free >> (128 - t.span)
}

// keyOf returns the key of offset off, and whether t can hold it (off is
// below 2^span, and its top is not 2^64-1).
func (t *table) keyOf(off u128.U128) (key, bool) {
	if !t.wide() {
		return key{top: off.Lo}, off.Hi == 0 && off.Lo < t.topLimit()
	}
	return t.wideKeyOf(off)
}

// wideKeyOf is keyOf in a wide table.
func (t *table) wideKeyOf(off u128.U128) (key, bool) {
	lowBits := uint(t.span - 64) // 1 to 64
	if lowBits == 64 {
		return key{top: off.Hi, low: off.Lo}, off.Hi != free
	}
	k := key{top: off.Hi<<(64-lowBits) | off.Lo>>lowBits, low: off.Lo & (free >> (64 - lowBits))}
	return k, off.Hi>>lowBits == 0 && k.top != free
}

// offsetOf returns the offset of k.
func (t *table) offsetOf(k key) u128.U128 {
	if !t.wide() {
		return u128.From64(k.top)
	}
	lowBits := uint(t.span - 64)
	if lowBits == 64 {
		return u128.U128{Hi: k.top, Lo: k.low}
	}
	return u128.U128{Hi: k.top >> (64 - lowBits), Lo: k.top<<lowBits | k.low}
}

// pred and succ return the key before and after k, if t can hold it.
func (t *table) pred(k key) (key, bool) {
	switch {
	case k.low > 0:
		return key{k.top, k.low - 1}, true
	case k.top > 0:
		return key{k.top - 1, t.lowMax()}, true
	}
	return key{}, false
}

func (t *table) succ(k key) (key, bool) {
	switch {
	case k.low < t.lowMax():
		return key{k.top, k.low + 1}, true
	case k.top+1 < t.topLimit():
		return key{k.top + 1, 0}, true
	}
	return key{}, false
}

// maxBits returns the log2 of the most homes t may have: one per key
// its tops can tell apart, and no more than an int can count.
func (t *table) maxBits() uint8 { return min(t.span, 62) }

// hasSucc reports whether the key after k is one t can hold.
func (t *table) hasSucc(k key) bool {
	_, ok := t.succ(k)
	return ok
}

// home returns the home slot of a key whose top is top. (A shift is
// below 64, as a table has a home at least; the mask says so to the
// compiler, which otherwise tests for larger ones at every call, a dozen
// an allocation: 24 instructions of a cycle at a scattered /64.)
func (t *table) home(top uint64) int { return int(top >> (t.shift & 63)) }

// at returns the key in slot i, which must be taken.
func (t *table) at(i int) key {
	if t.lows == nil {
		return key{top: t.slots[i]}
	}
	return key{t.slots[i], t.lows[i]}
}

// find returns the first slot at or after i, and at or after k's home,
// that holds k or more (or nothing), and whether it holds k.
func (t *table) find(i int, k key) (int, bool) {
	i = max(i, t.home(k.top))
	if t.lows != nil {
		return t.scanWide(i, k)
	}
	return t.scanNarrow(i, k.top)
}

// scanNarrow and scanWide are find from i, at or after the key's home,
// in a table whose keys are their tops and in one whose keys have a low
// part; small enough to inline.
func (t *table) scanNarrow(i int, top uint64) (int, bool) {
	for t.slots[i] < top {
		i++
	}
	return i, t.slots[i] == top
}

func (t *table) scanWide(i int, k key) (int, bool) {
	for t.slots[i] < k.top || t.slots[i] == k.top && t.lows[i] < k.low {
		i++
	}
	return i, t.slots[i] == k.top && t.lows[i] == k.low
}

// has reports whether k is in t. k must be one t can hold (keyOf).
func (t *table) has(k key) bool {
	if t.n == 0 {
		return false
	}
	_, ok := t.find(0, k)
	return ok
}

// around reports which of the keys before k, k and after k are in t, in
// one pass (the three sit in one stretch of slots, and each scan goes on
// from where the one before stopped), and the slot where k is or would
// go, for put while t does not change (-1 when t is empty). k must be
// one t can hold.
func (t *table) around(k key) (below, at, above bool, i int) {
	if t.n == 0 {
		return false, false, false, -1
	}
	if t.lows == nil {
		return t.aroundNarrow(k.top)
	}
	if p, ok := t.pred(k); ok {
		i, below = t.scanWide(t.home(p.top), p)
	}
	i, at = t.scanWide(max(i, t.home(k.top)), k)
	if s, ok := t.succ(k); ok {
		_, above = t.scanWide(max(i, t.home(s.top)), s)
	}
	return below, at, above, i
}

// aroundNarrow is around in a table whose keys are their tops, where a
// key's neighbours are its top's.
func (t *table) aroundNarrow(top uint64) (below, at, above bool, i int) {
	if top > 0 {
		i, below = t.scanNarrow(t.home(top-1), top-1)
	}
	i, at = t.scanNarrow(max(i, t.home(top)), top)
	if s := top + 1; s < t.topLimit() {
		_, above = t.scanNarrow(max(i, t.home(s)), s)
	}
	return below, at, above, i
}

// prefetchKey starts loading the line a lookup of k reads first.
func (t *table) prefetchKey(k key) {
	if t.n == 0 {
		return
	}
	h := t.home(k.top)
	prefetch.Line(unsafe.Pointer(&t.slots[h]))
	if t.lows != nil {
		prefetch.Line(unsafe.Pointer(&t.lows[h]))
	}
}

// insert adds k, one t can hold, reporting whether it is in t afterwards:
// false if k is refused (it, or a key it would move, would land more
// than reach slots from home). Growing the table may refuse keys already
// in it: they go to spilled.
func (t *table) insert(k key) bool {
	if t.slots == nil {
		t.resize(min(minBits, t.maxBits()))
	} else if t.full() {
		t.resize(t.bits + 1)
	}
	i, ok := t.find(0, k)
	if ok {
		return true
	}
	return t.put(i, k)
}

// full reports whether an insert would grow t first: it holds 3/4 of its
// homes' worth, and may have more homes.
func (t *table) full() bool { return t.n >= 3<<t.bits/4 && t.bits < t.maxBits() }

// put adds k, which t can hold and does not, at slot i: the first at or
// after k's home holding a larger key or nothing, as find and around
// return it. It reports false, and changes nothing, if k is refused. The
// caller has made t not full.
func (t *table) put(i int, k key) bool {
	if i-t.home(k.top) > t.reach {
		return false
	}
	if t.slots[i] != free || i == len(t.slots)-1 {
		// The keys from i to the first free slot move up one; each must
		// stay within reach of its home, and the last slot stays free.
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
		if t.lows != nil {
			copy(t.lows[i+1:j+1], t.lows[i:j])
		}
	}
	t.slots[i] = k.top
	if t.lows != nil {
		t.lows[i] = k.low
	}
	t.n++
	return true
}

// remove removes k, one t can hold, and reports whether it was in t. The
// keys after it that sit past their homes move down one, so that every
// key's slots from home stay taken. The table shrinks only if no key is
// refused.
func (t *table) remove(k key) bool {
	if t.n == 0 {
		return false
	}
	i, ok := t.find(0, k)
	if !ok {
		return false
	}
	j := i + 1
	for ; t.slots[j] != free && t.home(t.slots[j]) < j; j++ {
		t.slots[j-1] = t.slots[j]
		if t.lows != nil {
			t.lows[j-1] = t.lows[j]
		}
	}
	t.slots[j-1] = free
	t.n--
	if t.n == 0 && t.bits > minBits {
		// Nothing left: give the memory back. (The smallest table stays,
		// or a pool that holds one address at a time, taken and released,
		// would make one each time.)
		t.slots, t.lows, t.bits, t.shrinkAt = nil, nil, 0, 0
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

// next returns the smallest key of t that is k or more.
func (t *table) next(k key) (key, bool) {
	if t.n == 0 {
		return key{}, false
	}
	i, _ := t.find(0, k)
	for ; i < len(t.slots)-1; i++ {
		if t.slots[i] != free {
			return t.at(i), true
		}
	}
	return key{}, false
}

// count returns how many keys of t lie in [lo, hi], keys t can hold. It
// reads the slots of the range, or of the rest of the span when that is
// smaller: a pool's range is its prefix but for an address or two.
func (t *table) count(lo, hi key) int {
	if t.n == 0 || hi.less(lo) {
		return 0
	}
	if 2*(t.home(hi.top)-t.home(lo.top)) > 1<<t.bits {
		n := t.n
		if p, ok := t.pred(lo); ok {
			n -= t.countIn(key{}, p)
		}
		if s, ok := t.succ(hi); ok {
			n -= t.countIn(s, key{t.topLimit() - 1, t.lowMax()})
		}
		return n
	}
	return t.countIn(lo, hi)
}

// countIn is count, reading the slots of [lo, hi].
func (t *table) countIn(lo, hi key) int {
	if hi.less(lo) {
		return 0
	}
	n, end := 0, t.home(hi.top)+t.reach // no key up to hi sits past end
	for i, _ := t.find(0, lo); i < len(t.slots)-1; i++ {
		if t.slots[i] == free {
			if i > end {
				break
			}
			continue
		}
		if hi.less(t.at(i)) {
			break
		}
		n++
	}
	return n
}

// alloc gives t empty slots for 1<<bits homes.
func (t *table) alloc(bits uint8) {
	t.bits, t.shrinkAt = bits, 1<<bits/8
	t.shift = min(t.span, 64) - bits
	t.slots = make([]uint64, 1<<bits+t.reach+1)
	for i := range t.slots {
		t.slots[i] = free
	}
	t.lows = nil
	if t.wide() {
		t.lows = make([]uint64, len(t.slots))
	}
}

// place puts ks, ascending, into t's empty slots, each at its home or
// just after the key before it; a key that would land more than reach
// slots from home goes to spilled instead.
func (t *table) place(ks iter.Seq[key]) {
	last := -1
	for k := range ks {
		h := t.home(k.top)
		p := max(h, last+1)
		if p-h > t.reach || p >= len(t.slots)-1 {
			t.spilled = append(t.spilled, k)
			continue
		}
		t.slots[p] = k.top
		if t.lows != nil {
			t.lows[p] = k.low
		}
		last = p
		t.n++
	}
}

// keys yields the keys of t in ascending order.
func (t *table) keys(yield func(key) bool) {
	for i, top := range t.slots {
		if top != free && !yield(t.at(i)) {
			return
		}
	}
}

// resize moves the keys into a table of 1<<bits homes (see place).
func (t *table) resize(bits uint8) {
	old := *t
	t.n = 0
	t.alloc(bits)
	t.place(old.keys)
}

// fits reports whether every key would stay within reach of its home in
// a table of 1<<bits homes.
func (t *table) fits(bits uint8) bool {
	shift := min(t.span, 64) - bits
	last, end := -1, 1<<bits+t.reach
	for _, top := range t.slots {
		if top == free {
			continue
		}
		h := int(top >> shift)
		p := max(h, last+1)
		if p-h > t.reach || p >= end {
			return false
		}
		last = p
	}
	return true
}

// load replaces t's keys with ks, ascending, unique and keys t can hold,
// sizing the table for them; those it refuses go to spilled.
func (t *table) load(ks []key) {
	t.slots, t.lows, t.n, t.bits = nil, nil, 0, 0
	if len(ks) == 0 {
		return
	}
	bits := min(minBits, t.maxBits())
	for bits < t.maxBits() && len(ks) >= 3<<bits/4 {
		bits++
	}
	t.alloc(bits)
	t.place(slices.Values(ks))
}
