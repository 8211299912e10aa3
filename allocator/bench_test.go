package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/internal/cputime"
	"github.com/netipam/netipam/internal/u128"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/memory"
)

// filledAllocator returns an allocator over prefix with the first n hosts
// held (loaded through the store, as on a cold start).
func filledAllocator(b *testing.B, prefix string, n uint64) *allocator.Allocator {
	b.Helper()
	return filledCIDR(b, n, []netip.Prefix{netip.MustParsePrefix(prefix)})
}

// filledCIDR is an allocator (with opts) over a memory store holding one
// CIDR of prefixes, each of them holding n addresses from its first host
// on, each address for its own owner.
func filledCIDR(b *testing.B, n uint64, prefixes []netip.Prefix, opts ...allocator.Option) *allocator.Allocator {
	b.Helper()
	ctx := context.Background()
	st := memory.New()
	if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: prefixes}); err != nil {
		b.Fatal(err)
	}
	batch := make([]ipaddress.IPAddress, 0, 4096)
	for k, p := range prefixes {
		r, _ := cidrset.HostRange(p)
		first := u128.FromAddr(r.From())
		for i := uint64(0); i < n; i++ {
			name := fmt.Sprintf("svc-%08d", i) // as long as the report's measurements had
			if k > 0 {
				name = fmt.Sprintf("svc-%d-%08d", k, i)
			}
			batch = append(batch, ipaddress.IPAddress{Addr: first.Add64(i).Addr(p.Addr().Is4()), Parent: svc(name)})
			if len(batch) == cap(batch) || i == n-1 {
				if _, err := st.CreateAddresses(ctx, batch); err != nil {
					b.Fatal(err)
				}
				batch = batch[:0]
			}
		}
	}
	a, err := allocator.New(ctx, st, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Close() })
	return a
}

// BenchmarkAllocateNextRelease measures one dynamic allocation and its
// release at several fill levels; the full comparison with Kubernetes'
// allocators lives in the bench module.
func BenchmarkAllocateNextRelease(b *testing.B) {
	ctx := context.Background()
	for _, tc := range []struct {
		prefix string
		fill   float64
	}{{"10.0.0.0/16", 0}, {"10.0.0.0/16", 0.9}, {"10.0.0.0/16", 0.9999}, {"fd00::/64", 0}} {
		b.Run(fmt.Sprintf("prefix=%s/fill=%g", tc.prefix, tc.fill), func(b *testing.B) {
			size, _ := cidrset.Size(netip.MustParsePrefix(tc.prefix)).Uint64()
			if size > 1<<32 {
				size = 0
			}
			a := filledAllocator(b, tc.prefix, uint64(float64(size)*tc.fill))
			owner := svc("bench")
			family := ipaddress.FamilyOf(netip.MustParsePrefix(tc.prefix).Addr())
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				r, err := a.AllocateNext(ctx, family, owner)
				if err != nil {
					b.Fatal(err)
				}
				if err := a.Release(ctx, r.Addr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// countingObserver counts the events it is told, as cheaply as an
// observer can.
type countingObserver struct{ n atomic.Int64 }

func (c *countingObserver) Allocated(allocator.AllocationEvent) { c.n.Add(1) }

// BenchmarkObservedAllocation measures AllocateNext + Release and
// AllocateDualStack + two Releases over the memory store, a /16 and a
// /112 each 90 % full, with an observer (WithObserver, as the metrics
// module installs) and without: the observer's own cost is an atomic add,
// so the difference is what reporting costs the allocator.
func BenchmarkObservedAllocation(b *testing.B) {
	ctx := context.Background()
	for _, op := range []string{"allocateNext", "allocateDualStack"} {
		for _, observed := range []bool{false, true} {
			b.Run(fmt.Sprintf("op=%s/observed=%t", op, observed), func(b *testing.B) {
				var opts []allocator.Option
				if observed {
					opts = append(opts, allocator.WithObserver(&countingObserver{}))
				}
				a := filledCIDR(b, 65534*9/10, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00::/112")}, opts...)
				owner := svc("bench")
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if op == "allocateNext" {
						r, err := a.AllocateNext(ctx, ipaddress.IPv4, owner)
						if err != nil {
							b.Fatal(err)
						}
						if err := a.Release(ctx, r.Addr); err != nil {
							b.Fatal(err)
						}
						continue
					}
					v4, v6, err := a.AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{})
					if err != nil {
						b.Fatal(err)
					}
					if err := a.Release(ctx, v4.Addr); err != nil {
						b.Fatal(err)
					}
					if err := a.Release(ctx, v6.Addr); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkEnsureNext measures EnsureNext against AllocateNext over the
// memory store, a /16 at 90 %: an owner holding none (allocated, then
// released: two owner lookups more than AllocateNext, and the owner index
// kept by every write), and one holding its address already (one lookup,
// no write).
func BenchmarkEnsureNext(b *testing.B) {
	ctx := context.Background()
	for _, op := range []string{"allocateNext+release", "ensureNext+release", "ensureNext-held"} {
		b.Run("op="+op, func(b *testing.B) {
			a := filledAllocator(b, "10.0.0.0/16", 65534*9/10)
			owner := svc("bench")
			if op == "ensureNext-held" {
				if _, err := a.EnsureNext(ctx, ipaddress.IPv4, owner); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				var r ipaddress.IPAddress
				var err error
				if op == "allocateNext+release" {
					r, err = a.AllocateNext(ctx, ipaddress.IPv4, owner)
				} else {
					r, err = a.EnsureNext(ctx, ipaddress.IPv4, owner)
				}
				if err != nil {
					b.Fatal(err)
				}
				if op == "ensureNext-held" {
					continue
				}
				if err := a.Release(ctx, r.Addr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEnsureDualStack measures EnsureDualStack against
// AllocateDualStack, for a dual-stack CIDR of a /16 and a /112 each 90 %
// full: a pair allocated and released, and a pair the owner holds.
func BenchmarkEnsureDualStack(b *testing.B) {
	ctx := context.Background()
	for _, op := range []string{"allocateDualStack+release", "ensureDualStack+release", "ensureDualStack-held"} {
		b.Run("op="+op, func(b *testing.B) {
			a := filledCIDR(b, 65534*9/10, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00::/112")})
			owner := svc("bench")
			if op == "ensureDualStack-held" {
				if _, _, err := a.EnsureDualStack(ctx, owner); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				var v4, v6 ipaddress.IPAddress
				var err error
				if op == "allocateDualStack+release" {
					v4, v6, err = a.AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{})
				} else {
					v4, v6, err = a.EnsureDualStack(ctx, owner)
				}
				if err != nil {
					b.Fatal(err)
				}
				if op == "ensureDualStack-held" {
					continue
				}
				if err := a.Release(ctx, v4.Addr); err != nil {
					b.Fatal(err)
				}
				if err := a.Release(ctx, v6.Addr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHeapPerAddress reports the heap held per allocated address by
// the memory store and an allocator over it.
// It measures once, whatever b.N: the figure does not depend on it.
func BenchmarkHeapPerAddress(b *testing.B) {
	const n = 1 << 18
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	a := filledAllocator(b, "10.0.0.0/12", n)
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(a)
	for b.Loop() {
	}
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/addr")
}

// BenchmarkAllocateNextReleaseManyCIDRs allocates and releases with n live
// /24 CIDRs (per-node ranges, say), under each built-in policy: the cost
// must not grow much with n.
func BenchmarkAllocateNextReleaseManyCIDRs(b *testing.B) {
	ctx := context.Background()
	policies := []struct {
		name string
		p    allocator.Policy
	}{{"oldest-first", allocator.OldestFirst()}, {"most-free", allocator.MostFree()}, {"random", allocator.RandomOrder()}}
	for _, pol := range policies {
		for _, n := range []int{1, 100, 1000} {
			b.Run(fmt.Sprintf("policy=%s/cidrs=%d", pol.name, n), func(b *testing.B) {
				st := memory.New()
				for i := range n {
					p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
					if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: fmt.Sprintf("node-%04d", i), Prefixes: []netip.Prefix{p}}); err != nil {
						b.Fatal(err)
					}
				}
				a, err := allocator.New(ctx, st, allocator.WithPolicy(pol.p))
				if err != nil {
					b.Fatal(err)
				}
				defer a.Close()
				b.ReportAllocs()
				allocateNextRelease(b, a)
			})
		}
	}
}

// allocateNextRelease is the measured loop: AllocateNext of an IPv4
// address, and its Release.
func allocateNextRelease(b *testing.B, a *allocator.Allocator) {
	ctx, owner := context.Background(), svc("bench")
	for b.Loop() {
		r, err := a.AllocateNext(ctx, ipaddress.IPv4, owner)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Release(ctx, r.Addr); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllocateNextReleaseBesideFullCIDRs allocates and releases when
// the n oldest CIDRs are full and only the newest has room (a range grown
// by adding CIDRs as the earlier ones filled): the policies skip full
// CIDRs by their open marks, 64 at a time.
func BenchmarkAllocateNextReleaseBesideFullCIDRs(b *testing.B) {
	ctx := context.Background()
	policies := []struct {
		name string
		p    allocator.Policy
	}{{"oldest-first", allocator.OldestFirst()}, {"random", allocator.RandomOrder()}}
	for _, pol := range policies {
		for _, n := range []int{10, 1000} {
			b.Run(fmt.Sprintf("policy=%s/full=%d", pol.name, n), func(b *testing.B) {
				st := memory.New()
				var held []ipaddress.IPAddress
				for i := range n {
					p := netip.PrefixFrom(node(i, 0), 28)
					if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: fmt.Sprintf("node-%04d", i), Prefixes: []netip.Prefix{p}}); err != nil {
						b.Fatal(err)
					}
					r, _ := cidrset.HostRange(p)
					for x := r.From(); r.Contains(x); x = x.Next() {
						held = append(held, ipaddress.IPAddress{Addr: x, Parent: svc(fmt.Sprint("held-", x))})
					}
				}
				if _, err := st.CreateAddresses(ctx, held); err != nil {
					b.Fatal(err)
				}
				if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "room", Prefixes: []netip.Prefix{netip.MustParsePrefix("172.16.0.0/24")}}); err != nil {
					b.Fatal(err)
				}
				a, err := allocator.New(ctx, st, allocator.WithPolicy(pol.p))
				if err != nil {
					b.Fatal(err)
				}
				defer a.Close()
				allocateNextRelease(b, a)
			})
		}
	}
}

// BenchmarkCIDRChangeManyCIDRs creates and deletes one CIDR next to n
// others through an allocator that follows the store: what a change costs
// when there are many (every change re-derives the pools, O(n)).
func BenchmarkCIDRChangeManyCIDRs(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("cidrs=%d", n), func(b *testing.B) {
			st := memory.New()
			for i := range n {
				p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
				if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: fmt.Sprintf("node-%04d", i), Prefixes: []netip.Prefix{p}}); err != nil {
					b.Fatal(err)
				}
			}
			a, err := allocator.New(ctx, st)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			extra := netip.MustParsePrefix("172.16.0.0/24")
			for b.Loop() {
				if _, err := a.CreateCIDR(ctx, "extra", extra); err != nil {
					b.Fatal(err)
				}
				if err := a.DeleteCIDR(ctx, "extra"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkReleaseInTerminatingCIDR releases one of n addresses that hold a
// Terminating /16 (each release re-runs the finalizer's decision) and puts
// it back through the store: draining a large CIDR one release at a time
// must cost about the same per release whatever n.
func BenchmarkReleaseInTerminatingCIDR(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1 << 10, 1 << 14} {
		b.Run(fmt.Sprintf("held=%d", n), func(b *testing.B) {
			st := memory.New()
			a, err := allocator.New(ctx, st)
			if err != nil {
				b.Fatal(err)
			}
			defer a.Close()
			if _, err := a.CreateCIDR(ctx, "old", netip.MustParsePrefix("10.0.0.0/16")); err != nil {
				b.Fatal(err)
			}
			held := make([]netip.Addr, n)
			for i := range held {
				r, err := a.AllocateNext(ctx, ipaddress.IPv4, svc(fmt.Sprintf("svc-%05d", i)))
				if err != nil {
					b.Fatal(err)
				}
				held[i] = r.Addr
			}
			if err := a.DeleteCIDR(ctx, "old"); !errors.Is(err, allocator.ErrDeletionBlocked) {
				b.Fatalf("DeleteCIDR = %v, want blocked", err)
			}
			i := 0
			for b.Loop() {
				x := held[i%n]
				if err := a.Release(ctx, x); err != nil {
					b.Fatal(err)
				}
				// Back without a fence: a Terminating CIDR takes no allocation.
				if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: x, Parent: svc("back")}}); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkReleaseUnderABlockedSupernet releases and puts back one of n
// scattered addresses of a live CIDR that covers the lower half of a
// Terminating /16 or /8, which two addresses in its upper half keep
// blocked. Each release re-runs the supernet's decision, which must cost
// the same however many addresses the live half holds, and however large
// the supernet's bitmap (2 MiB for the /8).
func BenchmarkReleaseUnderABlockedSupernet(b *testing.B) {
	ctx := context.Background()
	for _, wide := range []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("10.0.0.0/8")} {
		half := netip.PrefixFrom(wide.Addr(), wide.Bits()+1)
		upper := netip.AddrFrom4([4]byte{10, 0, 200, 1}) // in the /16's upper half
		if wide.Bits() == 8 {
			upper = netip.AddrFrom4([4]byte{10, 200, 0, 1})
		}
		for _, n := range []int{1000, 16000} { // below 16384: not the /17's broadcast
			b.Run(fmt.Sprintf("wide=%d/covered=%d", wide.Bits(), n), func(b *testing.B) {
				st := memory.New()
				a, err := allocator.New(ctx, st)
				if err != nil {
					b.Fatal(err)
				}
				defer a.Close()
				if _, err := a.CreateCIDR(ctx, "wide", wide); err != nil {
					b.Fatal(err)
				}
				if _, err := a.CreateCIDR(ctx, "half", half); err != nil {
					b.Fatal(err)
				}
				for _, x := range []netip.Addr{upper, upper.Next()} {
					if _, err := a.Allocate(ctx, x, svc(x.String())); err != nil {
						b.Fatal(err)
					}
				}
				covered := make([]netip.Addr, n)
				for i := range covered {
					// Every other address, so that each is a run of its own.
					covered[i] = netip.AddrFrom4([4]byte{10, 0, byte(i >> 7), byte(2*i + 1)})
					if _, err := a.Allocate(ctx, covered[i], svc(fmt.Sprint("c", i))); err != nil {
						b.Fatal(err)
					}
				}
				if err := a.DeleteCIDR(ctx, "wide"); !errors.Is(err, allocator.ErrDeletionBlocked) {
					b.Fatalf("DeleteCIDR(wide) = %v, want blocked", err)
				}
				i := 0
				measureCPU(b, func() {
					x := covered[i%n]
					if err := a.Release(ctx, x); err != nil {
						b.Fatal(err)
					}
					if _, err := a.Allocate(ctx, x, svc("back")); err != nil {
						b.Fatal(err)
					}
					i++
				})
			})
		}
	}
}

// BenchmarkBesideBlockedCIDRs runs CIDR changes and releases beside n
// Terminating /24 CIDRs that each stay blocked by two addresses (the pod
// ranges of drained nodes, say). Neither operation can unblock those
// CIDRs, so neither should re-check them: ns/op and cpu-ns/op, which
// counts the background reconciler too, must not grow with n.
func BenchmarkBesideBlockedCIDRs(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{10, 1000} {
		setup := func(b *testing.B) (*allocator.Allocator, *memory.Store) {
			st := memory.New()
			a, err := allocator.New(ctx, st)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = a.Close() })
			for i := range n {
				name := fmt.Sprintf("node-%04d", i)
				if _, err := a.CreateCIDR(ctx, name, netip.PrefixFrom(node(i, 0), 24)); err != nil {
					b.Fatal(err)
				}
				for j := range 2 {
					if _, err := a.Allocate(ctx, node(i, 100+j), svc(fmt.Sprintf("%s-%d", name, j))); err != nil {
						b.Fatal(err)
					}
				}
				if err := a.DeleteCIDR(ctx, name); !errors.Is(err, allocator.ErrDeletionBlocked) {
					b.Fatalf("DeleteCIDR(%s) = %v, want blocked", name, err)
				}
			}
			return a, st
		}
		b.Run(fmt.Sprintf("op=create-delete/blocked=%d", n), func(b *testing.B) {
			a, _ := setup(b)
			extra := netip.MustParsePrefix("172.16.0.0/24")
			measureCPU(b, func() {
				if _, err := a.CreateCIDR(ctx, "extra", extra); err != nil {
					b.Fatal(err)
				}
				if err := a.DeleteCIDR(ctx, "extra"); err != nil {
					b.Fatal(err)
				}
			})
		})
		b.Run(fmt.Sprintf("op=release/blocked=%d", n), func(b *testing.B) {
			a, st := setup(b)
			x := node(0, 100)
			measureCPU(b, func() {
				if err := a.Release(ctx, x); err != nil {
					b.Fatal(err)
				}
				// Back without a fence: a Terminating CIDR takes no allocation.
				if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: x, Parent: svc("back")}}); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// node returns address host of the i-th node's /24, 10.x.y.0/24.
func node(i, host int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), byte(host)})
}

// measureCPU runs op in b.Loop and reports the process's CPU time per op,
// background goroutines included, once they have settled.
func measureCPU(b *testing.B, op func()) {
	time.Sleep(50 * time.Millisecond) // let the setup's reconciles finish
	start := cputime.Process()
	for b.Loop() {
		op()
	}
	time.Sleep(20 * time.Millisecond) // and the loop's last ones
	b.ReportMetric(float64(cputime.Process()-start)/float64(b.N), "cpu-ns/op")
}
