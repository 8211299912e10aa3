package bench

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/registry/core/service/ipallocator"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/memory"
)

var (
	p20  = netip.MustParsePrefix("10.0.0.0/20")
	p16  = netip.MustParsePrefix("10.0.0.0/16")
	p12  = netip.MustParsePrefix("10.0.0.0/12")
	p112 = netip.MustParsePrefix("fd00::/112")
	p64  = netip.MustParsePrefix("fd00::/64")
	p48  = netip.MustParsePrefix("fd00::/48")
)

var fills = []float64{0, 50, 90, 99, 99.9, 99.99}

// ipaddressRuns says whether the IPAddress allocator is run on p. It lists
// every IPAddress object of its family twice per allocation and twice per
// release (Used(), evaluated for its metrics even when they are off), so an
// operation costs O(addresses held); and its fixture keeps one API object
// per address. /20 always, /16 and /112 (64k addresses) only in the full
// run, never /12 (1M objects, seconds per operation).
func ipaddressRuns(p netip.Prefix) bool {
	switch p.Bits() {
	case 20:
		return true
	case 16, 112:
		return full
	}
	return false
}

// allocRelease is the measured operation: AllocateNext, then Release of
// that address, so the fill level stays put. Never inlined: ir.sh counts
// the instructions executed inside it, which it finds by name, and a
// build with a profile (-pgo) would otherwise inline it into each
// benchmark (called once a benchmark, it costs nothing a cycle).
//
//go:noinline
func allocRelease(b *testing.B, a Allocator) {
	for b.Loop() {
		x, err := a.AllocateNext()
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Release(x); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocRelease: AllocateNext + Release in a range filled at random
// to a given percentage of its usable addresses.
func BenchmarkAllocRelease(b *testing.B) {
	defer dropFixture()
	prefixes := []netip.Prefix{p20, p16, p12, p112}
	for _, impl := range allImpls {
		for _, p := range prefixes {
			if impl == ImplIPAddress && !ipaddressRuns(p) {
				continue
			}
			for _, pct := range fills {
				name := fmt.Sprintf("impl=%s/prefix=%d/fill=%s", impl, p.Bits(), fmtFill(pct))
				b.Run(name, func(b *testing.B) {
					a := fixture(b, fixtureKey{impl: impl, prefix: p}, FillCount(p, pct))
					allocRelease(b, a)
				})
			}
		}
	}
}

// BenchmarkAllocReleaseFloor is BenchmarkAllocRelease for Floor, a scale
// for the others' numbers on this machine, not a competitor, in three
// forms: owners in a Go map (floor), the least for records kept in a hash
// table; in an array indexed by address (floor-dense), the least for a
// record per address at all; and that array with an owner index
// (floor-indexed), the least for records an owner's addresses can be
// listed from, as netipam's AddressesOf does. Beside the last, netipam
// with its store's owner index kept (netipam-indexed): BenchmarkAllocRelease's
// netipam never looks up by owner, so its memory store keeps none.
func BenchmarkAllocReleaseFloor(b *testing.B) {
	defer dropFixture()
	for _, impl := range []string{ImplFloor, ImplFloorDense, ImplFloorIndexed, ImplNetipamIndexed} {
		for _, p := range []netip.Prefix{p16, p12} {
			for _, pct := range fills {
				b.Run(fmt.Sprintf("impl=%s/prefix=%d/fill=%s", impl, p.Bits(), fmtFill(pct)), func(b *testing.B) {
					a := fixture(b, fixtureKey{impl: impl, prefix: p}, FillCount(p, pct))
					allocRelease(b, a)
				})
			}
		}
	}
}

// largeCounts are the addresses already allocated in the IPv6 /64 and /48
// cases: 0, 1M, 10M (full run); 0 and 100k otherwise.
func largeCounts() []int {
	if full {
		return []int{0, 1e6, 10e6}
	}
	return []int{0, 100e3}
}

// BenchmarkAllocReleaseLarge: AllocateNext + Release in an IPv6 /64 or /48
// already holding 0, 1M or 10M addresses, packed from the start of the
// upper band or scattered at random. The peers run only the empty cases:
// the bitmap covers just the first 65536 addresses of an IPv6 prefix, and
// the IPAddress allocator refuses prefixes shorter than /64 and is far too
// slow to hold 1M addresses.
func BenchmarkAllocReleaseLarge(b *testing.B) {
	defer dropFixture()
	for _, impl := range allImpls {
		for _, p := range []netip.Prefix{p64, p48} {
			for _, l := range []Layout{Packed, Random} {
				for _, n := range largeCounts() {
					switch {
					case impl == ImplBitmap && n > 0,
						impl == ImplIPAddress && (n > 0 || p.Bits() < 64):
						continue
					}
					name := fmt.Sprintf("impl=%s/prefix=%d/used=%s/layout=%s", impl, p.Bits(), fmtCount(n), l)
					b.Run(name, func(b *testing.B) {
						a := fixture(b, fixtureKey{impl: impl, prefix: p, layout: l}, n)
						allocRelease(b, a)
					})
				}
			}
		}
	}
}

// BenchmarkPrefetch: AllocateNext + Release as in BenchmarkAllocReleaseLarge,
// in a /64 or /48 holding 100k addresses (1M and 10M in the full run), with
// the memory store's prefetch hints (store.Prefetcher) and without them, in
// turns of 4096 cycles: one allocator over one store, so that both halves
// run over the same memory at the same moments (a host whose memory gets
// faster as the kernel gathers a new fixture's pages into huge ones would
// favour whichever ran last). Metrics: ns/hinted and ns/unhinted, a cycle
// in each half, and hinted/unhinted. The unhinted half still makes the
// allocator's checks and calls that do nothing (about 80 instructions),
// which the allocator without a Prefetcher does not, and, drawing its
// starts ahead (allocator/lookahead.go), still loads the sparse set's
// nodes ahead: only the store's slots go unloaded.
func BenchmarkPrefetch(b *testing.B) {
	defer dropFixture()
	for _, p := range []netip.Prefix{p64, p48} {
		for _, l := range []Layout{Packed, Random} {
			for _, n := range largeCounts()[1:] {
				name := fmt.Sprintf("impl=netipam/prefix=%d/used=%s/layout=%s", p.Bits(), fmtCount(n), l)
				b.Run(name, func(b *testing.B) {
					a := fixture(b, fixtureKey{impl: ImplNetipam, prefix: p, layout: l}, n).(*Netipam)
					h, err := a.hintSwitch()
					if err != nil {
						b.Fatal(err)
					}
					defer func() { h.on = true }()
					const turn = 4096
					var took [2]time.Duration // unhinted, hinted
					var cycles [2]int
					i, from := 0, time.Now()
					for b.Loop() {
						if i%turn == 0 {
							now := time.Now()
							if i > 0 {
								took[btoi(h.on)] += now.Sub(from)
								cycles[btoi(h.on)] += turn
							}
							h.on, from = (i/turn)%2 == 0, now
						}
						x, err := a.AllocateNext()
						if err != nil {
							b.Fatal(err)
						}
						if err := a.Release(x); err != nil {
							b.Fatal(err)
						}
						i++
					}
					took[btoi(h.on)] += time.Since(from)
					cycles[btoi(h.on)] += (i-1)%turn + 1
					if cycles[0] > 0 && cycles[1] > 0 {
						un := float64(took[0].Nanoseconds()) / float64(cycles[0])
						hinted := float64(took[1].Nanoseconds()) / float64(cycles[1])
						b.ReportMetric(hinted, "ns/hinted")
						b.ReportMetric(un, "ns/unhinted")
						b.ReportMetric(hinted/un, "hinted/unhinted")
					}
				})
			}
		}
	}
}

func btoi(v bool) int {
	if v {
		return 1
	}
	return 0
}

// BenchmarkFillRange: AllocateNext from empty until the range is full; one
// operation fills the whole range. ns/addr is per allocated address.
func BenchmarkFillRange(b *testing.B) {
	for _, impl := range allImpls {
		prefixes := []netip.Prefix{p20, p16}
		if impl == ImplIPAddress {
			// Quadratic (see ipaddressRuns): seconds for a /20, hours for a
			// /16; a /24 in the reduced run.
			prefixes = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}
			if full {
				prefixes = []netip.Prefix{p20}
			}
		}
		for _, p := range prefixes {
			b.Run(fmt.Sprintf("impl=%s/prefix=%d", impl, p.Bits()), func(b *testing.B) {
				want := Usable(p)
				for i := 0; i < b.N; i++ {
					b.StopTimer()
					a, err := New(impl, p)
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					n := 0
					for {
						_, err := a.AllocateNext()
						if err != nil {
							if !isFull(err) {
								b.Fatal(err)
							}
							break
						}
						n++
					}
					b.StopTimer()
					a.Close()
					if n != want {
						b.Fatalf("filled %d addresses, want %d", n, want)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(want), "ns/addr")
			})
		}
	}
}

// BenchmarkAllocateNextFull: AllocateNext on a full range, which must fail.
func BenchmarkAllocateNextFull(b *testing.B) {
	defer dropFixture()
	for _, impl := range allImpls {
		for _, p := range []netip.Prefix{p20, p16} {
			if impl == ImplIPAddress && !ipaddressRuns(p) {
				continue
			}
			b.Run(fmt.Sprintf("impl=%s/prefix=%d", impl, p.Bits()), func(b *testing.B) {
				a := fixture(b, fixtureKey{impl: impl, prefix: p}, Usable(p))
				for b.Loop() {
					if _, err := a.AllocateNext(); !isFull(err) {
						b.Fatalf("got %v, want a full error", err)
					}
				}
			})
		}
	}
}

// BenchmarkAllocateStatic: Allocate of a chosen free address, then Release,
// in a range half full.
func BenchmarkAllocateStatic(b *testing.B) {
	defer dropFixture()
	for _, impl := range allImpls {
		for _, p := range []netip.Prefix{p20, p16} {
			if impl == ImplIPAddress && !ipaddressRuns(p) {
				continue
			}
			b.Run(fmt.Sprintf("impl=%s/prefix=%d/fill=50", impl, p.Bits()), func(b *testing.B) {
				a := fixture(b, fixtureKey{impl: impl, prefix: p}, FillCount(p, 50))
				free := freeAddrs(1024)
				i := 0
				for b.Loop() {
					x := free[i%len(free)]
					i++
					if err := a.Allocate(x); err != nil {
						b.Fatal(err)
					}
					if err := a.Release(x); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkParallelAllocRelease: AllocateNext + Release from GOMAXPROCS
// goroutines at once, in a range half full.
func BenchmarkParallelAllocRelease(b *testing.B) {
	defer dropFixture()
	for _, impl := range allImpls {
		for _, p := range []netip.Prefix{p20, p16} {
			if impl == ImplIPAddress && !ipaddressRuns(p) {
				continue
			}
			b.Run(fmt.Sprintf("impl=%s/prefix=%d/fill=50", impl, p.Bits()), func(b *testing.B) {
				a := fixture(b, fixtureKey{impl: impl, prefix: p}, FillCount(p, 50))
				defer shareRing(a)()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						x, err := a.AllocateNext()
						if err != nil {
							b.Error(err)
							return
						}
						if err := a.Release(x); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// outsideCounts are how many addresses the finalizer benchmark keeps outside
// the CIDR it decides about.
func outsideCounts() []int {
	if full {
		return []int{1e3, 1e6}
	}
	return []int{1e3, 100e3}
}

// BenchmarkFinalizerDecision: whether a CIDR holding 10 addresses that no
// other CIDR covers may be deleted (DryRun().DeleteCIDR, the finalizer's
// decision without the write), while the store holds 1k or 1M addresses in
// another CIDR, each its own run. The decision must not depend on the
// addresses outside. (Kubernetes' ServiceCIDR controller lists every
// IPAddress of the family for this decision; it is not exported, so it is
// not measured here.)
func BenchmarkFinalizerDecision(b *testing.B) {
	ctx := context.Background()
	outside := netip.MustParsePrefix("10.0.0.0/8")
	target := netip.MustParsePrefix("192.168.0.0/24")
	for _, n := range outsideCounts() {
		b.Run(fmt.Sprintf("impl=netipam/outside=%s", fmtCount(n)), func(b *testing.B) {
			st := memory.New()
			defer st.Close()
			for _, c := range []cidrset.CIDR{
				{Name: "outside", Prefixes: []netip.Prefix{outside}},
				{Name: "target", Prefixes: []netip.Prefix{target}},
			} {
				if _, err := st.CreateCIDR(ctx, c); err != nil {
					b.Fatal(err)
				}
			}
			addrs := make([]netip.Addr, 0, n+10)
			for i := range n {
				addrs = append(addrs, AddrAt(outside, 0, uint64(1+13*i))) // every 13th: one run each
			}
			for i := range 10 {
				addrs = append(addrs, AddrAt(target, 0, uint64(100+2*i)))
			}
			if err := FillStore(st, addrs, 0); err != nil {
				b.Fatal(err)
			}
			a, err := allocator.New(ctx, st)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			for b.Loop() {
				d, err := a.DryRun().DeleteCIDR(ctx, "target")
				if err != nil {
					b.Fatal(err)
				}
				if d.Remove || len(d.Blocking) != 10 {
					b.Fatalf("decision %+v, want blocked by 10 addresses", d)
				}
			}
		})
		runtime.GC()
	}
}

// coldCount is how many addresses the cold-start and memory benchmarks hold.
func coldCount() int {
	if full {
		return 1e6
	}
	return 100e3
}

// BenchmarkColdStart: allocator.New over a memory store already holding 1M
// addresses (the allocator reads the store's snapshot and builds its
// index). prefix=12: a random 1M of the /12's 1,048,574 addresses;
// prefix=64: 1M scattered in a /64, so 1M separate runs. The bitmap
// row is its restart from a snapshot (ipallocator.NewFromSnapshot), as
// kube-apiserver did from the RangeAllocation object.
func BenchmarkColdStart(b *testing.B) {
	ctx := context.Background()
	n := coldCount()
	for _, c := range []struct {
		impl   string
		prefix netip.Prefix
	}{{ImplNetipam, p12}, {ImplNetipam, p64}, {ImplBitmap, p12}} {
		b.Run(fmt.Sprintf("impl=%s/prefix=%d/used=%s", c.impl, c.prefix.Bits(), fmtCount(n)), func(b *testing.B) {
			var addrs []netip.Addr
			if c.prefix.Addr().Is4() {
				addrs = Shuffled(c.prefix, 1)[:n]
			} else {
				addrs = LargeAddrs(c.prefix, Random, 0, n)
			}
			if c.impl == ImplBitmap {
				bm, err := NewBitmap(c.prefix)
				if err != nil {
					b.Fatal(err)
				}
				if err := bm.Fill(addrs); err != nil {
					b.Fatal(err)
				}
				var snap api.RangeAllocation
				if err := bm.R.Snapshot(&snap); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					r, err := ipallocator.NewFromSnapshot(&snap)
					if err != nil || r.Used() != n {
						b.Fatalf("restored %v, %v; want %d used", r, err, n)
					}
				}
				return
			}
			st := memory.New()
			defer st.Close()
			if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: CIDRName, Prefixes: []netip.Prefix{c.prefix}}); err != nil {
				b.Fatal(err)
			}
			if err := FillStore(st, addrs, 0); err != nil {
				b.Fatal(err)
			}
			addrs = nil
			runtime.GC()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a, err := allocator.New(ctx, st)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				u, err := a.Usage(CIDRName)
				if err != nil || u.Prefixes[0].Used != cidrset.CountOf(uint64(n)) {
					b.Fatalf("usage %+v, %v; want %d used", u, err, n)
				}
				a.Close()
				runtime.GC()
				b.StartTimer()
			}
		})
	}
}

// writeHeapProfile writes a heap profile (pprof, inuse_space shows what
// is live) while the fixture is live, when NETIPAM_BENCH_HEAPPROFILE names
// a file prefix: PREFIX-impl-bits.pprof.
func writeHeapProfile(b *testing.B, impl string, p netip.Prefix) {
	prefix := os.Getenv("NETIPAM_BENCH_HEAPPROFILE")
	if prefix == "" {
		return
	}
	f, err := os.Create(fmt.Sprintf("%s-%s-%d.pprof", prefix, impl, p.Bits()))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkHeapPerAddr: live heap per allocated address, store and
// allocator together, after AllocateNext of N addresses each owned by its
// own Service (name 32 bytes, kept by the store). One operation allocates
// all N; B/addr is the heap growth over N. prefix=12 leaves the used
// addresses in long runs; prefix=64 scatters them, one run each (the
// allocator index's worst case). netipam-indexed is netipam with the
// store's owner index kept, as after a first AddressesOf. The peers for reference: the bitmap
// costs one bit per address of the range whatever is allocated; the
// IPAddress row counts an API object per address twice, once in the fake
// clientset (standing in for etcd) and once in the informer cache, and is
// filled through the API (Fill) with fewer addresses (its AllocateNext is
// O(n)).
func BenchmarkHeapPerAddr(b *testing.B) {
	ctx := context.Background()
	n := coldCount()
	cases := []struct {
		impl   string
		prefix netip.Prefix
		n      int
	}{{ImplNetipam, p12, n}, {ImplNetipam, p64, n}, {ImplNetipamIndexed, p12, n}, {ImplNetipamIndexed, p64, n}, {ImplBitmap, p12, n}, {ImplIPAddress, p16, 10e3}}
	for _, c := range cases {
		b.Run(fmt.Sprintf("impl=%s/prefix=%d/n=%s", c.impl, c.prefix.Bits(), fmtCount(c.n)), func(b *testing.B) {
			var perAddr float64
			for i := 0; i < b.N; i++ {
				var keep Allocator
				var addrs []netip.Addr
				if c.impl == ImplIPAddress {
					addrs = Shuffled(c.prefix, 1)[:c.n]
				}
				b.StopTimer()
				before := heapInUse()
				b.StartTimer()
				switch c.impl {
				case ImplNetipam, ImplNetipamIndexed:
					nx, err := NewNetipam(c.prefix, allocator.RandomStart(nil))
					if err != nil {
						b.Fatal(err)
					}
					if c.impl == ImplNetipamIndexed {
						if err := nx.IndexOwners(); err != nil {
							b.Fatal(err)
						}
					}
					fam := ipaddress.FamilyOf(c.prefix.Addr())
					for j := range c.n {
						if _, err := nx.Alloc.AllocateNext(ctx, fam, Owner(j)); err != nil {
							b.Fatal(err)
						}
					}
					keep = nx
				case ImplBitmap:
					bm, err := NewBitmap(c.prefix)
					if err != nil {
						b.Fatal(err)
					}
					for range c.n {
						if _, err := bm.AllocateNext(); err != nil {
							b.Fatal(err)
						}
					}
					keep = bm
				case ImplIPAddress:
					x, err := NewIPAddress(c.prefix, addrs)
					if err != nil {
						b.Fatal(err)
					}
					keep = x
				}
				b.StopTimer()
				after := heapInUse()
				perAddr = (float64(after) - float64(before)) / float64(c.n)
				writeHeapProfile(b, c.impl, c.prefix)
				runtime.KeepAlive(addrs)
				keep.Close()
				keep, addrs = nil, nil
				b.StartTimer()
			}
			b.ReportMetric(perAddr, "B/addr")
		})
		runtime.GC()
	}
}
