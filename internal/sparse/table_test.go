package sparse

import (
	"fmt"
	"slices"
	"testing"

	"github.com/netipam/netipam/internal/u128"
	"pgregory.net/rapid"
)

// check verifies t's invariants: keys t can hold, ascending, each within
// reach of its home, every slot from a key's home to it taken, the
// count, the lows beside the tops of a wide table, and the last slot
// free.
func (t *table) check() error {
	if t.slots == nil {
		if t.n != 0 || t.lows != nil {
			return fmt.Errorf("no slots but n = %d, %d lows", t.n, len(t.lows))
		}
		return nil
	}
	if t.bits > t.maxBits() || len(t.slots) != 1<<t.bits+t.reach+1 || t.shift != min(t.span, 64)-t.bits {
		return fmt.Errorf("bits %d, span %d, shift %d, %d slots", t.bits, t.span, t.shift, len(t.slots))
	}
	if t.wide() != (t.lows != nil) || t.lows != nil && len(t.lows) != len(t.slots) {
		return fmt.Errorf("span %d with %d lows", t.span, len(t.lows))
	}
	if t.slots[len(t.slots)-1] != free {
		return fmt.Errorf("last slot taken")
	}
	n, prev, run := 0, -1, 0 // run: where the current stretch of taken slots began
	for i, top := range t.slots {
		if top == free {
			run = i + 1
			continue
		}
		n++
		k := t.at(i)
		if _, ok := t.keyOf(t.offsetOf(k)); !ok || k.low > t.lowMax() {
			return fmt.Errorf("slot %d: key %v cannot be held", i, k)
		}
		if prev >= 0 && !t.at(prev).less(k) {
			return fmt.Errorf("slot %d: key %v after %v", i, k, t.at(prev))
		}
		prev = i
		h := t.home(k.top)
		if h > i || i-h > t.reach {
			return fmt.Errorf("slot %d: key %v has home %d (reach %d)", i, k, h, t.reach)
		}
		if h < run {
			return fmt.Errorf("slot %d: key %v has home %d before a free slot at %d", i, k, h, run-1)
		}
	}
	if n != t.n {
		return fmt.Errorf("n = %d, counted %d", t.n, n)
	}
	return nil
}

// offsets returns t's keys as offsets.
func (t *table) offsets() []u128.U128 {
	var out []u128.U128
	for k := range t.keys {
		out = append(out, t.offsetOf(k))
	}
	return out
}

// TestTableFollowsASortedModel drives tables of several spans (narrow
// and wide) and reaches with keys spread over the span and keys crowded
// into a corner (which the table refuses past its reach), against a
// sorted slice.
func TestTableFollowsASortedModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		span := rapid.SampledFrom([]uint8{3, 8, 12, 64, 65, 80, 128}).Draw(rt, "span")
		reach := rapid.SampledFrom([]int{1, 2, 4, probeMax}).Draw(rt, "reach")
		var tb table
		tb.init(span, reach)
		var model []u128.U128
		last := u128.Max().Rsh(uint(128 - span)) // 2^span - 1
		// Offsets near 0, near the end of the span (the last ones cannot
		// be held when the span is 64 or more), near a carry of a wide
		// span's low part into its top, or anywhere.
		off := rapid.Custom(func(rt *rapid.T) u128.U128 {
			switch rapid.IntRange(0, 3).Draw(rt, "where") {
			case 0:
				return u128.Min(last, u128.From64(rapid.Uint64Range(0, 40).Draw(rt, "low")))
			case 1:
				return last.Sub(u128.Min(last, u128.From64(rapid.Uint64Range(0, 6).Draw(rt, "high"))))
			case 2:
				mid := tb.offsetOf(key{top: 5})
				return u128.Min(last, mid.Sub(u128.Min(mid, u128.From64(3))).Add64(rapid.Uint64Range(0, 6).Draw(rt, "carry")))
			}
			return u128.RandBelow(last, func() uint64 { return rapid.Uint64().Draw(rt, "any") })
		})
		cmp := u128.U128.Cmp
		takeSpilled := func(rt *rapid.T) {
			for _, k := range tb.spilled {
				i, ok := slices.BinarySearchFunc(model, tb.offsetOf(k), cmp)
				if !ok {
					rt.Fatalf("spilled %v, which was not in the table", k)
				}
				model = slices.Delete(model, i, i+1)
			}
			tb.spilled = tb.spilled[:0]
		}
		rt.Repeat(map[string]func(*rapid.T){
			"insert": func(rt *rapid.T) {
				for _, o := range rapid.SliceOfN(off, 1, 60).Draw(rt, "offs") {
					k, can := tb.keyOf(o)
					if !can {
						continue
					}
					var ok bool
					// Add's way, when the table need not grow: around,
					// then put where around said.
					if tb.n > 0 && !tb.full() && rapid.Bool().Draw(rt, "viaAround") {
						_, at, _, pos := tb.around(k)
						ok = at || tb.put(pos, k)
					} else {
						ok = tb.insert(k)
					}
					takeSpilled(rt)
					i, had := slices.BinarySearchFunc(model, o, cmp)
					if had && !ok {
						rt.Fatalf("insert(%v) of a key held = false", o)
					}
					if ok && !had {
						model = slices.Insert(model, i, o)
					}
				}
			},
			"remove": func(rt *rapid.T) {
				for _, o := range rapid.SliceOfN(off, 1, 60).Draw(rt, "offs") {
					k, can := tb.keyOf(o)
					if !can {
						continue
					}
					i, had := slices.BinarySearchFunc(model, o, cmp)
					if got := tb.remove(k); got != had {
						rt.Fatalf("remove(%v) = %v, want %v", o, got, had)
					}
					if had {
						model = slices.Delete(model, i, i+1)
					}
					takeSpilled(rt)
				}
			},
			"load": func(rt *rapid.T) {
				offs := rapid.SliceOfN(off, 0, 200).Draw(rt, "offs")
				slices.SortFunc(offs, cmp)
				offs = slices.Compact(offs)
				var ks []key
				model = model[:0]
				for _, o := range offs {
					if k, ok := tb.keyOf(o); ok {
						ks = append(ks, k)
						model = append(model, o)
					}
				}
				tb.load(ks)
				takeSpilled(rt)
			},
		})
		if err := tb.check(); err != nil {
			rt.Fatal(err)
		}
		if got := tb.offsets(); !slices.Equal(got, model) {
			rt.Fatalf("offsets %v, want %v", got, model)
		}
		lo, hi := off.Draw(rt, "lo"), off.Draw(rt, "hi")
		lk, lok := tb.keyOf(lo)
		hk, hok := tb.keyOf(hi)
		if !lok || !hok {
			return
		}
		want := 0
		for _, o := range model {
			if !o.Less(lo) && !hi.Less(o) {
				want++
			}
		}
		if got := tb.count(lk, hk); got != want {
			rt.Fatalf("count(%v, %v) = %d, want %d", lo, hi, got, want)
		}
		i, _ := slices.BinarySearchFunc(model, lo, cmp)
		got, ok := tb.next(lk)
		if ok != (i < len(model)) || ok && tb.offsetOf(got) != model[i] {
			rt.Fatalf("next(%v) = %v, %v", lo, got, ok)
		}
		has := func(o u128.U128) bool {
			_, ok := slices.BinarySearchFunc(model, o, cmp)
			return ok
		}
		b, a, c, pos := tb.around(lk)
		wantPos := -1
		if tb.n > 0 {
			wantPos, _ = tb.find(0, lk)
		}
		if pos != wantPos {
			rt.Fatalf("around(%v) places it at %d, find at %d", lo, pos, wantPos)
		}
		_, canPred := tb.pred(lk)
		_, canSucc := tb.succ(lk)
		wb := canPred && has(lo.Dec())
		wc := canSucc && has(lo.Inc())
		if b != wb || a != has(lo) || c != wc {
			rt.Fatalf("around(%v) = %v %v %v, want %v %v %v", lo, b, a, c, wb, has(lo), wc)
		}
		if p, ok := tb.pred(lk); ok && tb.offsetOf(p) != lo.Dec() {
			rt.Fatalf("pred(%v) = %v", lo, tb.offsetOf(p))
		}
		if sk, ok := tb.succ(lk); ok && tb.offsetOf(sk) != lo.Inc() {
			rt.Fatalf("succ(%v) = %v", lo, tb.offsetOf(sk))
		}
	})
}

// TestTableKeepsSpreadKeysAtLowLoad checks the sizing that the memory
// figures rest on: a million spread keys in a span of 2^64 take 2^21
// homes (under 17 bytes a key), none refused, each a few slots from home.
func TestTableKeepsSpreadKeysAtLowLoad(t *testing.T) {
	var tb table
	tb.init(64, probeMax)
	x := uint64(0x9e3779b97f4a7c15)
	const n = 1 << 20
	for range n {
		x += 0x9e3779b97f4a7c15
		k := (x ^ x>>31) * 0xbf58476d1ce4e5b9 // spread over all 64 bits
		if !tb.insert(key{top: k}) && k != free {
			t.Fatalf("insert(%#x) refused", k)
		}
	}
	if len(tb.spilled) != 0 {
		t.Fatalf("%d keys spilled", len(tb.spilled))
	}
	if tb.bits != 21 {
		t.Fatalf("%d keys in 2^%d homes, want 2^21", tb.n, tb.bits)
	}
	worst := 0
	for i, top := range tb.slots {
		if top != free {
			worst = max(worst, i-tb.home(top))
		}
	}
	if worst > 32 {
		t.Fatalf("a key sits %d slots from home", worst)
	}
	for _, o := range tb.offsets() {
		if k, _ := tb.keyOf(o); !tb.remove(k) {
			t.Fatalf("remove(%v) = false (n %d, bits %d, %d spilled)", o, tb.n, tb.bits, len(tb.spilled))
		}
	}
	if tb.n != 0 || len(tb.slots) > 1<<minBits+probeMax+1 || len(tb.spilled) != 0 {
		t.Fatalf("after removing all: n %d, %d slots, %d spilled", tb.n, len(tb.slots), len(tb.spilled))
	}
}
