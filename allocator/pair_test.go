package allocator_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"go4.org/netipx"
	"pgregory.net/rapid"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// noPairs is a memory store that hides store.PairLocked (and
// store.Prefetcher): an allocator over it serves AllocateDualStack through
// CreateAddressesLocked, the general path.
type noPairs struct{ store.Locked }

// TestDualStackPairPathAnswersAsTheGeneralPath drives two allocators, one
// over a store.PairLocked store and one over the same store with the pair
// create hidden, through the same calls: dual-stack allocations (static,
// dynamic, taken, outside every CIDR, of the wrong family, for invalid
// owners, in full families and inside Terminating CIDRs, which the pair
// path hands over), single ones, releases and deletions. Every answer,
// error text included, and the two stores' records, revisions and CIDRs
// must be the same, under either deterministic policy and with excluded
// ranges or without: the pair path is a shortcut, not a second rule.
func TestDualStackPairPathAnswersAsTheGeneralPath(t *testing.T) {
	// Overlapping, dual-stack and single-stack; small, so that families
	// fill and deletions are blocked.
	cidrs := map[string][]netip.Prefix{
		"a": {pfx("10.0.0.0/29"), pfx("fd00::/125")},
		"b": {pfx("10.0.0.0/28")},
		"c": {pfx("fd00::8/125")},
		"d": {pfx("10.0.1.0/30"), pfx("fd00::1:0/126")},
	}
	v4s := []netip.Addr{{}, {}, ip("10.0.0.1"), ip("10.0.0.6"), ip("10.0.0.9"), ip("10.0.1.2"), ip("10.0.2.1"), ip("fd00::2"), ip("10.0.0.0")}
	v6s := []netip.Addr{{}, {}, ip("fd00::1"), ip("fd00::6"), ip("fd00::9"), ip("fd00::1:1"), ip("fd00::5:1"), ip("10.0.0.3"), ip("fd00::")}
	owners := []ipaddress.ParentRef{svc("x"), svc("y"), svc("z"), {Resource: "services", Name: "no-namespace"}, {}}
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		opts := []allocator.Option{allocator.WithStrategy(allocator.Sequential())}
		if rapid.Bool().Draw(rt, "mostFree") {
			opts = append(opts, allocator.WithPolicy(allocator.MostFree()))
		}
		if rapid.Bool().Draw(rt, "excluded") {
			// A pool holding excluded addresses takes the index's general
			// marking path.
			opts = append(opts, allocator.WithExcluded(netipx.IPRangeFrom(ip("10.0.0.2"), ip("10.0.0.3")), netipx.IPRangeFrom(ip("fd00::3"), ip("fd00::3"))))
		}
		pairSt, plainSt := memory.New(), memory.New()
		var as [2]*allocator.Allocator
		for i, st := range []store.Store{pairSt, noPairs{plainSt}} {
			a, err := allocator.New(ctx, st, opts...)
			if err != nil {
				rt.Fatal(err)
			}
			defer a.Close()
			as[i] = a
			for _, name := range slices.Sorted(func(yield func(string) bool) {
				for n := range cidrs {
					if !yield(n) {
						return
					}
				}
			}) {
				if _, err := a.CreateCIDR(ctx, name, cidrs[name]...); err != nil {
					rt.Fatal(err)
				}
			}
		}
		// both runs call on each allocator and fails unless the answers
		// read the same.
		both := func(rt *rapid.T, what string, call func(a *allocator.Allocator) string) {
			pair, plain := call(as[0]), call(as[1])
			if pair != plain {
				rt.Fatalf("%s:\npair path    %s\ngeneral path %s", what, pair, plain)
			}
		}
		answer := func(err error, recs ...ipaddress.IPAddress) string {
			s := fmt.Sprint(err)
			for _, r := range recs {
				s += fmt.Sprintf(" %s %v %d %t", r.Addr, r.Parent, r.Revision, r.Created.IsZero())
			}
			return s
		}
		rt.Repeat(map[string]func(*rapid.T){
			"AllocateDualStack": func(rt *rapid.T) {
				owner := rapid.SampledFrom(owners).Draw(rt, "owner")
				v4, v6 := rapid.SampledFrom(v4s).Draw(rt, "v4"), rapid.SampledFrom(v6s).Draw(rt, "v6")
				both(rt, fmt.Sprintf("AllocateDualStack(%v, %v, %v)", owner, v4, v6), func(a *allocator.Allocator) string {
					r4, r6, err := a.AllocateDualStack(ctx, owner, v4, v6)
					return answer(err, r4, r6)
				})
			},
			"Allocate": func(rt *rapid.T) {
				owner := rapid.SampledFrom(owners).Draw(rt, "owner")
				addr := rapid.SampledFrom(append(v4s[2:], v6s[2:]...)).Draw(rt, "addr")
				both(rt, fmt.Sprintf("Allocate(%v, %v)", addr, owner), func(a *allocator.Allocator) string {
					r, err := a.Allocate(ctx, addr, owner)
					return answer(err, r)
				})
			},
			"Release": func(rt *rapid.T) {
				addr := rapid.SampledFrom(append(v4s[2:], v6s[2:]...)).Draw(rt, "addr")
				both(rt, fmt.Sprintf("Release(%v)", addr), func(a *allocator.Allocator) string {
					return answer(a.Release(ctx, addr))
				})
			},
			"ReleaseOwner": func(rt *rapid.T) {
				owner := rapid.SampledFrom(owners[:3]).Draw(rt, "owner")
				both(rt, fmt.Sprintf("ReleaseOwner(%v)", owner), func(a *allocator.Allocator) string {
					freed, err := a.ReleaseOwner(ctx, owner)
					slices.SortFunc(freed, netip.Addr.Compare)
					return fmt.Sprint(freed, err)
				})
			},
			"DeleteCIDR": func(rt *rapid.T) {
				name := rapid.SampledFrom([]string{"a", "b", "c", "d"}).Draw(rt, "name")
				both(rt, fmt.Sprintf("DeleteCIDR(%q)", name), func(a *allocator.Allocator) string {
					return answer(a.DeleteCIDR(ctx, name))
				})
			},
			"": func(rt *rapid.T) {
				pair, plain := stateOf(rt, pairSt, as[0]), stateOf(rt, plainSt, as[1])
				if !slices.Equal(pair.records, plain.records) || !slices.Equal(pair.cidrs, plain.cidrs) ||
					!slices.Equal(pair.index, plain.index) || !slices.Equal(pair.usage, plain.usage) {
					rt.Fatalf("states differ:\npair path    %+v\ngeneral path %+v", pair, plain)
				}
			},
		})
	})
}
