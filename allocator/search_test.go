package allocator

import (
	"context"
	"errors"
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
