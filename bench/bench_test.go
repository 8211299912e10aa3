package bench

import (
	"errors"
	"net/netip"
	"sync"
	"testing"

	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"

	"github.com/netipam/netipam/allocator"
)

var allImpls = []string{ImplNetipam, ImplNetipamSeq, ImplBitmap, ImplIPAddress}

// testedImpls are the adapters the tests check: the compared ones and Floor.
var testedImpls = append(allImpls[:len(allImpls):len(allImpls)], ImplFloor, ImplFloorDense, ImplFloorIndexed)

// TestAdapters checks that every adapter allocates distinct addresses inside
// the prefix, honours static allocation, and frees what it releases.
func TestAdapters(t *testing.T) {
	for _, impl := range testedImpls {
		for _, ps := range []string{"10.0.0.0/24", "fd00::/112"} {
			t.Run(impl+"/"+ps, func(t *testing.T) {
				p := netip.MustParsePrefix(ps)
				a, err := New(impl, p)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()
				seen := map[netip.Addr]bool{}
				for range 3 {
					x, err := a.AllocateNext()
					if err != nil {
						t.Fatal(err)
					}
					if !p.Contains(x) || x == p.Addr() {
						t.Fatalf("allocated %s, not a host of %s", x, p)
					}
					if seen[x] {
						t.Fatalf("allocated %s twice", x)
					}
					seen[x] = true
				}
				// In the lower band, which the allocators with bands never
				// choose dynamically; Floor has none.
				static := AddrAt(p, 0, 2)
				for k := uint64(3); seen[static]; k++ {
					static = AddrAt(p, 0, k)
				}
				if err := a.Allocate(static); err != nil {
					t.Fatalf("static %s: %v", static, err)
				}
				if err := a.Allocate(static); err == nil {
					t.Fatalf("static %s allocated twice", static)
				}
				if err := a.Release(static); err != nil {
					t.Fatal(err)
				}
				if err := a.Allocate(static); err != nil {
					t.Fatalf("static %s after release: %v", static, err)
				}
			})
		}
	}
}

// TestFillThenFull fills a small range through Fill and checks that every
// adapter then reports it full, and has exactly the one released address
// left after a release.
func TestFillThenFull(t *testing.T) {
	p := netip.MustParsePrefix("10.1.0.0/26")
	for _, impl := range testedImpls {
		t.Run(impl, func(t *testing.T) {
			a, err := New(impl, p)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			all := Shuffled(p, 1)
			if err := a.Fill(all[:10]); err != nil {
				t.Fatal(err)
			}
			if err := a.Fill(all[10:]); err != nil {
				t.Fatal(err)
			}
			if x, err := a.AllocateNext(); !isFull(err) {
				t.Fatalf("full range: got %v, %v; want a full error", x, err)
			}
			if err := a.Release(all[7]); err != nil {
				t.Fatal(err)
			}
			x, err := a.AllocateNext()
			if err != nil || x != all[7] {
				t.Fatalf("got %v, %v; want %s", x, err, all[7])
			}
		})
	}
}

func isFull(err error) bool {
	return errors.Is(err, allocator.ErrFull) || errors.Is(err, ipallocator.ErrFull) || errors.Is(err, errFloorFull)
}

func TestAddresses(t *testing.T) {
	p := netip.MustParsePrefix("fd00::/48")
	for _, l := range []Layout{Packed, Random} {
		got := LargeAddrs(p, l, 0, 1000)
		seen := map[netip.Addr]bool{}
		for _, a := range got {
			if !p.Contains(a) || a == p.Addr() || seen[a] {
				t.Fatalf("%s: bad or repeated address %s", l, a)
			}
			seen[a] = true
		}
		if tail := LargeAddrs(p, l, 500, 1000); tail[0] != got[500] {
			t.Fatalf("%s: a longer fill does not extend a shorter one", l)
		}
	}
	if got := LargeAddrs(p, Packed, 0, 1)[0]; got != netip.MustParseAddr("fd00::101") {
		t.Fatalf("packed starts at %s, want fd00::101 (upper band)", got)
	}
	if s := Shuffled(netip.MustParsePrefix("10.0.0.0/29"), 1); len(s) != 6 {
		t.Fatalf("a /29 has 6 usable addresses, got %d", len(s))
	}
	if n := len(Owner(12345).Name); n != 32 {
		t.Fatalf("owner name is %d bytes, want 32", n)
	}
	if got, want := Owner(255).Name, "service-0000000000000000000000ff"; got != want {
		t.Fatalf("Owner(255) = %q, want %q", got, want)
	}
}

// FloorIndexed keeps its owner index exact: an owner holds what it was
// given until it is released, is forgotten with its last address, and its
// slot is reused, so churn does not grow the index.
func TestFloorIndexedKeepsItsOwnerIndex(t *testing.T) {
	p := netip.MustParsePrefix("10.2.0.0/24")
	f := NewFloorIndexed(p)
	fillAddrs := Shuffled(p, 7)[:3]
	if err := f.Fill(fillAddrs); err != nil {
		t.Fatal(err)
	}
	for i, x := range fillAddrs {
		if got := f.AddressesOf(Owner(i)); len(got) != 1 || got[0] != x {
			t.Fatalf("Owner(%d) holds %v, want [%s]", i, got, x)
		}
	}
	for round := range 3 {
		x, err := f.AllocateNext()
		if err != nil {
			t.Fatal(err)
		}
		owner := cycleOwners[round]
		if got := f.AddressesOf(owner); len(got) != 1 || got[0] != x {
			t.Fatalf("round %d: the cycle owner holds %v, want [%s]", round, got, x)
		}
		if err := f.Release(x); err != nil {
			t.Fatal(err)
		}
		if got := f.AddressesOf(owner); len(got) != 0 {
			t.Fatalf("round %d: after release the owner holds %v", round, got)
		}
		if len(f.byRef) != 3 || len(f.slots) != 4 {
			t.Fatalf("round %d: %d owners in %d slots, want 3 in 4", round, len(f.byRef), len(f.slots))
		}
	}
	if err := f.Release(fillAddrs[1]); err != nil {
		t.Fatal(err)
	}
	if got := f.AddressesOf(Owner(1)); len(got) != 0 {
		t.Fatalf("Owner(1) after its release holds %v", got)
	}
	if got := f.AddressesOf(Owner(2)); len(got) != 1 || got[0] != fillAddrs[2] {
		t.Fatalf("Owner(2) holds %v, want [%s]", got, fillAddrs[2])
	}
}

// A shared ring hands out every owner equally often to goroutines taking
// them at once (run under -race, a plain count is reported), and an
// unshared one goes on from where the shared one stopped.
func TestSharedOwnerRingHandsOutEachOwnerInTurn(t *testing.T) {
	f := &Floor{}
	unshare := shareRing(f)
	const goroutines, each = 4, 4 * ownerCycle
	counts := make([][ownerCycle]int, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for range each {
				counts[g][f.ring.nextIndex()]++
			}
		})
	}
	wg.Wait()
	unshare()
	for i := range ownerCycle {
		total := 0
		for g := range goroutines {
			total += counts[g][i]
		}
		if total != goroutines*each/ownerCycle {
			t.Fatalf("owner %d handed out %d times, want %d", i, total, goroutines*each/ownerCycle)
		}
	}
	if f.ring.shared {
		t.Fatal("the ring is still shared after unshare")
	}
	if got := f.ring.nextIndex(); got != 0 {
		t.Fatalf("after %d owners the next is %d, want 0", goroutines*each, got)
	}
}
