package allocator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"go4.org/netipx"
	"pgregory.net/rapid"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/internal/u128"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/memory"
)

// scriptedStart answers Start with the offsets it holds, in turn (0 once
// they run out), and records the band sizes it was asked for.
type scriptedStart struct {
	offsets []cidrset.Count
	asked   []cidrset.Count
}

func (s *scriptedStart) Start(n cidrset.Count) cidrset.Count {
	s.asked = append(s.asked, n)
	if len(s.offsets) == 0 {
		return cidrset.Count{}
	}
	off := s.offsets[0]
	s.offsets = s.offsets[1:]
	return off
}

// TestPoolSearchFollowsTheBandsAndTheStart checks nextInPoolLocked, on
// dense pools with and without a lower band, against a scan: the upper
// band from the strategy's start (taken modulo the band when it is past
// it), wrapping around, then the lower band the same way; an address is
// free when it is neither used, excluded, pending nor skipped. With
// nothing excluded, pending or skipped it is the bitmap-only path; with
// any of them, the general one.
func TestPoolSearchFollowsTheBandsAndTheStart(t *testing.T) {
	prefixes := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("10.0.0.0/27"),
		netip.MustParsePrefix("10.0.0.0/28"), netip.MustParsePrefix("10.0.0.0/30"),
		netip.MustParsePrefix("fd00::8/127"), netip.MustParsePrefix("fd00::/120"),
		netip.MustParsePrefix("fd00::/123"),
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "x"}
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		p := rapid.SampledFrom(prefixes).Draw(rt, "prefix")
		lower, upper, hasLower, ok := cidrset.Bands(p)
		if !ok {
			rt.Fatalf("no bands for %s", p)
		}
		is4 := p.Addr().Is4()
		first := upper.From()
		if hasLower {
			first = lower.From()
		}
		size := int(u128.FromAddr(upper.To()).Sub(u128.FromAddr(first)).Lo) + 1
		at := func(i int) netip.Addr { return u128.FromAddr(first).Add64(uint64(i)).Addr(is4) }
		offsetOf := rapid.IntRange(0, size-1)

		strategy := &scriptedStart{}
		var opts []Option
		var excluded netipx.IPRange
		// Without anything excluded, pending or skipped, the bitmap-only
		// path serves: half the cases.
		extras := rapid.Bool().Draw(rt, "extras")
		if extras && rapid.Bool().Draw(rt, "excluded") {
			from := offsetOf.Draw(rt, "excludedFrom")
			to := rapid.IntRange(from, size-1).Draw(rt, "excludedTo")
			excluded = netipx.IPRangeFrom(at(from), at(to))
			opts = append(opts, WithExcluded(excluded))
		}
		st := memory.New()
		a, err := New(ctx, st, append(opts, WithStrategy(strategy))...)
		if err != nil {
			rt.Fatal(err)
		}
		defer a.Close()
		if _, err := a.CreateCIDR(ctx, "c", p); err != nil {
			rt.Fatal(err)
		}
		used := map[netip.Addr]bool{}
		mark := func(x netip.Addr) {
			if !used[x] {
				used[x] = true
				if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: x, Parent: owner}}); err != nil {
					rt.Fatal(err)
				}
			}
		}
		if hasLower && rapid.Bool().Draw(rt, "upperFull") {
			for x := upper.From(); ; x = x.Next() {
				mark(x)
				if x == upper.To() {
					break
				}
			}
		}
		tailFrom := size // the top of the range, all used from there
		if rapid.Bool().Draw(rt, "tailUsed") {
			tailFrom = offsetOf.Draw(rt, "tailFrom")
			for i := tailFrom; i < size; i++ {
				mark(at(i))
			}
		}
		for _, i := range rapid.SliceOfN(offsetOf, 0, size).Draw(rt, "used") {
			mark(at(i))
		}
		var pending, skip []netip.Addr
		if extras {
			for _, i := range rapid.SliceOfN(offsetOf, 0, 3).Draw(rt, "pending") {
				pending = append(pending, at(i))
			}
			for _, i := range rapid.SliceOfN(offsetOf, 0, 3).Draw(rt, "skip") {
				skip = append(skip, at(i))
			}
		}
		offsetDraw := rapid.OneOf(
			rapid.Custom(func(rt *rapid.T) cidrset.Count { return cidrset.CountOf(uint64(offsetOf.Draw(rt, "offset"))) }),
			// Past the band: taken modulo its size.
			rapid.Custom(func(rt *rapid.T) cidrset.Count {
				return cidrset.Count{Hi: rapid.Uint64Max(3).Draw(rt, "offsetHi"), Lo: rapid.Uint64().Draw(rt, "offsetLo")}
			}),
		)
		offsets := []cidrset.Count{offsetDraw.Draw(rt, "upperOffset"), offsetDraw.Draw(rt, "lowerOffset")}
		if upperAt := size - int(u128.FromAddr(upper.To()).Sub(u128.FromAddr(upper.From())).Lo) - 1; tailFrom > upperAt && tailFrom < size {
			// A start in the used top of the upper band, which must wrap.
			offsets[0] = cidrset.CountOf(uint64(rapid.IntRange(tailFrom, size-1).Draw(rt, "tailStart") - upperAt))
		}
		strategy.offsets = slices.Clone(offsets)

		a.mu.Lock()
		a.pending = append(a.pending, pending...)
		got, found := a.nextInPoolLocked(a.pools[p], skip)
		// The whole choice, with its shortcut for the oldest pool, finds
		// the same address from the same starts (and asks Start the same,
		// which the checks below see).
		strategy.offsets, strategy.asked = slices.Clone(offsets), nil
		var c choice
		chooseErr := a.chooseNextLocked(ipaddress.FamilyOf(p.Addr()), skip, &c)
		a.pending = a.pending[:0]
		a.mu.Unlock()
		if found && (chooseErr != nil || c.addr != got.Addr(is4)) || !found && !errors.Is(chooseErr, ErrFull) {
			rt.Fatalf("chooseNextLocked = %s, %v; nextInPoolLocked %s, %v", c.addr, chooseErr, got.Addr(is4), found)
		}

		free := func(x netip.Addr) bool {
			return !used[x] && !(excluded.IsValid() && excluded.Contains(x)) && !slices.Contains(pending, x) && !slices.Contains(skip, x)
		}
		bands := []netipx.IPRange{upper}
		if hasLower {
			bands = append(bands, lower)
		}
		var want netip.Addr
		for k, band := range bands {
			from := u128.FromAddr(band.From())
			n := u128.FromAddr(band.To()).Sub(from).Lo + 1
			if k < len(strategy.asked) && strategy.asked[k] != cidrset.CountOf(n) {
				rt.Fatalf("Start asked for a band of %v, want %d (band %d)", strategy.asked[k], n, k)
			}
			off := u128.U128(offsets[k]).Mod64(n)
			for i := range n {
				if x := from.Add64((off + i) % n).Addr(is4); free(x) {
					want = x
					break
				}
			}
			if want.IsValid() {
				if len(strategy.asked) != k+1 {
					rt.Fatalf("Start asked %d times, want %d", len(strategy.asked), k+1)
				}
				break
			}
		}
		switch {
		case found != want.IsValid():
			rt.Fatalf("found %v (%s), want %s", found, got.Addr(is4), want)
		case found && got.Addr(is4) != want:
			rt.Fatalf("got %s, want %s", got.Addr(is4), want)
		}
	})
}

// TestHugePoolSearchFollowsTheBandsAndTheStart is
// TestPoolSearchFollowsTheBandsAndTheStart for pools without a bitmap
// (IPv6 /64, /48, /103), alone (nextInSparseLocked's shortcut, over the
// sparse set) or holding a dense pool (the general path), with or without
// something to step over. Such a pool cannot be filled through the store,
// so besides a few addresses put there, whole runs (a full band, the top
// of one) are written into the sparse set directly and counted. The
// strategy's starts land near the used addresses and the bands' edges.
func TestHugePoolSearchFollowsTheBandsAndTheStart(t *testing.T) {
	prefixes := []netip.Prefix{
		netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("fd00::/48"),
		netip.MustParsePrefix("fd00::/103"),
	}
	// Held by the prefixes above, and dense.
	nested := netip.MustParsePrefix("fd00::100/120")
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "x"}
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		p := rapid.SampledFrom(prefixes).Draw(rt, "prefix")
		lowerR, upperR, hasLower, ok := cidrset.Bands(p)
		if !ok || !hasLower {
			rt.Fatalf("no lower band for %s", p)
		}
		first, lowerLast := u128.FromAddr(lowerR.From()), u128.FromAddr(lowerR.To())
		upperFirst, last := u128.FromAddr(upperR.From()), u128.FromAddr(upperR.To())
		bands := [][2]u128.U128{{upperFirst, last}, {first, lowerLast}}
		// Near the edges of the bands and of the nested pool.
		anchors := []u128.U128{first, lowerLast, upperFirst, last, u128.FromAddr(nested.Addr()), u128.FromAddr(netipx.PrefixLastIP(nested))}
		clamp := func(x u128.U128) u128.U128 { return u128.Min(u128.MaxOf(x, first), last) }
		near := rapid.Custom(func(rt *rapid.T) u128.U128 {
			x := rapid.SampledFrom(anchors).Draw(rt, "anchor")
			if d := rapid.IntRange(-3, 3).Draw(rt, "delta"); d < 0 {
				x = x.Sub(u128.From64(uint64(-d)))
			} else {
				x = x.Add64(uint64(d))
			}
			return clamp(x)
		})

		// An offset near an anchor, near either end of the band, or past
		// the band (taken modulo its size).
		offsetDraw := func(band [2]u128.U128, label string) cidrset.Count {
			n := band[1].Sub(band[0]).Inc()
			switch rapid.IntRange(0, 3).Draw(rt, label+"Kind") {
			case 0:
				if x := near.Draw(rt, label+"Near"); !x.Less(band[0]) && !band[1].Less(x) {
					return cidrset.Count(x.Sub(band[0]))
				}
				return cidrset.Count{}
			case 1:
				return cidrset.CountOf(uint64(rapid.IntRange(0, 3).Draw(rt, label+"Low")))
			case 2:
				return cidrset.Count(n.Sub(u128.From64(uint64(rapid.IntRange(1, 4).Draw(rt, label+"High")))))
			}
			return cidrset.Count(n.Add64(uint64(rapid.IntRange(0, 5).Draw(rt, label+"Past"))))
		}
		offsets := []cidrset.Count{offsetDraw(bands[0], "upper"), offsetDraw(bands[1], "lower")}
		// Where the upper band's search starts: what is in the way there
		// must be stepped over.
		upperStart := bands[0][0].Add(u128.U128(offsets[0]).Mod(bands[0][1].Sub(bands[0][0]).Inc()))
		nearStart := rapid.OneOf(near, rapid.Just(upperStart))

		strategy := &scriptedStart{}
		opts := []Option{WithStrategy(strategy)}
		var excluded netipx.IPRange
		extras := rapid.Bool().Draw(rt, "extras")
		if extras && rapid.Bool().Draw(rt, "excluded") {
			from := nearStart.Draw(rt, "excludedFrom")
			to := clamp(from.Add64(uint64(rapid.IntRange(0, 3).Draw(rt, "excludedLen"))))
			excluded = netipx.IPRangeFrom(from.Addr(false), to.Addr(false))
			opts = append(opts, WithExcluded(excluded))
		}
		st := memory.New()
		a, err := New(ctx, st, opts...)
		if err != nil {
			rt.Fatal(err)
		}
		defer a.Close()
		if _, err := a.CreateCIDR(ctx, "c", p); err != nil {
			rt.Fatal(err)
		}
		withNested := rapid.Bool().Draw(rt, "nested")
		if withNested { // created later: c stays the oldest
			if _, err := a.CreateCIDR(ctx, "d", nested); err != nil {
				rt.Fatal(err)
			}
		}
		var used [][2]u128.U128 // runs, possibly overlapping
		put := func(x u128.U128) {
			if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: x.Addr(false), Parent: owner}}); err == nil {
				used = append(used, [2]u128.U128{x, x})
			}
		}
		for _, x := range rapid.SliceOfN(near, 0, 12).Draw(rt, "used") {
			put(x)
		}
		if withNested && rapid.Bool().Draw(rt, "nestedFull") {
			// The nested pool's bitmap, not the sparse set, says these
			// are used: a search of the sparse set alone would offer them.
			for x := anchors[4]; !anchors[5].Less(x); x = x.Inc() {
				put(x)
			}
		}
		// Runs too long for the store; they would overlap the nested
		// pool, whose addresses its bitmap holds, not the sparse set.
		var runs [][2]u128.U128
		if !withNested {
			if rapid.Bool().Draw(rt, "upperFull") {
				runs = append(runs, bands[0])
			}
			if rapid.Bool().Draw(rt, "lowerFull") {
				runs = append(runs, bands[1])
			}
			if rapid.Bool().Draw(rt, "upperTop") {
				runs = append(runs, [2]u128.U128{near.Draw(rt, "upperTopFrom"), last})
			}
		}
		used = append(used, runs...)
		a.mu.Lock()
		pl := a.pools[p]
		for _, r := range runs {
			a.sparse[1].AddRange(r[0], r[1])
		}
		a.countLocked(pl)
		a.remarkOpenLocked(1)
		if pl.alone == withNested {
			a.mu.Unlock()
			rt.Fatalf("pool %s alone = %v with a nested pool %v", p, pl.alone, withNested)
		}
		a.mu.Unlock()

		var pending, skip []netip.Addr
		if extras {
			for _, x := range rapid.SliceOfN(nearStart, 0, 3).Draw(rt, "pending") {
				pending = append(pending, x.Addr(false))
			}
			for _, x := range rapid.SliceOfN(nearStart, 0, 3).Draw(rt, "skip") {
				skip = append(skip, x.Addr(false))
			}
			if rapid.Bool().Draw(rt, "startPending") {
				pending = append(pending, upperStart.Addr(false))
			} else if rapid.Bool().Draw(rt, "startSkipped") {
				skip = append(skip, upperStart.Addr(false))
			}
		}

		strategy.offsets, strategy.asked = slices.Clone(offsets), nil
		a.mu.Lock()
		a.pending = append(a.pending, pending...)
		got, found := a.nextInPoolLocked(pl, skip)
		strategy.offsets, strategy.asked = slices.Clone(offsets), nil
		var c choice
		chooseErr := a.chooseNextLocked(ipaddress.IPv6, skip, &c)
		a.pending = a.pending[:0]
		a.mu.Unlock()
		if found && (chooseErr != nil || c.addr != got.Addr(false)) || !found && !errors.Is(chooseErr, ErrFull) {
			rt.Fatalf("chooseNextLocked = %s, %v; nextInPoolLocked %s, %v", c.addr, chooseErr, got.Addr(false), found)
		}

		// firstFree scans [from, to] a run at a time.
		firstFree := func(from, to u128.U128) (u128.U128, bool) {
			for x := from; ; {
				next, moved := x, false
				for _, r := range used {
					if !x.Less(r[0]) && !r[1].Less(x) {
						next, moved = r[1], true
					}
				}
				if !moved && excluded.IsValid() && excluded.Contains(x.Addr(false)) {
					next, moved = u128.FromAddr(excluded.To()), true
				}
				if !moved && (slices.Contains(pending, x.Addr(false)) || slices.Contains(skip, x.Addr(false))) {
					moved = true
				}
				if !moved {
					return x, true
				}
				if !next.Less(to) {
					return u128.U128{}, false
				}
				x = next.Inc()
			}
		}
		var want u128.U128
		var wantFound bool
		for k, band := range bands {
			n := band[1].Sub(band[0]).Inc()
			if k < len(strategy.asked) && strategy.asked[k] != cidrset.Count(n) {
				rt.Fatalf("Start asked for a band of %v, want %v (band %d)", strategy.asked[k], n, k)
			}
			start := band[0].Add(u128.U128(offsets[k]).Mod(n))
			want, wantFound = firstFree(start, band[1])
			if !wantFound && start != band[0] {
				want, wantFound = firstFree(band[0], start.Dec())
			}
			if wantFound {
				if len(strategy.asked) != k+1 {
					rt.Fatalf("Start asked %d times, want %d", len(strategy.asked), k+1)
				}
				break
			}
		}
		switch {
		case found != wantFound:
			rt.Fatalf("found %v (%s), want %v (%s)", found, got.Addr(false), wantFound, want.Addr(false))
		case found && got != want:
			rt.Fatalf("got %s, want %s", got.Addr(false), want.Addr(false))
		}
	})
}

// The cases of TestHugePoolSearchFollowsTheBandsAndTheStart that a
// shortcut of an IPv6 /64 pool (no bitmap) could get wrong, each once:
// the first address of the upper band, where the search starts, is in the
// way (pending, skipped, excluded, used in a nested dense pool), or the
// upper band is full, or the start is past its end, which must wrap.
func TestHugePoolSearchStepsOverWhatIsInTheWay(t *testing.T) {
	p := netip.MustParsePrefix("fd00::/64")
	at := func(s string) u128.U128 { return u128.FromAddr(netip.MustParseAddr(s)) }
	// fd00::1 to fd00::100 is the lower band, the upper one starts at
	// fd00::101.
	for _, tc := range []struct {
		name      string
		pending   bool // fd00::101 pending
		skip      bool // fd00::101 skipped
		excluded  bool // fd00::101 excluded
		nested    bool // fd00::100/120, dense, created later, all used
		upperFull bool
		upperTop  bool // fd00::101 and fd00::ffff:ffff:ffff:fff0 on used
		start     cidrset.Count
		want      string
	}{
		{name: "free", want: "fd00::101"},
		{name: "pending", pending: true, want: "fd00::102"},
		{name: "skipped", skip: true, want: "fd00::102"},
		{name: "excluded", excluded: true, want: "fd00::102"},
		{name: "nested", nested: true, want: "fd00::200"},
		{name: "upper band full", upperFull: true, want: "fd00::1"},
		{name: "wrap", upperTop: true, start: cidrset.Count(at("fd00::ffff:ffff:ffff:fff8").Sub(at("fd00::101"))), want: "fd00::102"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := memory.New()
			strategy := &scriptedStart{}
			opts := []Option{WithStrategy(strategy)}
			if tc.excluded {
				x := netip.MustParseAddr("fd00::101")
				opts = append(opts, WithExcluded(netipx.IPRangeFrom(x, x)))
			}
			a := newTestAllocator(t, st, opts...)
			if _, err := a.CreateCIDR(ctx, "c", p); err != nil {
				t.Fatal(err)
			}
			owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "x"}
			if tc.nested {
				if _, err := a.CreateCIDR(ctx, "d", netip.MustParsePrefix("fd00::100/120")); err != nil {
					t.Fatal(err)
				}
				for x := at("fd00::100"); !at("fd00::1ff").Less(x); x = x.Inc() {
					if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: x.Addr(false), Parent: owner}}); err != nil {
						t.Fatal(err)
					}
				}
			}
			var skip []netip.Addr
			a.mu.Lock()
			defer a.mu.Unlock()
			pl := a.pools[p]
			switch {
			case tc.upperFull:
				a.sparse[1].AddRange(pl.upperFirst, pl.last)
			case tc.upperTop:
				a.sparse[1].Add(at("fd00::101"))
				a.sparse[1].AddRange(at("fd00::ffff:ffff:ffff:fff0"), pl.last)
			}
			a.countLocked(pl)
			a.remarkOpenLocked(1)
			if tc.pending {
				a.pending = append(a.pending, netip.MustParseAddr("fd00::101"))
			}
			if tc.skip {
				skip = append(skip, netip.MustParseAddr("fd00::101"))
			}
			strategy.offsets = []cidrset.Count{tc.start}
			got, ok := a.nextInPoolLocked(pl, skip)
			if !ok || got.Addr(false).String() != tc.want {
				t.Errorf("nextInPoolLocked = %s, %v; want %s", got.Addr(false), ok, tc.want)
			}
			strategy.offsets = []cidrset.Count{tc.start}
			var c choice
			if err := a.chooseNextLocked(ipaddress.IPv6, skip, &c); err != nil || c.addr.String() != tc.want {
				t.Errorf("chooseNextLocked = %s, %v; want %s", c.addr, err, tc.want)
			}
		})
	}
}

// A large sparse pool is where the allocator has the store prefetch what
// the create will read (store.Prefetcher). The hints must change nothing:
// every address still has one owner, and the owner index finds each one.
// 200k scattered addresses put the pool past prefetchFrom and the memory
// store's tables past the size from which it prefetches.
func TestAnAddressHasOneOwnerInAPoolTheStorePrefetchesFor(t *testing.T) {
	ctx := context.Background()
	p := netip.MustParsePrefix("fd00::/64")
	st := memory.New()
	a := newTestAllocator(t, st, WithStrategy(RandomStart(rand.NewPCG(1, 2))))
	if _, err := a.CreateCIDR(ctx, "c", p); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	held := map[netip.Addr]ipaddress.ParentRef{}
	const filled, batch = 200_000, 10_000
	for len(held) < filled {
		recs := make([]ipaddress.IPAddress, 0, batch)
		for len(recs) < batch {
			x := u128.FromAddr(p.Addr()).Add(u128.U128{Lo: 1<<32 + rng.Uint64()>>1})
			if _, ok := held[x.Addr(false)]; ok {
				continue
			}
			owner := ipaddress.ParentRef{Resource: "services", Namespace: "fill", Name: fmt.Sprintf("s-%d", len(held))}
			held[x.Addr(false)] = owner
			recs = append(recs, ipaddress.IPAddress{Addr: x.Addr(false), Parent: owner})
		}
		if _, err := st.CreateAddresses(ctx, recs); err != nil {
			t.Fatal(err)
		}
	}
	a.mu.Lock()
	prefetches := a.prefetchesLocked(ipaddress.IPv6)
	a.mu.Unlock()
	if !prefetches {
		t.Fatal("a pool of 200k addresses over the memory store: no prefetch")
	}
	var mine []netip.Addr
	for i := range 2_000 {
		owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprintf("svc-%05d", i)}
		r, err := a.AllocateNext(ctx, ipaddress.IPv6, owner)
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := held[r.Addr]; ok {
			t.Fatalf("%s given to %v, held by %v", r.Addr, owner, prev)
		}
		held[r.Addr] = owner
		got, err := a.AddressesOf(ctx, owner)
		if err != nil || len(got) != 1 || got[0].Addr != r.Addr {
			t.Fatalf("AddressesOf(%v) = %v, %v; want %s", owner, got, err, r.Addr)
		}
		mine = append(mine, r.Addr)
		if i%2 == 1 { // release every other: the pool churns
			x := mine[rng.IntN(len(mine))]
			if err := a.Release(ctx, x); err != nil {
				t.Fatal(err)
			}
			owner := held[x]
			delete(held, x)
			mine = slices.DeleteFunc(mine, func(y netip.Addr) bool { return y == x })
			if got, err := a.AddressesOf(ctx, owner); err != nil || len(got) != 0 {
				t.Fatalf("AddressesOf(%v) after its release = %v, %v", owner, got, err)
			}
		}
	}
	recs, err := st.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != len(held) {
		t.Fatalf("the store holds %d addresses, want %d", len(recs), len(held))
	}
	for _, r := range recs {
		if owner, ok := held[r.Addr]; !ok || r.Parent != owner {
			t.Fatalf("the store holds %s for %v; given to %v (%v)", r.Addr, r.Parent, owner, ok)
		}
	}
}
