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

// The prefixes the model draws from: small enough to fill, overlapping and
// identical on purpose, both families; one per family too large for a
// bitmap (see used.go), covering the small ones, so that addresses move
// between the two kinds of index as CIDRs come and go, and an IPv6 /64
// around those (of nested prefixes, the sparse index keeps the lone
// addresses in the outermost's table); and the edges of
// both address spaces: the whole space, and the last /30, /31, /32 (/127,
// /128), which offer one address or none.
var modelPrefixes = []string{
	"10.0.0.0/28", "10.0.0.0/27", "10.0.0.16/28", "10.0.0.0/28",
	"10.0.1.0/30", "fd00::/124", "fd00::/123", "fd00::10/124",
	"10.0.0.0/7", "fd00::/100", "fd00::/64",
	"0.0.0.0/0", "255.255.255.252/30", "255.255.255.254/31", "255.255.255.255/32",
	"::/0", "::/127", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128",
}

type modelCIDR struct {
	prefixes    []netip.Prefix
	terminating bool
}

// model is the simplest thing that follows SPEC sections 2–4.
type model struct {
	cidrs    map[string]*modelCIDR
	addrs    map[netip.Addr]string // address → owner name
	excluded []netipx.IPRange      // allocator.WithExcluded's
}

// modelExcluded are the ranges a run may exclude: part of a band, every
// host of 10.0.0.0/28 (most of the lower band of the /27 over it), one
// of a /30's two hosts, part of an IPv6 /124.
var modelExcluded = []netipx.IPRange{
	netipx.MustParseIPRange("10.0.0.20-10.0.0.22"),
	netipx.MustParseIPRange("10.0.0.1-10.0.0.14"),
	netipx.MustParseIPRange("fd00::11-fd00::1f"),
	netipx.MustParseIPRange("10.0.1.1-10.0.1.1"),
}

func (m *model) isExcluded(a netip.Addr) bool {
	return slices.ContainsFunc(m.excluded, func(r netipx.IPRange) bool { return r.Contains(a) })
}

func (m *model) liveContaining(a netip.Addr, except string) bool {
	for name, c := range m.cidrs {
		if name == except || c.terminating {
			continue
		}
		for _, p := range c.prefixes {
			if cidrset.HostContains(p, a) {
				return true
			}
		}
	}
	return false
}

// settle removes every Terminating CIDR that no longer guards an address
// only it contains, as the finalizer must.
func (m *model) settle() {
	for name, c := range m.cidrs {
		if !c.terminating {
			continue
		}
		blocked := false
		for a := range m.addrs {
			for _, p := range c.prefixes {
				if cidrset.HostContains(p, a) && !m.liveContaining(a, name) {
					blocked = true
				}
			}
		}
		if !blocked {
			delete(m.cidrs, name)
		}
	}
}

func (m *model) hasFree(f ipaddress.Family) bool {
	for _, c := range m.cidrs {
		if c.terminating {
			continue
		}
		for _, p := range c.prefixes {
			if ipaddress.FamilyOf(p.Addr()) != f {
				continue
			}
			r, ok := cidrset.HostRange(p)
			for a := r.From(); ok; a = a.Next() {
				if _, held := m.addrs[a]; !held && !m.isExcluded(a) {
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

// ignoringObserver is set only so that allocations take the observed path.
type ignoringObserver struct{}

func (ignoringObserver) Allocated(allocator.AllocationEvent) {}

// TestAllocatorFollowsTheModel drives two allocators sharing one memory
// store, with the options an embedder sets drawn for each run (a CIDR
// policy, excluded ranges, an observer), through CIDRs created (single or
// dual stack), updated to dual stack and deleted, and addresses allocated
// (next, static, dual stack) and released (by address or by owner), and
// checks them against the model after every step.
func TestAllocatorFollowsTheModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		st := memory.New()
		m := &model{cidrs: map[string]*modelCIDR{}, addrs: map[netip.Addr]string{}}
		opts := []allocator.Option{allocator.WithStrategy(allocator.Sequential())}
		switch rapid.IntRange(0, 3).Draw(rt, "policy (0 oldest first, 1 most free, 2 random, 3 reversed)") {
		case 1:
			opts = append(opts, allocator.WithPolicy(allocator.MostFree()))
		case 2:
			opts = append(opts, allocator.WithPolicy(allocator.RandomOrder()))
		case 3:
			opts = append(opts, allocator.WithPolicy(allocator.PolicyFunc(func(c []allocator.Candidate) { slices.Reverse(c) })))
		}
		for i, r := range modelExcluded {
			if rapid.Bool().Draw(rt, fmt.Sprint("exclude ", r)) {
				m.excluded = append(m.excluded, modelExcluded[i])
			}
		}
		if len(m.excluded) > 0 {
			opts = append(opts, allocator.WithExcluded(m.excluded...))
		}
		if rapid.Bool().Draw(rt, "observer") {
			opts = append(opts, allocator.WithObserver(ignoringObserver{}))
		}
		// Huge pools keep lone addresses in tables once they hold
		// activeFrom; from 1 or 3, the model's few addresses reach them.
		activeFrom := rapid.SampledFrom([]int{1, 3, 0}).Draw(rt, "sparse activeFrom (0: default)")
		// Two allocators share the store, like two apiservers: one shares
		// its lock, the other takes the remote-store path.
		var as []*allocator.Allocator
		for _, s := range []store.Store{st, unlockedStore{st}} {
			a, err := allocator.New(ctx, s, opts...)
			if err != nil {
				rt.Fatal(err)
			}
			defer a.Close()
			if activeFrom > 0 {
				allocator.SetSparseActiveFrom(a, activeFrom)
			}
			as = append(as, a)
		}
		names := []string{"a", "b", "c", "d", "e"}
		serial := 0
		// By index: a drawn value is printed on failure, and an allocator
		// prints as pages of its fields.
		pick := func(rt *rapid.T) *allocator.Allocator {
			return as[rapid.IntRange(0, len(as)-1).Draw(rt, "allocator (0 locked, 1 remote)")]
		}
		familyOf := rapid.SampledFrom([]ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6})
		// otherFamily draws a prefix of the family p is not of, or reports
		// false.
		otherFamily := func(rt *rapid.T, p netip.Prefix) (netip.Prefix, bool) {
			q := pfx(rapid.SampledFrom(modelPrefixes).Draw(rt, "second prefix"))
			return q, q.Addr().Is4() != p.Addr().Is4()
		}

		rt.Repeat(map[string]func(*rapid.T){
			"createCIDR": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				ps := []netip.Prefix{pfx(rapid.SampledFrom(modelPrefixes).Draw(rt, "prefix"))}
				if rapid.Bool().Draw(rt, "dual stack") {
					q, ok := otherFamily(rt, ps[0])
					if !ok {
						rt.Skip("two prefixes of one family")
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
			"updateCIDR to dual stack": func(rt *rapid.T) {
				name := rapid.SampledFrom(names).Draw(rt, "name")
				c, exists := m.cidrs[name]
				if !exists || c.terminating || len(c.prefixes) != 1 {
					rt.Skip("no live single-stack CIDR of that name")
				}
				q, ok := otherFamily(rt, c.prefixes[0])
				if !ok {
					rt.Skip("a second prefix of the same family")
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
					if m.hasFree(f) {
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
				if ipaddress.FamilyOf(r.Addr) != f || !m.liveContaining(r.Addr, "") || m.isExcluded(r.Addr) {
					rt.Fatalf("AllocateNext(%v) = %s, not in a live CIDR of the family, or excluded", f, r.Addr)
				}
				m.addrs[r.Addr] = owner
			},
			"allocateDualStack": func(rt *rapid.T) {
				serial++
				owner := fmt.Sprint("o", serial)
				v4, v6, err := pick(rt).AllocateDualStack(ctx, svc(owner), netip.Addr{}, netip.Addr{})
				if err != nil {
					if m.hasFree(ipaddress.IPv4) && m.hasFree(ipaddress.IPv6) {
						rt.Fatalf("AllocateDualStack: %v, but the model has a free address of each family", err)
					}
					return // both or neither: checkInvariants finds a half
				}
				for _, r := range []ipaddress.IPAddress{v4, v6} {
					if _, held := m.addrs[r.Addr]; held || m.isExcluded(r.Addr) || !m.liveContaining(r.Addr, "") {
						rt.Fatalf("AllocateDualStack handed out %s (held: %v)", r.Addr, held)
					}
					m.addrs[r.Addr] = owner
				}
			},
			"allocateStatic": func(rt *rapid.T) {
				base := pfx(rapid.SampledFrom(modelPrefixes).Draw(rt, "within"))
				r, ok := cidrset.HostRange(base)
				addr := r.From()
				if !ok {
					addr = base.Addr() // a prefix that offers nothing: its network address
				}
				for n := rapid.IntRange(0, 16).Draw(rt, "offset"); n > 0 && addr.Next().IsValid(); n-- {
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
				case m.isExcluded(addr):
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
				if !rapid.Bool().Draw(rt, "by owner") {
					if err := pick(rt).Release(ctx, addr); err != nil {
						rt.Fatalf("Release(%s): %v", addr, err)
					}
					delete(m.addrs, addr)
					m.settle()
					return
				}
				owner := m.addrs[addr]
				got, err := pick(rt).ReleaseOwner(ctx, svc(owner))
				if err != nil {
					rt.Fatal(err)
				}
				for _, g := range got {
					if m.addrs[g] != owner {
						rt.Fatalf("ReleaseOwner(%s) released %s, held by %q", owner, g, m.addrs[g])
					}
					delete(m.addrs, g)
				}
				for a, o := range m.addrs {
					if o == owner {
						rt.Fatalf("ReleaseOwner(%s) left %s", owner, a)
					}
				}
				m.settle()
			},
			"": func(rt *rapid.T) { checkInvariants(rt, ctx, st, as, m) },
		})
	})
}

func checkInvariants(rt *rapid.T, ctx context.Context, st *memory.Store, as []*allocator.Allocator, m *model) {
	recs, err := st.ListAddresses(ctx)
	if err != nil {
		rt.Fatal(err)
	}
	// The store holds exactly the model's addresses: nothing held twice,
	// nothing lost.
	if len(recs) != len(m.addrs) {
		rt.Fatalf("store holds %d records, model %d", len(recs), len(m.addrs))
	}
	for _, r := range recs {
		if m.addrs[r.Addr] != r.Parent.Name {
			rt.Fatalf("record %s owned by %s, model says %q", r.Addr, r.Parent.Name, m.addrs[r.Addr])
		}
		// Every record is inside a CIDR that has not been removed.
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
			// Counts match the model.
			u, err := a.Usage(c.Name)
			if err != nil {
				rt.Fatal(err)
			}
			for _, pu := range u.Prefixes {
				var used uint64
				for addr := range m.addrs {
					if cidrset.HostContains(pu.Prefix, addr) {
						used++
					}
				}
				// The IPv4-mapped addresses a prefix offers are never
				// allocated nor counted free (SPEC §1: no record holds one).
				var mapped cidrset.Count
				if pu.Prefix.Addr().Is6() && pu.Prefix.Bits() <= 96 && pu.Prefix.Contains(netip.MustParseAddr("::ffff:0.0.0.0")) {
					mapped = cidrset.CountOf(1 << 32)
				}
				// Nor are the excluded ones it offers, but those held.
				var excluded uint64
				for _, r := range m.excluded {
					for x := r.From(); r.Contains(x); x = x.Next() {
						if _, held := m.addrs[x]; !held && cidrset.HostContains(pu.Prefix, x) {
							excluded++
						}
					}
				}
				if pu.Used != cidrset.CountOf(used) || pu.Used.Add(pu.Free).Add(mapped).Add(cidrset.CountOf(excluded)) != pu.Size {
					rt.Fatalf("usage of %s %s = %+v, model used %d, excluded free %d", c.Name, pu.Prefix, pu.Usage, used, excluded)
				}
			}
		}
	}
}
