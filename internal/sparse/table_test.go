package sparse

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// check verifies t's invariants: keys below limit, ascending, each
// within reach of its home, every slot from a key's home to it taken,
// the count, and the last slot free.
func (t *table) check() error {
	if t.slots == nil {
		if t.n != 0 {
			return fmt.Errorf("no slots but n = %d", t.n)
		}
		return nil
	}
	if t.bits > t.span || len(t.slots) != 1<<t.bits+t.reach+1 {
		return fmt.Errorf("bits %d, span %d, %d slots", t.bits, t.span, len(t.slots))
	}
	if t.slots[len(t.slots)-1] != free {
		return fmt.Errorf("last slot taken")
	}
	n, prev, run := 0, -1, 0 // run: where the current stretch of taken slots began
	for i, k := range t.slots {
		if k == free {
			run = i + 1
			continue
		}
		n++
		if k >= t.limit() {
			return fmt.Errorf("slot %d: key %#x past limit", i, k)
		}
		if prev >= 0 && t.slots[prev] >= k {
			return fmt.Errorf("slot %d: key %#x after %#x", i, k, t.slots[prev])
		}
		prev = i
		h := t.home(k)
		if h > i || i-h > t.reach {
			return fmt.Errorf("slot %d: key %#x has home %d (reach %d)", i, k, h, t.reach)
		}
		if h < run {
			return fmt.Errorf("slot %d: key %#x has home %d before a free slot at %d", i, k, h, run-1)
		}
	}
	if n != t.n {
		return fmt.Errorf("n = %d, counted %d", t.n, n)
	}
	return nil
}

func (t *table) keys() []uint64 {
	var out []uint64
	for _, k := range t.slots {
		if k != free {
			out = append(out, k)
		}
	}
	return out
}

// TestTableFollowsASortedModel drives tables of several spans and reaches
// with keys spread over the span and keys crowded into a corner (which
// the table refuses past its reach), against a sorted slice.
func TestTableFollowsASortedModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		span := rapid.SampledFrom([]uint8{3, 8, 12, 64}).Draw(rt, "span")
		reach := rapid.SampledFrom([]int{1, 2, 4, probeMax}).Draw(rt, "reach")
		var tb table
		tb.init(span, reach)
		var model []uint64
		key := rapid.Custom(func(rt *rapid.T) uint64 {
			limit := tb.limit()
			if rapid.Bool().Draw(rt, "crowded") {
				return rapid.Uint64Range(0, min(limit-1, 40)).Draw(rt, "low")
			}
			if rapid.Bool().Draw(rt, "top") { // includes 2^64-1 for span 64, which is refused
				return rapid.Uint64Range(max(limit, 5)-5, max(limit, 5)-1+uint64(span/64)).Draw(rt, "high")
			}
			return rapid.Uint64Range(0, limit-1).Draw(rt, "any")
		})
		takeSpilled := func(rt *rapid.T) {
			for _, k := range tb.spilled {
				i, ok := slices.BinarySearch(model, k)
				if !ok {
					rt.Fatalf("spilled %#x, which was not in the table", k)
				}
				model = slices.Delete(model, i, i+1)
			}
			tb.spilled = tb.spilled[:0]
		}
		rt.Repeat(map[string]func(*rapid.T){
			"insert": func(rt *rapid.T) {
				for _, k := range rapid.SliceOfN(key, 1, 60).Draw(rt, "keys") {
					ok := tb.insert(k)
					takeSpilled(rt)
					i, had := slices.BinarySearch(model, k)
					if had && !ok {
						rt.Fatalf("insert(%#x) of a key held = false", k)
					}
					if ok && !had {
						model = slices.Insert(model, i, k)
					}
					if k >= tb.limit() && ok {
						rt.Fatalf("insert(%#x) past the limit = true", k)
					}
				}
			},
			"remove": func(rt *rapid.T) {
				for _, k := range rapid.SliceOfN(key, 1, 60).Draw(rt, "keys") {
					i, had := slices.BinarySearch(model, k)
					if got := tb.remove(k); got != had {
						rt.Fatalf("remove(%#x) = %v, want %v", k, got, had)
					}
					if had {
						model = slices.Delete(model, i, i+1)
					}
					takeSpilled(rt)
				}
			},
			"load": func(rt *rapid.T) {
				keys := rapid.SliceOfN(key, 0, 200).Draw(rt, "keys")
				slices.Sort(keys)
				keys = slices.Compact(keys)
				tb.load(keys)
				model = slices.Clone(keys)
				takeSpilled(rt)
			},
		})
		if err := tb.check(); err != nil {
			rt.Fatal(err)
		}
		if got := tb.keys(); !slices.Equal(got, model) {
			rt.Fatalf("keys %#x, want %#x", got, model)
		}
		lo := key.Draw(rt, "lo")
		hi := key.Draw(rt, "hi")
		want := 0
		for _, k := range model {
			if lo <= k && k <= hi {
				want++
			}
		}
		if got := tb.count(lo, hi); got != want {
			rt.Fatalf("count(%#x, %#x) = %d, want %d", lo, hi, got, want)
		}
		i, _ := slices.BinarySearch(model, lo)
		got, ok := tb.next(lo)
		if ok != (i < len(model)) || ok && got != model[i] {
			rt.Fatalf("next(%#x) = %#x, %v", lo, got, ok)
		}
		b, a, c := tb.around(lo)
		_, wb := slices.BinarySearch(model, lo-1)
		_, wa := slices.BinarySearch(model, lo)
		_, wc := slices.BinarySearch(model, lo+1)
		if lo >= tb.limit() { // around answers only for keys t could hold
			wb, wa, wc = false, false, false
		}
		wb = wb && lo > 0
		wc = wc && lo+1 < tb.limit()
		if b != wb || a != wa || c != wc {
			rt.Fatalf("around(%#x) = %v %v %v, want %v %v %v", lo, b, a, c, wb, wa, wc)
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
		if !tb.insert(k) && k != free {
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
	for i, k := range tb.slots {
		if k != free {
			worst = max(worst, i-tb.home(k))
		}
	}
	if worst > 32 {
		t.Fatalf("a key sits %d slots from home", worst)
	}
	for _, k := range tb.keys() {
		if !tb.remove(k) {
			t.Fatalf("remove(%#x) = false (n %d, bits %d, %d spilled)", k, tb.n, tb.bits, len(tb.spilled))
		}
	}
	if tb.n != 0 || len(tb.slots) > 1<<minBits+probeMax+1 || len(tb.spilled) != 0 {
		t.Fatalf("after removing all: n %d, %d slots, %d spilled", tb.n, len(tb.slots), len(tb.spilled))
	}
}
