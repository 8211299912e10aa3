package sparse

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/netipam/netipam/internal/u128"
	"pgregory.net/rapid"
)

func v(hi, lo uint64) u128.U128 { return u128.U128{Hi: hi, Lo: lo} }

// zoneChoices are the aligned ranges the property test names as zones:
// nested ones (a zone inside another, and the reverse as zones change),
// neighbours (singles next to a zone's edge are in another zone), a
// zone of 2^64 values (whose last offset no table holds), and one just
// past it.
var zoneChoices = [][2]u128.U128{
	{v(1, 0), v(1, 15)},
	{v(1, 16), v(1, 31)},
	{v(1, 0), v(1, 63)},
	{v(1, 64), v(1, 127)},
	{v(1, 0), v(1, 127)},
	{v(2, 0), v(2, ^uint64(0))},
	{v(3, 0), v(3, 7)},
	{v(3, 8), v(3, 15)},
	{v(1, 3), v(1, 9)}, // not aligned: ignored
	// A wide zone (2^66 values: keys of a top and 2 low bits), and a /64
	// inside it.
	{v(4, 0), v(7, ^uint64(0))},
	{v(5, 0), v(5, ^uint64(0))},
	// At the end of the value space: a /64 whose last value is the
	// largest (no table holds it), and a wide zone of 2^66 values ending
	// there too.
	{v(^uint64(0), 0), u128.Max()},
	{v(^uint64(0)-3, 0), u128.Max()},
}

// everything is the zone of every value (2^128 of them, keys of a top and
// a low of 64 bits each), named now and then: it holds every other zone.
var everything = [2]u128.U128{{}, u128.Max()}

// windows are where values are drawn: across the first zones and the
// value below them, and across the end of the large zone and the small
// ones after it.
var windows = [][2]u128.U128{
	{v(0, ^uint64(0)-3), v(1, 130)},
	{v(2, ^uint64(0)-5), v(3, 17)},
	{v(4, ^uint64(0)-9), v(5, 9)},
	{v(7, ^uint64(0)-9), v(8, 3)},
	{v(^uint64(0)-4, ^uint64(0)-5), v(^uint64(0)-3, 5)},
	{v(^uint64(0), ^uint64(0)-9), u128.Max()},
}

func genValue() *rapid.Generator[u128.U128] {
	return rapid.Custom(func(t *rapid.T) u128.U128 {
		w := windows[rapid.IntRange(0, len(windows)-1).Draw(t, "window")]
		return w[0].Add64(rapid.Uint64Range(0, w[1].Sub(w[0]).Lo).Draw(t, "offset"))
	})
}

// model is the set as a map.
type model map[u128.U128]bool

func (m model) sorted() []u128.U128 {
	return slices.SortedFunc(maps.Keys(m), u128.U128.Cmp)
}

// runs returns m's maximal runs clipped to [lo, hi].
func (m model) runs(lo, hi u128.U128) [][2]u128.U128 {
	var out [][2]u128.U128
	for _, x := range m.sorted() {
		if x.Less(lo) || hi.Less(x) {
			continue
		}
		if n := len(out); n > 0 && out[n-1][1].Inc() == x {
			out[n-1][1] = x
			continue
		}
		out = append(out, [2]u128.U128{x, x})
	}
	return out
}

// model returns the values of s, read through Ranges.
func (s *Index) model() model {
	m := model{}
	for a, b := range s.Ranges(u128.U128{}, u128.Max()) {
		for x := a; ; x = x.Inc() {
			m[x] = true
			if x == b {
				break
			}
		}
	}
	return m
}

// check verifies s's invariants against m.
func (s *Index) check(m model) error {
	for i, z := range s.zones {
		if i > 0 && !s.zones[i-1].hi.Less(z.lo) {
			return fmt.Errorf("zones %v and %v meet", s.zones[i-1].lo, z.lo)
		}
		if err := z.t.check(); err != nil {
			return fmt.Errorf("zone %v: %v", z.lo, err)
		}
		if !z.wanted && z.t.n == 0 {
			return fmt.Errorf("zone %v: neither named nor holding anything", z.lo)
		}
		if !z.active && z.t.n != 0 {
			return fmt.Errorf("zone %v: inactive, with %d singles", z.lo, z.t.n)
		}
		for k := range z.t.keys {
			x := z.value(k)
			if s.runs.Contains(x) {
				return fmt.Errorf("%v: in a table and in the run set", x)
			}
			if !m[x] {
				return fmt.Errorf("%v: in a table, not in the model", x)
			}
			if m[x.Dec()] || m[x.Inc()] {
				return fmt.Errorf("%v: a single with a used neighbour", x)
			}
		}
	}
	singles, active := 0, 0
	for _, z := range s.zones {
		singles += z.t.n
		if z.active {
			active++
		}
	}
	if singles != s.nSingles || active != s.activeZones {
		return fmt.Errorf("%d singles and %d active zones counted, %d and %d in the zones", s.nSingles, s.activeZones, singles, active)
	}
	for x := range m {
		if !s.Contains(x) {
			return fmt.Errorf("%v: missing", x)
		}
	}
	if got, want := s.Len(), u128.From64(uint64(len(m))); got != want {
		return fmt.Errorf("Len %v, want %v", got, want)
	}
	if got, want := s.Runs(), len(m.runs(u128.U128{}, u128.Max())); got != want {
		return fmt.Errorf("Runs %d, want %d", got, want)
	}
	return nil
}

// TestIndexFollowsAMapModel drives an Index through every operation, with
// zones named, renamed and dropped between them and tables whose reach is
// short enough to refuse values, against a map.
func TestIndexFollowsAMapModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var s Index
		s.reach = rapid.SampledFrom([]int{1, 2, probeMax}).Draw(rt, "reach")
		s.fromN = rapid.SampledFrom([]int{1, 2, 5, activeFrom}).Draw(rt, "activeFrom")
		m := model{}
		val := genValue()
		setZones := func(rt *rapid.T) {
			var zs [][2]u128.U128
			for _, z := range zoneChoices {
				if rapid.Bool().Draw(rt, "zone") {
					zs = append(zs, z)
				}
			}
			if rapid.IntRange(0, 7).Draw(rt, "everything") == 0 {
				zs = append(zs, everything)
			}
			s.SetZones(zs)
		}
		setZones(rt)
		rt.Repeat(map[string]func(*rapid.T){
			"SetZones": setZones,
			"Add": func(rt *rapid.T) {
				for _, x := range rapid.SliceOfN(val, 1, 30).Draw(rt, "xs") {
					if got := s.Add(x); got == m[x] {
						rt.Fatalf("Add(%v) = %v", x, got)
					}
					m[x] = true
				}
			},
			"Remove": func(rt *rapid.T) {
				for _, x := range rapid.SliceOfN(val, 1, 30).Draw(rt, "xs") {
					if got := s.Remove(x); got != m[x] {
						rt.Fatalf("Remove(%v) = %v", x, got)
					}
					delete(m, x)
				}
			},
			"AddRange": func(rt *rapid.T) {
				lo := val.Draw(rt, "lo")
				n := rapid.Uint64Range(0, 40).Draw(rt, "len")
				if room := u128.Max().Sub(lo); room.Less(u128.From64(n)) {
					n = room.Lo // a range that ends at the last value, not past it
				}
				hi := lo.Add64(n).Sub64(rapid.Uint64Range(0, 1).Draw(rt, "empty"))
				var want u128.U128
				for x := lo; !hi.Less(x); x = x.Inc() {
					if !m[x] {
						want = want.Inc()
					}
					m[x] = true
					if x == hi {
						break
					}
				}
				if got := s.AddRange(lo, hi); got != want {
					rt.Fatalf("AddRange(%v, %v) = %v, want %v", lo, hi, got, want)
				}
			},
			"RemoveRange": func(rt *rapid.T) {
				lo, hi := val.Draw(rt, "lo"), val.Draw(rt, "hi")
				var want u128.U128
				for x := range m {
					if !x.Less(lo) && !hi.Less(x) {
						want = want.Inc()
						delete(m, x)
					}
				}
				if got := s.RemoveRange(lo, hi); got != want {
					rt.Fatalf("RemoveRange(%v, %v) = %v, want %v", lo, hi, got, want)
				}
			},
			"Reset": func(rt *rapid.T) {
				xs := rapid.SliceOfN(val, 0, 60).Draw(rt, "xs")
				m = model{}
				for _, x := range xs {
					m[x] = true
				}
				if err := s.Reset(m.sorted()); err != nil {
					rt.Fatal(err)
				}
			},
			"ResetUnsorted": func(rt *rapid.T) {
				if len(m) < 2 {
					return
				}
				xs := m.sorted()
				xs[0], xs[1] = xs[1], xs[0]
				if err := s.Reset(xs); err != ErrNotSorted {
					rt.Fatalf("Reset of unsorted values: %v", err)
				}
			},
			// Ranges' loop body may change the set: removing each value
			// as it is yielded must empty the range.
			"RemoveWhileRanging": func(rt *rapid.T) {
				lo, hi := val.Draw(rt, "lo"), val.Draw(rt, "hi")
				for a, b := range s.Ranges(lo, hi) {
					s.RemoveRange(a, b)
				}
				for x := range m {
					if !x.Less(lo) && !hi.Less(x) {
						delete(m, x)
					}
				}
			},
			"": func(rt *rapid.T) {
				if err := s.check(m); err != nil {
					rt.Fatal(err)
				}
				lo, hi := val.Draw(rt, "lo"), val.Draw(rt, "hi")
				var got [][2]u128.U128
				for a, b := range s.Ranges(lo, hi) {
					got = append(got, [2]u128.U128{a, b})
				}
				if want := m.runs(lo, hi); !slices.Equal(got, want) {
					rt.Fatalf("Ranges(%v, %v) = %v, want %v", lo, hi, got, want)
				}
				var n u128.U128
				for _, r := range got {
					n = n.Add(r[1].Sub(r[0]).Inc())
				}
				if c := s.Count(lo, hi); c != n {
					rt.Fatalf("Count(%v, %v) = %v, want %v", lo, hi, c, n)
				}
				x, ok := s.NextFree(lo, hi)
				want, wantOK := lo, false
				for y := lo; !hi.Less(y); y = y.Inc() {
					if !m[y] {
						want, wantOK = y, true
						break
					}
					if y == hi {
						break
					}
				}
				if ok != wantOK || ok && x != want {
					rt.Fatalf("NextFree(%v, %v) = %v, %v; want %v, %v", lo, hi, x, ok, want, wantOK)
				}
			},
		})
	})
}

// TestSinglesGoToTheTableAndRunsToTheRunSet checks where values land in
// the common cases: spread addresses of a zone in its table, two
// neighbours together in the run set, and a single that gains a
// neighbour moved there too.
func TestSinglesGoToTheTableAndRunsToTheRunSet(t *testing.T) {
	s := Index{fromN: 1}
	s.SetZones([][2]u128.U128{{v(5, 0), v(5, ^uint64(0))}})
	// Spread over the /64 at every moment, as random ones are: a table's
	// homes are its values' top bits, and values crowded into a corner of
	// the zone would be refused.
	const step = 1<<64/1000 - 1
	for j := range uint64(1000) {
		s.Add(v(5, j*337%1000*step))
	}
	if s.runs.Runs() != 0 || s.zones[0].t.n != 1000 {
		t.Fatalf("1000 spread: %d in the run set, %d in the table", s.runs.Runs(), s.zones[0].t.n)
	}
	s.Add(v(5, step+1)) // next to step
	if s.runs.Runs() != 1 || s.zones[0].t.n != 999 {
		t.Fatalf("after a neighbour: %d runs, %d in the table", s.runs.Runs(), s.zones[0].t.n)
	}
	if x, ok := s.NextFree(v(5, step), v(5, ^uint64(0))); !ok || x != v(5, step+2) {
		t.Fatalf("NextFree after the run: %v %v", x, ok)
	}
	// The zone's last value is past what a table holds: it is kept, alone,
	// in the run set.
	if !s.Add(v(5, ^uint64(0))) || !s.Contains(v(5, ^uint64(0))) || s.runs.Runs() != 2 {
		t.Fatalf("last value of the zone: %d runs", s.runs.Runs())
	}
	// Dropping the zone keeps its singles where they are; naming a zone
	// around it moves them into the new zone's table.
	s.SetZones(nil)
	if len(s.zones) != 1 || s.zones[0].wanted {
		t.Fatalf("after SetZones(nil): %d zones", len(s.zones))
	}
	s.SetZones([][2]u128.U128{{v(5, 0), v(5, ^uint64(0))}})
	if len(s.zones) != 1 || !s.zones[0].wanted || s.zones[0].t.n != 999 {
		t.Fatalf("zone named again: %d zones", len(s.zones))
	}
	if err := s.check(s.model()); err != nil {
		t.Fatal(err)
	}
}

// TestWideZonesHoldSpreadSingles: a zone of 2^80 values (an IPv6 /48)
// keeps spread singles in its table too, as a top and a low part.
func TestWideZonesHoldSpreadSingles(t *testing.T) {
	s := Index{fromN: 1}
	lo := v(0x20010db8_00000000, 0)
	s.SetZones([][2]u128.U128{{lo, lo.Add(u128.Max().Rsh(128 - 80))}})
	const step = 1<<64/1000 - 1
	for j := range uint64(1000) {
		// Spread over the zone's 2^16 /64s and within each.
		x := lo.Add(u128.U128{Hi: j * 337 % 1000 * 65, Lo: j * 337 % 1000 * step})
		if !s.Add(x) {
			t.Fatalf("Add(%v) = false", x)
		}
	}
	if s.runs.Runs() != 0 || s.zones[0].t.n != 1000 || s.zones[0].t.lows == nil {
		t.Fatalf("1000 spread in a /48: %d in the run set, %d in the table", s.runs.Runs(), s.zones[0].t.n)
	}
	if err := s.check(s.model()); err != nil {
		t.Fatal(err)
	}
	// Counting and listing read the table in order, across /64s.
	if n := s.Count(lo, lo.Add(u128.U128{Hi: 500 * 65})); n != u128.From64(500) { // the 500th is just past
		t.Fatalf("Count of the lower half = %v", n)
	}
}
