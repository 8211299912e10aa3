package runset

import "github.com/netipam/netipam/internal/u128"

// leaf holds the runs [start(i), end(i)] for i < n, sorted by start, in one
// of two forms over the same words w:
//
//   - compact: every start and end has the upper half hi; w[i] is the lower
//     half of start i and w[compactCap+i] that of end i. This is the normal
//     form inside a /64 or smaller, and holds twice as many runs.
//   - wide: any runs; w[2i], w[2i+1] are the upper and lower halves of start
//     i, and w[compactCap+2i], w[compactCap+2i+1] those of end i.
//
// Starts and ends are kept apart so that the binary search over starts
// touches half as many cache lines. n never exceeds its Set's compactMax in the
// compact form nor its wideMax in the wide form.
//
// A new leaf is compact when its runs allow it. A compact leaf is widened when
// a run of another upper half arrives and there is room for it in the wide
// form (else the run goes to another leaf). A wide leaf turns compact only
// when it overflows or splits, not when a Remove takes away its last run of
// another upper half: that would add a check to every Remove, and a wide
// leaf costs nothing more until it fills.
type leaf struct {
	n       int
	compact bool
	hi      uint64
	w       [2 * compactCap]uint64
}

// run is a run outside the tree, for code that moves runs between leaves.
type run struct{ start, end u128.U128 }

// stride is the number of words a start (or an end) takes.
func (l *leaf) stride() int {
	if l.compact {
		return 1
	}
	return 2
}

func (l *leaf) start(i int) u128.U128 {
	if l.compact {
		return u128.U128{Hi: l.hi, Lo: l.w[i]}
	}
	return u128.U128{Hi: l.w[2*i], Lo: l.w[2*i+1]}
}

func (l *leaf) end(i int) u128.U128 {
	if l.compact {
		return u128.U128{Hi: l.hi, Lo: l.w[compactCap+i]}
	}
	return u128.U128{Hi: l.w[compactCap+2*i], Lo: l.w[compactCap+2*i+1]}
}

func (l *leaf) run(i int) run { return run{l.start(i), l.end(i)} }

// fits reports whether the run [a, b] can be stored in the leaf's form.
func (l *leaf) fits(a, b u128.U128) bool {
	return !l.compact || (a.Hi == l.hi && b.Hi == l.hi)
}

// setStart and setEnd overwrite one bound of run i; the new value must fit
// the form.
func (l *leaf) setStart(i int, x u128.U128) {
	if l.compact {
		l.w[i] = x.Lo
	} else {
		l.w[2*i], l.w[2*i+1] = x.Hi, x.Lo
	}
}

func (l *leaf) setEnd(i int, x u128.U128) {
	if l.compact {
		l.w[compactCap+i] = x.Lo
	} else {
		l.w[compactCap+2*i], l.w[compactCap+2*i+1] = x.Hi, x.Lo
	}
}

func (l *leaf) set(i int, a, b u128.U128) {
	l.setStart(i, a)
	l.setEnd(i, b)
}

// find returns the index of the last run whose start is <= x, or -1.
func (l *leaf) find(x u128.U128) int {
	if l.compact {
		switch {
		case x.Hi < l.hi:
			return -1
		case x.Hi > l.hi:
			return l.n - 1
		}
		return findSampled(l.w[:l.n], x.Lo)
	}
	return findSampledWide(l.w[:2*l.n], x)
}

// sampleStride is the distance between the keys findSampled reads first:
// 8 words, one cache line.
const sampleStride = 8

// findSampled returns the index of the last of the sorted keys that is <= x,
// or -1. A binary search over a node that is not in cache waits for one
// line after another (about five for a full compact leaf). This reads one
// key per line first, in a loop whose loads do not depend on each other,
// so the processor has all those lines in flight at once, and then only
// the stretch between two of them: two waits instead of five.
func findSampled(keys []uint64, x uint64) int {
	c := 0 // how many sampled keys are <= x: they come first, keys being sorted
	for k := 0; k < len(keys); k += sampleStride {
		if keys[k] <= x {
			c++
		}
	}
	if c == 0 {
		return -1
	}
	i := (c - 1) * sampleStride // keys[i] <= x
	end := min(i+sampleStride, len(keys))
	for i+1 < end && keys[i+1] <= x {
		i++
	}
	return i
}

// findSampledWide is findSampled over wide starts, each two words (upper
// half, lower half): one start per cache line first, then those between.
func findSampledWide(words []uint64, x u128.U128) int {
	n := len(words) / 2
	atMost := func(i int) bool { // start i <= x
		h := words[2*i]
		return h < x.Hi || (h == x.Hi && words[2*i+1] <= x.Lo)
	}
	const stride = sampleStride / 2
	c := 0
	for k := 0; k < n; k += stride {
		if atMost(k) {
			c++
		}
	}
	if c == 0 {
		return -1
	}
	i := (c - 1) * stride
	end := min(i+stride, n)
	for i+1 < end && atMost(i+1) {
		i++
	}
	return i
}

// open shifts runs [j, n) up by k, leaving k slots at j to be set.
// Runs are often added and removed last in a leaf (in a sequential range,
// or by the allocator's NextFree at a leaf's end), when nothing moves: the
// test saves the two memmove calls.
func (l *leaf) open(j, k int) {
	if j < l.n {
		st := l.stride()
		a, b, d := st*j, st*l.n, st*k
		copy(l.w[a+d:], l.w[a:b])
		copy(l.w[compactCap+a+d:], l.w[compactCap+a:compactCap+b])
	}
	l.n += k
}

// insert puts [a, b] at index j; it must fit the form and the leaf must have
// room.
func (l *leaf) insert(j int, a, b u128.U128) {
	l.open(j, 1)
	l.set(j, a, b)
}

// cut deletes runs [a, b).
// As in open, nothing moves when the last runs go.
func (l *leaf) cut(a, b int) {
	if b < l.n {
		st := l.stride()
		to, from, end := st*a, st*b, st*l.n
		copy(l.w[to:], l.w[from:end])
		copy(l.w[compactCap+to:], l.w[compactCap+from:compactCap+end])
	}
	l.n -= b - a
}

// only makes [a, b] the leaf's single run, in the compact form if it can.
func (l *leaf) only(a, b u128.U128) {
	l.n, l.compact, l.hi = 1, a.Hi == b.Hi, a.Hi
	l.set(0, a, b)
}

// copyRuns overwrites dst's runs [di, di+k) with src's runs [si, si+k). The
// runs must fit dst's form; dst.n is left to the caller.
func copyRuns(dst *leaf, di int, src *leaf, si, k int) {
	if dst.compact == src.compact && (!dst.compact || dst.hi == src.hi) {
		st := dst.stride()
		copy(dst.w[st*di:st*(di+k)], src.w[st*si:st*(si+k)])
		copy(dst.w[compactCap+st*di:compactCap+st*(di+k)], src.w[compactCap+st*si:compactCap+st*(si+k)])
		return
	}
	for t := range k {
		dst.set(di+t, src.start(si+t), src.end(si+t))
	}
}

// widen converts a compact leaf of at most wideCap runs to the wide form, in
// place: going down, each run's new words lie at or above its old ones.
func (l *leaf) widen() {
	for i := l.n - 1; i >= 0; i-- {
		a, b := l.w[i], l.w[compactCap+i]
		l.w[2*i], l.w[2*i+1] = l.hi, a
		l.w[compactCap+2*i], l.w[compactCap+2*i+1] = l.hi, b
	}
	l.compact = false
}

// compactIfShared converts a wide leaf to the compact form, in place, if its
// runs all share their upper half (the first start and last end do, as runs
// are sorted) and number at most limit, its Set's compactMax. Going up, each
// run's new words lie at or below its old ones.
func (l *leaf) compactIfShared(limit int) {
	if l.compact || l.n == 0 || l.n > limit || l.w[0] != l.w[compactCap+2*(l.n-1)] {
		return
	}
	l.hi = l.w[0]
	for i := range l.n {
		l.w[i], l.w[compactCap+i] = l.w[2*i+1], l.w[compactCap+2*i+1]
	}
	l.compact = true
}
