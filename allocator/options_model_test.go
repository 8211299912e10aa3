package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"go4.org/netipx"
	"pgregory.net/rapid"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// ignoringObserver is set only so that allocations take the observed path.
type ignoringObserver struct{}

func (ignoringObserver) Allocated(allocator.AllocationEvent) {}

// modelExcluded are the ranges a run may exclude: part of a band, every
// host of 10.0.0.0/28 (most of the lower band of the /27 over it), one
// of a /30's two hosts.
var modelExcluded = []netipx.IPRange{
	netipx.MustParseIPRange("10.0.0.20-10.0.0.22"),
	netipx.MustParseIPRange("10.0.0.1-10.0.0.14"),
	netipx.MustParseIPRange("fd00::11-fd00::1f"),
	netipx.MustParseIPRange("10.0.1.1-10.0.1.1"),
}

// excludedHas reports whether a lies in one of ex.
func excludedHas(ex []netipx.IPRange, a netip.Addr) bool {
	for _, r := range ex {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// optionPrefixes overlap, nest and span both families, small enough for
// the model to count every address, but for 10.0.0.0/7 and fd00::/100
// (whose usage it does not count).
var optionPrefixes = []string{
	"10.0.0.0/28", "10.0.0.0/27", "10.0.0.16/28", "10.0.1.0/30",
	"fd00::/124", "fd00::/123", "fd00::10/124", "10.0.0.0/7", "fd00::/100",
}

// TestOptionsPoliciesAndExclusionsKeepTheModel is the model test of
// model_test.go with the options an embedder sets: a CIDR policy
// (MostFree, RandomOrder, a custom one), excluded ranges (some covering a
// whole band), an observer, dual-stack CIDRs and UpdateCIDR to dual stack,
// AllocateDualStack and ReleaseOwner; two allocators share one memory
// store, one through its lock (store.Locked), one as a remote store's.
// After every step: no address held twice or excluded, none outside a
// live CIDR of its family, ErrFull only when the model has no free
// address, no record outside every CIDR left, and exact usage counts.
func TestOptionsPoliciesAndExclusionsKeepTheModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		st := memory.New()
		var opts []allocator.Option
		pol := rapid.IntRange(0, 3).Draw(rt, "policy")
		switch pol {
		case 1:
			opts = append(opts, allocator.WithPolicy(allocator.MostFree()))
		case 2:
			opts = append(opts, allocator.WithPolicy(allocator.RandomOrder()))
		case 3:
			opts = append(opts, allocator.WithPolicy(allocator.PolicyFunc(func(c []allocator.Candidate) { slices.Reverse(c) })))
		}
		var ex []netipx.IPRange
		for i, r := range modelExcluded {
			if rapid.Bool().Draw(rt, fmt.Sprint("ex", i)) {
				ex = append(ex, r)
			}
		}
		if len(ex) > 0 {
			opts = append(opts, allocator.WithExcluded(ex...))
		}
		if rapid.Bool().Draw(rt, "observer") {
			opts = append(opts, allocator.WithObserver(ignoringObserver{}))
		}
		opts = append(opts, allocator.WithStrategy(allocator.Sequential()))
		var as []*allocator.Allocator
		for _, s := range []store.Store{st, unlockedStore{st}} {
			a, err := allocator.New(ctx, s, opts...)
			if err != nil {
				rt.Fatal(err)
			}
			defer a.Close()
			as = append(as, a)
		}
		m := &model{cidrs: map[string]*modelCIDR{}, addrs: map[netip.Addr]string{}}
		names := []string{"a", "b", "c", "d", "e"}
		serial := 0
		// By index: a drawn value is printed on failure, and an allocator
		// prints as pages of its fields.
		pick := func(rt *rapid.T) *allocator.Allocator {
			return as[rapid.IntRange(0, len(as)-1).Draw(rt, "allocator (0 locked, 1 remote)")]
		}
		familyOf := rapid.SampledFrom([]ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6})
		hasFree := func(f ipaddress.Family) bool {
			for _, c := range m.cidrs {
				if c.terminating {
					continue
				}
				for _, p := range c.prefixes {
					if ipaddress.FamilyOf(p.Addr()) != f {
						continue
					}
					if p.Bits() < 20 || p.Addr().Is6() && p.Bits() < 110 {
						return true
					}
					r, ok := cidrset.HostRange(p)
					for a := r.From(); ok; a = a.Next() {
						if _, held := m.addrs[a]; !held && !excludedHas(ex, a) {
							return true
						}
						if a == r.To() {
							break
						}
					}
				}
			}
			return false
		}
		rt.Repeat(map[string]func(*rapid.T){
			"createCIDR": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				p := pfx(rapid.SampledFrom(optionPrefixes).Draw(rt, "prefix"))
				ps := []netip.Prefix{p}
				if rapid.Bool().Draw(rt, "dual") {
					q := pfx(rapid.SampledFrom(optionPrefixes).Draw(rt, "prefix2"))
					if q.Addr().Is4() == p.Addr().Is4() {
						return
					}
					ps = append(ps, q)
				}
				_, err := pick(rt).CreateCIDR(ctx, name, ps...)
				if _, exists := m.cidrs[name]; exists {
					if !errors.Is(err, allocator.ErrExists) {
						rt.Fatalf("CreateCIDR of existing %s: %v", name, err)
					}
					return
				}
				if err != nil {
					rt.Fatalf("CreateCIDR(%s, %s): %v", name, ps, err)
				}
				m.cidrs[name] = &modelCIDR{prefixes: ps}
				m.settle()
			},
			"updateCIDR": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				c, exists := m.cidrs[name]
				if !exists || len(c.prefixes) != 1 {
					return
				}
				q := pfx(rapid.SampledFrom(optionPrefixes).Draw(rt, "prefix2"))
				if q.Addr().Is4() == c.prefixes[0].Addr().Is4() {
					return
				}
				ps := []netip.Prefix{c.prefixes[0], q}
				if _, err := pick(rt).UpdateCIDR(ctx, name, ps...); err != nil {
					rt.Fatalf("UpdateCIDR(%s, %v): %v", name, ps, err)
				}
				c.prefixes = ps
				m.settle()
			},
			"deleteCIDR": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				err := pick(rt).DeleteCIDR(ctx, name)
				c, exists := m.cidrs[name]
				if !exists {
					if !errors.Is(err, allocator.ErrNotFound) {
						rt.Fatalf("DeleteCIDR of missing %s: %v", name, err)
					}
					return
				}
				c.terminating = true
				m.settle()
				_, stays := m.cidrs[name]
				if stays != errors.Is(err, allocator.ErrDeletionBlocked) || (!stays && err != nil) {
					rt.Fatalf("DeleteCIDR(%s) = %v; model keeps it: %v", name, err, stays)
				}
			},
			"allocateNext": func(rt *rapid.T) {
				f := familyOf.Draw(rt, "family")
				serial++
				owner := fmt.Sprint("o", serial)
				r, err := pick(rt).AllocateNext(ctx, f, svc(owner))
				if err != nil {
					if hasFree(f) {
						rt.Fatalf("AllocateNext(%v): %v, but the model has a free address", f, err)
					}
					if !errors.Is(err, allocator.ErrFull) && !errors.Is(err, allocator.ErrMismatch) {
						rt.Fatalf("AllocateNext(%v): unexpected %v", f, err)
					}
					return
				}
				if _, held := m.addrs[r.Addr]; held {
					rt.Fatalf("AllocateNext handed out %s, held by %s", r.Addr, m.addrs[r.Addr])
				}
				if excludedHas(ex, r.Addr) {
					rt.Fatalf("AllocateNext handed out excluded %s", r.Addr)
				}
				if ipaddress.FamilyOf(r.Addr) != f || !m.liveContaining(r.Addr, "") {
					rt.Fatalf("AllocateNext(%v) = %s, not in a live CIDR of the family", f, r.Addr)
				}
				m.addrs[r.Addr] = owner
			},
			"allocateDual": func(rt *rapid.T) {
				serial++
				owner := fmt.Sprint("o", serial)
				v4, v6, err := pick(rt).AllocateDualStack(ctx, svc(owner), netip.Addr{}, netip.Addr{})
				if err != nil {
					if hasFree(ipaddress.IPv4) && hasFree(ipaddress.IPv6) {
						rt.Fatalf("AllocateDualStack: %v, but the model has free addresses", err)
					}
					return
				}
				for _, r := range []ipaddress.IPAddress{v4, v6} {
					if _, held := m.addrs[r.Addr]; held || excludedHas(ex, r.Addr) || !m.liveContaining(r.Addr, "") {
						rt.Fatalf("AllocateDualStack handed out %s (held %v)", r.Addr, held)
					}
					m.addrs[r.Addr] = owner
				}
			},
			"allocateStatic": func(rt *rapid.T) {
				base := pfx(rapid.SampledFrom(optionPrefixes).Draw(rt, "within"))
				r, _ := cidrset.HostRange(base)
				addr := r.From()
				for n := rapid.IntRange(0, 40).Draw(rt, "offset"); n > 0 && addr.Next().IsValid(); n-- {
					addr = addr.Next()
				}
				serial++
				owner := fmt.Sprint("o", serial)
				_, err := pick(rt).Allocate(ctx, addr, svc(owner))
				_, held := m.addrs[addr]
				switch {
				case !m.liveContaining(addr, ""):
					if !errors.Is(err, allocator.ErrNotInRange) && !errors.Is(err, allocator.ErrMismatch) {
						rt.Fatalf("Allocate(%s) outside live CIDRs: %v", addr, err)
					}
				case excludedHas(ex, addr):
					if !errors.Is(err, allocator.ErrExcluded) {
						rt.Fatalf("Allocate(%s) excluded: %v", addr, err)
					}
				case held:
					if !errors.Is(err, allocator.ErrAllocated) {
						rt.Fatalf("Allocate(%s) held: %v", addr, err)
					}
				case err != nil:
					rt.Fatalf("Allocate(%s): %v", addr, err)
				default:
					m.addrs[addr] = owner
				}
			},
			"release": func(rt *rapid.T) {
				if len(m.addrs) == 0 {
					rt.Skip("nothing held")
				}
				held := make([]netip.Addr, 0, len(m.addrs))
				for a := range m.addrs {
					held = append(held, a)
				}
				slices.SortFunc(held, netip.Addr.Compare)
				addr := rapid.SampledFrom(held).Draw(rt, "addr")
				if rapid.Bool().Draw(rt, "byOwner") {
					owner := m.addrs[addr]
					got, err := pick(rt).ReleaseOwner(ctx, svc(owner))
					if err != nil {
						rt.Fatal(err)
					}
					for _, g := range got {
						if m.addrs[g] != owner {
							rt.Fatalf("ReleaseOwner released %s of %s", g, m.addrs[g])
						}
						delete(m.addrs, g)
					}
					for a, o := range m.addrs {
						if o == owner {
							rt.Fatalf("ReleaseOwner left %s", a)
						}
					}
				} else {
					if err := pick(rt).Release(ctx, addr); err != nil {
						rt.Fatalf("Release(%s): %v", addr, err)
					}
					delete(m.addrs, addr)
				}
				m.settle()
			},
			"": func(rt *rapid.T) { checkOptionsModel(rt, ctx, st, as, m, ex) },
		})
	})
}

func checkOptionsModel(rt *rapid.T, ctx context.Context, st *memory.Store, as []*allocator.Allocator, m *model, ex []netipx.IPRange) {
	recs, err := st.ListAddresses(ctx)
	if err != nil {
		rt.Fatal(err)
	}
	if len(recs) != len(m.addrs) {
		rt.Fatalf("store holds %d records, model %d", len(recs), len(m.addrs))
	}
	for _, r := range recs {
		if m.addrs[r.Addr] != r.Parent.Name {
			rt.Fatalf("record %s owned by %s, model says %q", r.Addr, r.Parent.Name, m.addrs[r.Addr])
		}
		inside := false
		for _, c := range m.cidrs {
			for _, p := range c.prefixes {
				inside = inside || cidrset.HostContains(p, r.Addr)
			}
		}
		if !inside {
			rt.Fatalf("record %s is outside every remaining CIDR", r.Addr)
		}
	}
	for _, a := range as {
		cidrs := a.CIDRs()
		if len(cidrs) != len(m.cidrs) {
			rt.Fatalf("allocator knows %d CIDRs, model %d", len(cidrs), len(m.cidrs))
		}
		for _, c := range cidrs {
			mc := m.cidrs[c.Name]
			if mc == nil || mc.terminating != c.Terminating || !slices.Equal(mc.prefixes, c.Prefixes) {
				rt.Fatalf("CIDR %s terminating=%v %v, model %+v", c.Name, c.Terminating, c.Prefixes, mc)
			}
			u, err := a.Usage(c.Name)
			if err != nil {
				rt.Fatal(err)
			}
			for _, pu := range u.Prefixes {
				var used, exFree uint64
				r, ok := cidrset.HostRange(pu.Prefix)
				if pu.Prefix.Bits() > 110 || pu.Prefix.Addr().Is4() && pu.Prefix.Bits() > 20 {
					for x := r.From(); ok; x = x.Next() {
						_, h := m.addrs[x]
						if h {
							used++
						} else if excludedHas(ex, x) {
							exFree++
						}
						if x == r.To() {
							break
						}
					}
					if pu.Used != cidrset.CountOf(used) || pu.Used.Add(pu.Free).Add(cidrset.CountOf(exFree)) != pu.Size {
						rt.Fatalf("usage of %s %s = %+v, model used %d exFree %d", c.Name, pu.Prefix, pu.Usage, used, exFree)
					}
				}
			}
		}
	}
}
