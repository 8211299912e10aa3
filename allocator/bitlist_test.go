package allocator

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// len reads a bitList's length back; only the tests need it.
func (b *bitList) len() int { return b.n }

// TestBitListFollowsASliceOfBools inserts, removes and sets bits at random
// places, across word boundaries, and compares every bit (has), next, any,
// count and nth with a []bool doing the same.
func TestBitListFollowsASliceOfBools(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var b bitList
		var model []bool
		if n := rapid.IntRange(0, 200).Draw(rt, "reset"); n > 0 {
			b.reset(n)
			model = make([]bool, n)
		}
		for range rapid.IntRange(1, 300).Draw(rt, "ops") {
			switch op := rapid.IntRange(0, 2).Draw(rt, "op"); {
			case op == 0 || len(model) == 0:
				i, v := rapid.IntRange(0, len(model)).Draw(rt, "at"), rapid.Bool().Draw(rt, "v")
				b.insert(i, v)
				model = slices.Insert(model, i, v)
			case op == 1:
				i := rapid.IntRange(0, len(model)-1).Draw(rt, "at")
				b.remove(i)
				model = slices.Delete(model, i, i+1)
			default:
				i, v := rapid.IntRange(0, len(model)-1).Draw(rt, "at"), rapid.Bool().Draw(rt, "v")
				b.set(i, v)
				model[i] = v
			}
			if b.len() != len(model) || len(b.w) != (len(model)+63)/64 {
				rt.Fatalf("len %d in %d words, want %d", b.len(), len(b.w), len(model))
			}
			for i, v := range model {
				if b.has(i) != v {
					rt.Fatalf("bit %d = %v, want %v", i, !v, v)
				}
			}
			if b.has(len(model)) {
				rt.Fatalf("has(%d) = true, past the end", len(model))
			}
			if n := len(model); n%64 != 0 && b.w[len(b.w)-1]>>(n%64) != 0 {
				rt.Fatalf("bits set beyond len %d", n)
			}
			next := -1
			for i := len(model); i >= 0; i-- {
				if i < len(model) && model[i] {
					next = i
				}
				if got := b.next(i); got != next {
					rt.Fatalf("next(%d) = %d, want %d", i, got, next)
				}
			}
			if b.any() != slices.Contains(model, true) {
				rt.Fatalf("any() = %v", b.any())
			}
			var set []int
			for i, v := range model {
				if v {
					set = append(set, i)
				}
			}
			if b.count() != len(set) {
				rt.Fatalf("count() = %d, want %d", b.count(), len(set))
			}
			for k, i := range set {
				if got := b.nth(k); got != i {
					rt.Fatalf("nth(%d) = %d, want %d", k, got, i)
				}
			}
		}
	})
}
