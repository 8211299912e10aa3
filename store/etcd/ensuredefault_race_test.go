package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
)

// SPEC §5 with several allocators, each over its own client of one etcd:
// the default CIDR is single-stack, and two allocators configured with the
// same IPv4 prefix but different IPv6 prefixes call EnsureDefault at once.
// Exactly one change is allowed (single to dual-stack): one of them makes
// it, and the other finds the stored CIDR no longer matching its
// configuration, which is ErrDefaultMismatch whatever the interleaving,
// as for a caller that came later; never an error of validation.
func TestEnsureDefaultConcurrentMismatchIsErrDefaultMismatch(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v4 := netip.MustParsePrefix("10.96.0.0/24")
	v6 := []netip.Prefix{netip.MustParsePrefix("fd00:1::/120"), netip.MustParsePrefix("fd00:2::/120")}
	for round := range 15 {
		allocs := newAllocators(t, ctx, c, fmt.Sprintf("/ensure%d", round), 2, nil)
		if _, err := allocs[0].EnsureDefault(ctx, v4); err != nil {
			t.Fatalf("round %d: EnsureDefault(%v): %v", round, v4, err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		got := make([]cidrset.CIDR, 2)
		start := make(chan struct{})
		for i, a := range allocs {
			wg.Go(func() {
				<-start
				got[i], errs[i] = a.EnsureDefault(ctx, v4, v6[i])
			})
		}
		close(start)
		wg.Wait()
		stored, err := allocs[0].Store().GetCIDR(ctx, cidrset.DefaultName)
		if err != nil {
			t.Fatal(err)
		}
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
				if len(got[i].Prefixes) != 2 || got[i].Prefixes[1] != v6[i] {
					t.Errorf("round %d: allocator %d: EnsureDefault succeeded with %v", round, i, got[i].Prefixes)
				}
			case errors.Is(err, allocator.ErrDefaultMismatch):
			default:
				t.Errorf("round %d: allocator %d: EnsureDefault(%v, %v) = %v; want nil or ErrDefaultMismatch", round, i, v4, v6[i], err)
			}
		}
		if won != 1 {
			t.Errorf("round %d: %d of 2 EnsureDefault calls succeeded (%v); stored %v", round, won, errs, stored.Prefixes)
		}
	}
}

// SPEC §5 with several allocators, each over its own client of one etcd,
// calling EnsureDefault at once with one configuration: from nothing, then
// with an IPv6 prefix added, then with a mismatching one. Every call of the
// first two succeeds and returns the one default CIDR as configured; every
// call of the third is ErrDefaultMismatch and changes nothing.
func TestEnsureDefaultConcurrentOneDefaultCIDR(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v4, v6 := netip.MustParsePrefix("10.96.0.0/24"), netip.MustParsePrefix("fd00:96::/112")
	for round := range 5 {
		allocs := newAllocators(t, ctx, c, fmt.Sprintf("/ensureall%d", round), 3, nil)
		var last cidrset.CIDR
		for _, step := range []struct {
			prefixes []netip.Prefix
			mismatch bool
		}{
			{[]netip.Prefix{v4}, false},
			{[]netip.Prefix{v4, v6}, false},
			{[]netip.Prefix{netip.MustParsePrefix("10.97.0.0/24"), v6}, true},
			{[]netip.Prefix{v4}, true},
		} {
			var wg sync.WaitGroup
			errs := make([]error, len(allocs))
			got := make([]cidrset.CIDR, len(allocs))
			for i, a := range allocs {
				wg.Go(func() { got[i], errs[i] = a.EnsureDefault(ctx, step.prefixes...) })
			}
			wg.Wait()
			stored, err := allocs[0].Store().GetCIDR(ctx, cidrset.DefaultName)
			if err != nil {
				t.Fatal(err)
			}
			for i, err := range errs {
				switch {
				case step.mismatch && !errors.Is(err, allocator.ErrDefaultMismatch):
					t.Errorf("round %d: allocator %d: EnsureDefault(%v) = %v; want ErrDefaultMismatch", round, i, step.prefixes, err)
				case !step.mismatch && err != nil:
					t.Errorf("round %d: allocator %d: EnsureDefault(%v) = %v", round, i, step.prefixes, err)
				case !step.mismatch && !slices.Equal(got[i].Prefixes, step.prefixes):
					t.Errorf("round %d: allocator %d: EnsureDefault(%v) returned %v", round, i, step.prefixes, got[i].Prefixes)
				}
			}
			if step.mismatch {
				if stored.Revision != last.Revision {
					t.Errorf("round %d: EnsureDefault(%v), mismatching, changed the default CIDR to %v", round, step.prefixes, stored.Prefixes)
				}
			} else if !slices.Equal(stored.Prefixes, step.prefixes) || stored.Terminating {
				t.Errorf("round %d: after EnsureDefault(%v) the store holds %+v", round, step.prefixes, stored)
			}
			last = stored
		}
	}
}
