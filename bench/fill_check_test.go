package bench

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/cidrset"
)

// usedBy reports how many addresses impl a holds, read from the
// implementation itself (not from what the fixture asked for).
func usedBy(tb testing.TB, a Allocator) int {
	tb.Helper()
	switch x := a.(type) {
	case *Netipam:
		u, err := x.Alloc.Usage(CIDRName)
		if err != nil {
			tb.Fatal(err)
		}
		recs, err := x.Store.ListAddresses(context.Background())
		if err != nil {
			tb.Fatal(err)
		}
		if u.Prefixes[0].Used != cidrset.CountOf(uint64(len(recs))) {
			tb.Fatalf("netipam index says %v used, store holds %d records", u.Prefixes[0].Used, len(recs))
		}
		return len(recs)
	case *Bitmap:
		return x.R.Used()
	case *IPAddress:
		return x.A.Used()
	case *Floor:
		return int(x.bits.Count())
	case *FloorIndexed:
		indexed := 0
		for _, slot := range x.byRef {
			indexed += len(x.slots[slot].offs)
		}
		if n := int(x.bits.Count()); n != indexed {
			tb.Fatalf("floor-indexed: %d addresses used, %d in its owner index", n, indexed)
		}
		return indexed
	}
	tb.Fatalf("unknown implementation %T", a)
	return 0
}

// BenchmarkFixturesReachTheirFill walks the fill levels exactly as
// BenchmarkAllocRelease does (one cached fixture extended fill after fill,
// some alloc+release cycles in between) and checks that every
// implementation really holds FillCount addresses, and, at the high fill
// levels, that exactly Usable-FillCount addresses are left free.
// A benchmark, not a test, because the fixtures are built by fixture, a
// *testing.B helper; CI runs it once with the others.
// Run: go test -run '^$' -bench FixturesReachTheirFill -benchtime 1x
func BenchmarkFixturesReachTheirFill(b *testing.B) {
	defer dropFixture()
	cases := []struct {
		impl     string
		prefixes []netip.Prefix
	}{
		{ImplNetipam, []netip.Prefix{p20, p16, p112}},
		{ImplNetipamSeq, []netip.Prefix{p20, p16, p112}},
		{ImplBitmap, []netip.Prefix{p20, p16, p112}},
		{ImplFloor, []netip.Prefix{p16}},
		{ImplFloorIndexed, []netip.Prefix{p16}},
		{ImplIPAddress, []netip.Prefix{p20}},
	}
	for _, c := range cases {
		for _, p := range c.prefixes {
			b.Run(fmt.Sprintf("impl=%s/prefix=%d", c.impl, p.Bits()), func(b *testing.B) {
				for _, pct := range fills {
					want := FillCount(p, pct)
					a := fixture(b, fixtureKey{impl: c.impl, prefix: p}, want)
					for range 20 { // what the previous fill level's benchmark did
						x, err := a.AllocateNext()
						if err != nil {
							b.Fatalf("fill %v: %v", pct, err)
						}
						if err := a.Release(x); err != nil {
							b.Fatal(err)
						}
					}
					if got := usedBy(b, a); got != want {
						b.Errorf("fill %v%%: implementation holds %d addresses, want %d", pct, got, want)
					}
					if pct < 99 {
						continue
					}
					var got []netip.Addr
					for {
						x, err := a.AllocateNext()
						if err != nil {
							if !isFull(err) {
								b.Fatal(err)
							}
							break
						}
						got = append(got, x)
					}
					if free := Usable(p) - want; len(got) != free {
						b.Errorf("fill %v%%: %d addresses left free, want %d", pct, len(got), free)
					}
					for _, x := range got {
						if err := a.Release(x); err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}

// BenchmarkLargeFixturesHoldTheirCount checks that the /64 and /48 fixtures hold the
// number of addresses their names say (reduced count).
func BenchmarkLargeFixturesHoldTheirCount(b *testing.B) {
	defer dropFixture()
	for _, impl := range []string{ImplNetipam, ImplNetipamSeq} {
		for _, p := range []netip.Prefix{p64, p48} {
			for _, l := range []Layout{Packed, Random} {
				b.Run(fmt.Sprintf("impl=%s/prefix=%d/layout=%s", impl, p.Bits(), l), func(b *testing.B) {
					for _, n := range largeCounts() {
						a := fixture(b, fixtureKey{impl: impl, prefix: p, layout: l}, n)
						if got := usedBy(b, a); got != n {
							b.Errorf("used=%d: holds %d", n, got)
						}
					}
				})
			}
		}
	}
}
