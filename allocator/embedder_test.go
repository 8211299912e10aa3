package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go4.org/netipx"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// pastTheBand and wrapsAround break Strategy's contract: a start of n+1,
// and of 2^128-1 (which, added to the band's start, wraps below it).
type pastTheBand struct{}

func (pastTheBand) Start(n cidrset.Count) cidrset.Count { return n.Add(cidrset.CountOf(1)) }

type wrapsAround struct{}

func (wrapsAround) Start(cidrset.Count) cidrset.Count {
	return cidrset.Count{Hi: ^uint64(0), Lo: ^uint64(0)}
}

// remote hides memory's Locked methods: the allocator's general path.
type remote struct{ store.Store }

// SPEC §3: dynamic allocation takes the upper band while it has room, and
// never leaves the CIDR, whatever start a Strategy of the embedder's says.
func TestAStrategyStartingPastTheBandStaysInIt(t *testing.T) {
	ctx := context.Background()
	for _, locked := range []bool{true, false} {
		t.Run(fmt.Sprint("locked=", locked), func(t *testing.T) {
			newAlloc := func(opts ...allocator.Option) *allocator.Allocator {
				var st store.Store = memory.New()
				if !locked {
					st = remote{st}
				}
				a, err := allocator.New(ctx, st, opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { a.Close() })
				return a
			}
			a := newAlloc(allocator.WithStrategy(wrapsAround{}))
			if _, err := a.CreateCIDR(ctx, "c", pfx("10.0.0.0/24")); err != nil {
				t.Fatal(err)
			}
			upper := netipx.IPRangeFrom(ip("10.0.0.17"), ip("10.0.0.254"))
			if x := mustNext(t, a, ipaddress.IPv4, "a"); !upper.Contains(x) {
				t.Errorf("a start wrapping below the band: %s, want one of the upper band %s", x, upper)
			}
			// A large (sparse) IPv6 pool whose upper band is excluded: the
			// search falls to the lower band, and must stay in it.
			b := newAlloc(allocator.WithStrategy(pastTheBand{}), allocator.WithExcluded(netipx.IPRangeFrom(ip("fd00::101"), ip("fd00::fff:ffff"))))
			if _, err := b.CreateCIDR(ctx, "v6", pfx("fd00::/100")); err != nil {
				t.Fatal(err)
			}
			if x := mustNext(t, b, ipaddress.IPv6, "b"); !cidrset.HostContains(pfx("fd00::/100"), x) {
				t.Errorf("a start past the band: %s, outside fd00::/100", x)
			}
		})
	}
}

// A Policy of the embedder's that drops candidates (repeating others, or
// zeroing them) must not make the allocator report "range is full" while a
// live CIDR has room.
func TestAPolicyThatDropsCandidatesDoesNotHideRoom(t *testing.T) {
	for name, p := range map[string]allocator.PolicyFunc{
		"repeats the first": func(c []allocator.Candidate) {
			for i := range c {
				c[i] = c[0]
			}
		},
		"zeroes all": func(c []allocator.Candidate) { clear(c) },
	} {
		t.Run(name, func(t *testing.T) {
			a, _ := newAllocator(t, []string{"small=10.0.0.0/30", "big=10.1.0.0/28"}, allocator.WithPolicy(p))
			mustNext(t, a, ipaddress.IPv4, "a")
			mustNext(t, a, ipaddress.IPv4, "b") // the oldest, a /30, is full
			if _, err := a.AllocateNext(context.Background(), ipaddress.IPv4, svc("c")); err != nil {
				t.Fatalf("AllocateNext with 10.1.0.0/28 empty: %v", err)
			}
			for range 13 {
				mustNext(t, a, ipaddress.IPv4, "fill")
			}
			if _, err := a.AllocateNext(context.Background(), ipaddress.IPv4, svc("d")); !errors.Is(err, allocator.ErrFull) {
				t.Fatalf("AllocateNext with both full: %v, want ErrFull", err)
			}
		})
	}
}

// OldestFirst (SPEC §3's default order) ranks a prefix that several CIDRs
// share by the oldest of them, not by the first name.
func TestOldestFirstRanksASharedPrefixByItsOldestCIDR(t *testing.T) {
	a, _ := newAllocator(t, []string{"z=10.0.0.0/28", "m=10.1.0.0/28", "a=10.0.0.0/28"}, allocator.WithStrategy(allocator.Sequential()))
	if x := mustNext(t, a, ipaddress.IPv4, "x"); !pfx("10.0.0.0/28").Contains(x) {
		t.Fatalf("AllocateNext = %s; z, 10.0.0.0/28, is the oldest CIDR and empty", x)
	}
}

// MostFree chooses by the free addresses Usage reports: excluded ones are
// not free.
func TestMostFreeDoesNotCountExcludedAddressesAsFree(t *testing.T) {
	excluded := netipx.IPRangeFrom(ip("10.0.0.17"), ip("10.0.0.250")) // 234 of a's 254
	a, _ := newAllocator(t, []string{"a=10.0.0.0/24", "b=10.1.0.0/25"}, allocator.WithPolicy(allocator.MostFree()), allocator.WithExcluded(excluded))
	ua, _ := a.Usage("a")
	ub, _ := a.Usage("b")
	if x := mustNext(t, a, ipaddress.IPv4, "x"); !pfx("10.1.0.0/25").Contains(x) {
		t.Fatalf("MostFree chose %s, in a (%s free), over b (%s free)", x, ua.Prefixes[0].Free, ub.Prefixes[0].Free)
	}
}
