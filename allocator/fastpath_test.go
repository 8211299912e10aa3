package allocator_test

import (
	"context"
	"fmt"
	"maps"
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

// The allocator's fast paths over the memory store (allocateOneLocked,
// allocatePairLocked: choice and create in one critical section, the index
// updated by hand) are shortcuts, not second rules. Each test here drives
// two allocators through the same random calls (dynamic and static,
// single and dual-stack, taken, out of range, of the wrong family or of
// none, for invalid owners, in full families and inside Terminating
// CIDRs, which the fast paths hand over; releases and deletions that
// leave CIDRs Terminating), under OldestFirst or MostFree, with excluded
// ranges or without, and requires every answer (error text included),
// both stores' records, revisions, CIDRs and usage, and what observers
// were told, to agree.

// TestDualStackPairPathAnswersAsTheGeneralPath: one allocator over a
// store.PairLocked store, one over the same store with the pair create
// hidden (CreateAddressesLocked, under the store's lock too).
func TestDualStackPairPathAnswersAsTheGeneralPath(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		pathsAgree(rt, memory.New(), memory.New(), func(s store.Store) store.Store { return noPairs{s.(store.Locked)} }, false)
	})
}

// TestObservedFastPathsAnswerAndReportAsTheGeneralPath: with an observer,
// one allocator over the memory store (its fast paths) and one over the
// same store with store.Locked hidden (the path of a remote store, which
// reports from allocate) are told the same events: scope, family, CIDR
// and error of each request, in order.
func TestObservedFastPathsAnswerAndReportAsTheGeneralPath(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		pathsAgree(rt, memory.New(), memory.New(), func(s store.Store) store.Store { return unlockedStore{s} }, true)
	})
}

// pathsAgree runs the calls over an allocator over fast, and one over
// hide(general); with observed, each allocator has an observer.
func pathsAgree(rt *rapid.T, fast, general *memory.Store, hide func(store.Store) store.Store, observed bool) {
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
	families := []ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6, 0}
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
	var as [2]*allocator.Allocator
	var heard [2]*recorder
	for i, st := range []store.Store{fast, hide(general)} {
		opts := opts
		if observed {
			heard[i] = &recorder{}
			opts = append(slices.Clip(opts), allocator.WithObserver(heard[i]))
		}
		a, err := allocator.New(ctx, st, opts...)
		if err != nil {
			rt.Fatal(err)
		}
		defer a.Close()
		as[i] = a
		for _, name := range slices.Sorted(maps.Keys(cidrs)) {
			if _, err := a.CreateCIDR(ctx, name, cidrs[name]...); err != nil {
				rt.Fatal(err)
			}
		}
	}
	// both calls on each allocator and fails unless the answers, and what
	// the observers were told meanwhile, read the same.
	both := func(rt *rapid.T, what string, call func(a *allocator.Allocator) string) {
		var told [2]int
		for i, h := range heard {
			if h != nil {
				told[i] = len(h.events)
			}
		}
		fastAnswer, generalAnswer := call(as[0]), call(as[1])
		if fastAnswer != generalAnswer {
			rt.Fatalf("%s:\nfast path    %s\ngeneral path %s", what, fastAnswer, generalAnswer)
		}
		if observed {
			fastHeard, generalHeard := eventsSince(heard[0], told[0]), eventsSince(heard[1], told[1])
			if !slices.Equal(fastHeard, generalHeard) {
				rt.Fatalf("%s: the observers were told\nfast path    %q\ngeneral path %q", what, fastHeard, generalHeard)
			}
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
		"AllocateNext": func(rt *rapid.T) {
			owner, f := rapid.SampledFrom(owners).Draw(rt, "owner"), rapid.SampledFrom(families).Draw(rt, "family")
			both(rt, fmt.Sprintf("AllocateNext(%v, %v)", f, owner), func(a *allocator.Allocator) string {
				r, err := a.AllocateNext(ctx, f, owner)
				return answer(err, r)
			})
		},
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
			name := rapid.SampledFrom(slices.Sorted(maps.Keys(cidrs))).Draw(rt, "name")
			both(rt, fmt.Sprintf("DeleteCIDR(%q)", name), func(a *allocator.Allocator) string {
				return answer(a.DeleteCIDR(ctx, name))
			})
		},
		"": func(rt *rapid.T) {
			f, g := stateOf(rt, fast, as[0]), stateOf(rt, general, as[1])
			if !slices.Equal(f.records, g.records) || !slices.Equal(f.cidrs, g.cidrs) ||
				!slices.Equal(f.index, g.index) || !slices.Equal(f.usage, g.usage) {
				rt.Fatalf("states differ:\nfast path    %+v\ngeneral path %+v", f, g)
			}
		},
	})
}

// eventsSince returns what r was told after its first n events, each
// without its Duration, which no two calls share.
func eventsSince(r *recorder, n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events[n:] {
		out = append(out, fmt.Sprintf("%s %v %q %v", ev.Scope, ev.Family, ev.CIDR, ev.Err))
	}
	return out
}
