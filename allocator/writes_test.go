package allocator

import (
	"context"
	"fmt"
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

// TestWritesKeepThePoolCounters puts and deletes addresses, in runs in one
// pool as the allocation path does (where markLocked takes its shortcut
// for the pool written last, with a bitmap or, for an IPv6 /64,
// without), filling pools up and emptying them, over a pool
// alone or overlapped by another, with or without an excluded address and
// under OldestFirst or MostFree; after
// every step the counters, open marks, full flags and MostFree's tree
// must equal a scan (checkDerivedLocked), and so must each pool's count
// of used excluded addresses.
func TestWritesKeepThePoolCounters(t *testing.T) {
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "x"}
	// Addresses of 10.0.0.0/27, which holds 10.0.0.0/28, and of
	// 10.0.1.0/29, alone.
	var addrs []netip.Addr
	for i := 1; i <= 30; i++ {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}))
	}
	for i := 1; i <= 6; i++ {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}))
	}
	// Of fd00:1::/64, too large for a bitmap; of fd00:1::/63, which holds
	// it, past it; and of no pool.
	for i := 1; i <= 6; i++ {
		addrs = append(addrs, netip.AddrFrom16([16]byte{0: 0xfd, 3: 1, 15: byte(i)}))
	}
	addrs = append(addrs, netip.MustParseAddr("fd00:1:0:1::1"), netip.MustParseAddr("fd00:2::1"))
	excludedAddrs := []netip.Addr{netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("fd00:1::3")}
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		st := memory.New()
		var opts []Option
		if rapid.Bool().Draw(rt, "mostFree") {
			opts = append(opts, WithPolicy(MostFree()))
		}
		excluded := rapid.Bool().Draw(rt, "excluded")
		if excluded {
			for _, x := range excludedAddrs {
				opts = append(opts, WithExcluded(netipx.IPRangeFrom(x, x)))
			}
		}
		a, err := New(ctx, st, opts...)
		if err != nil {
			rt.Fatal(err)
		}
		defer a.Close()
		cidrs := map[string]netip.Prefix{"small": netip.MustParsePrefix("10.0.0.0/28"), "apart": netip.MustParsePrefix("10.0.1.0/29"), "huge": netip.MustParsePrefix("fd00:1::/64")}
		if rapid.Bool().Draw(rt, "overlapped") {
			cidrs["wide"] = netip.MustParsePrefix("10.0.0.0/27")
		}
		if rapid.Bool().Draw(rt, "hugeOverlapped") {
			cidrs["hugeWide"] = netip.MustParsePrefix("fd00:1::/63")
		}
		for name, p := range cidrs {
			if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: name, Prefixes: []netip.Prefix{p}}); err != nil {
				rt.Fatal(err)
			}
		}
		put := func(x netip.Addr) {
			_, _ = st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: x, Parent: owner}})
		}
		del := func(x netip.Addr) { _, _, _ = st.DeleteAddress(ctx, x) }
		addrOf := rapid.SampledFrom(addrs)
		rt.Repeat(map[string]func(*rapid.T){
			"put":    func(rt *rapid.T) { put(addrOf.Draw(rt, "addr")) },
			"delete": func(rt *rapid.T) { del(addrOf.Draw(rt, "addr")) },
			"fill": func(rt *rapid.T) {
				// A run of puts, up to a pool's last address: full.
				from := rapid.IntRange(0, len(addrs)-1).Draw(rt, "from")
				for _, x := range addrs[from:] {
					put(x)
				}
			},
			"empty": func(rt *rapid.T) {
				from := rapid.IntRange(0, len(addrs)-1).Draw(rt, "from")
				for _, x := range addrs[from:] {
					del(x)
				}
			},
			"": func(rt *rapid.T) {
				used, err := st.ListAddresses(ctx)
				if err != nil {
					rt.Fatal(err)
				}
				a.mu.Lock()
				defer a.mu.Unlock()
				if err := a.checkDerivedLocked(used); err != nil {
					rt.Fatal(err)
				}
				for _, pl := range append(a.poolList[0], a.poolList[1]...) {
					var want u128.U128
					for _, r := range used {
						if x := u128.FromAddr(r.Addr); excluded && slices.Contains(excludedAddrs, r.Addr) && pl.contains(x) {
							want = want.Inc()
						}
					}
					if pl.excludedUsed != want {
						rt.Fatalf("pool %s counts %v used excluded addresses, the store holds %v", pl.prefix, pl.excludedUsed, want)
					}
				}
			},
		})
	})
}

// A release another allocator made, which reaches this one through the
// watch, into the pool written last (markLocked's shortcut for a
// release), has the Terminating CIDR of that pool checked again: it may
// be free to go.
// Both shortcuts are checked: a dense pool's, and that of a pool without a
// bitmap (an IPv6 /64).
func TestAReleaseThroughTheWatchRechecksTheDyingCIDR(t *testing.T) {
	for _, p := range []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")} {
		t.Run(p.String(), func(t *testing.T) {
			ctx := context.Background()
			st := memory.New()
			a := newTestAllocator(t, st)
			if _, err := a.CreateCIDR(ctx, "old", p); err != nil {
				t.Fatal(err)
			}
			owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "x"}
			r, err := a.AllocateNext(ctx, ipaddress.FamilyOf(p.Addr()), owner)
			if err != nil {
				t.Fatal(err)
			}
			if err := a.DeleteCIDR(ctx, "old"); err == nil {
				t.Fatal("DeleteCIDR of a CIDR holding an address succeeded")
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			pl, fam := a.pools[p], famIndex(p.Addr())
			if pl == nil || a.lastAlone[fam][0] != pl || (pl.bits == nil) != (fam == 1) || !pl.excluded.IsZero() || fmt.Sprint(pl.dying) != "[old]" {
				t.Fatalf("the pool of %s is not the one markLocked's shortcut serves, dying in old", p)
			}
			clear(a.recheck)
			// Deleted as another allocator would: this one hears of it
			// through its watcher, under the lock, before the reconciler
			// can read recheck.
			if _, err := a.locked.DeleteAddressLocked(r.Addr, nil); err != nil {
				t.Fatal(err)
			}
			if _, ok := a.recheck["old"]; !ok {
				t.Fatalf("after the release of %s, recheck = %v; want old in it", r.Addr, a.recheck)
			}
		})
	}
}

// The shortcut for the pool written last tells its addresses by their
// offset from the pool's first one, in the low word: an IPv6 address at
// the same offset in another high word, in another pool or in none, is
// not the pool's, whether it is put or deleted.
func TestAWriteInAnotherHighWordMissesThePoolWrittenLast(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	a := newTestAllocator(t, st)
	low, high := netip.MustParsePrefix("fd00::/120"), netip.MustParsePrefix("fd00:0:0:1::/120")
	if _, err := a.CreateCIDR(ctx, "low", low); err != nil {
		t.Fatal(err)
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "x"}
	check := func(step string) {
		t.Helper()
		used, err := st.ListAddresses(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if err := a.checkDerivedLocked(used); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	mine, alien := netip.MustParseAddr("fd00::7"), netip.MustParseAddr("fd00:0:0:1::5")
	for _, withHigh := range []bool{false, true} {
		if withHigh {
			if _, err := a.CreateCIDR(ctx, "high", high); err != nil {
				t.Fatal(err)
			}
		}
		for _, step := range []struct {
			name string
			put  bool
			addr netip.Addr
		}{{"put in low", true, mine}, {"put elsewhere", true, alien}, {"delete in low", false, mine}, {"put in low again", true, mine}, {"delete elsewhere", false, alien}, {"delete in low again", false, mine}} {
			if step.put {
				if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: step.addr, Parent: owner}}); err != nil {
					t.Fatal(err)
				}
			} else if _, _, err := st.DeleteAddress(ctx, step.addr); err != nil {
				t.Fatal(err)
			}
			check(fmt.Sprintf("high CIDR %v, %s", withHigh, step.name))
		}
	}
}
