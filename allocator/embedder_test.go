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

// An embedder's bad input gets a typed error, never a panic: New over no
// store at all is ErrInvalid, a *ipaddress.FieldError naming the store.
func TestNewRefusesANilStoreWithATypedError(t *testing.T) {
	a, err := allocator.New(context.Background(), nil)
	var fe *ipaddress.FieldError
	if a != nil || !errors.Is(err, allocator.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "store" {
		t.Fatalf("New(ctx, nil) = %v, %v; want nil and ErrInvalid for the field store", a, err)
	}
}

// Options left nil (a nil Option, a nil Admission, a nil PolicyFunc) are
// the defaults, as a nil Strategy, Policy, Observer or Logger are: an
// option list built conditionally must not make a later call panic.
func TestNilOptionsAreTheDefaults(t *testing.T) {
	ctx := context.Background()
	for name, opt := range map[string]allocator.Option{
		"nil Option":      nil,
		"nil Admission":   allocator.WithAdmission(nil),
		"nil PolicyFunc":  allocator.WithPolicy(allocator.PolicyFunc(nil)),
		"nil Policy":      allocator.WithPolicy(nil),
		"nil Strategy":    allocator.WithStrategy(nil),
		"nil Observer":    allocator.WithObserver(nil),
		"nil Logger":      allocator.WithLogger(nil),
		"nil exclusions":  allocator.WithExcluded(),
		"nil Admissions":  allocator.WithAdmission(),
		"nil and another": allocator.WithAdmission(nil, func(context.Context, *cidrset.CIDR, cidrset.CIDR) error { return nil }),
	} {
		t.Run(name, func(t *testing.T) {
			a, _ := newAllocator(t, []string{"old=10.0.0.0/30", "new=10.1.0.0/30"}, opt)
			if _, err := a.UpdateCIDR(ctx, "old", pfx("10.0.0.0/30"), pfx("fd00::/126")); err != nil {
				t.Fatalf("UpdateCIDR: %v", err)
			}
			// The default policy, oldest first, with two live CIDRs.
			for _, want := range []string{"10.0.0.0/30", "10.0.0.0/30", "10.1.0.0/30"} {
				if x := mustNext(t, a, ipaddress.IPv4, "x"); !pfx(want).Contains(x) {
					t.Fatalf("AllocateNext = %s, want one of %s", x, want)
				}
			}
		})
	}
}
