package storetest

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// unstorable are addresses CreateAddresses refuses. The stored addresses of
// testUnstorableLookups are what a careless key encoding maps them onto.
var unstorable = []netip.Addr{{}, ip("fe80::1%eth0"), ip("::ffff:10.0.0.1")}

func testUnstorableLookups(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	kept := []ipaddress.IPAddress{mustAddr(t, s, "::", "zero"), mustAddr(t, s, "fe80::1", "zoned"), mustAddr(t, s, "10.0.0.1", "mapped")}
	for _, a := range unstorable {
		if rec, err := s.GetAddress(ctx, a); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetAddress(%q) = %+v, %v; want ErrNotFound", a, rec, err)
		}
		if rec, _, err := s.DeleteAddress(ctx, a); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("DeleteAddress(%q) = %+v, %v; want ErrNotFound", a, rec, err)
		}
		for _, k := range kept {
			if rec, _, err := s.DeleteAddressAt(ctx, a, k.Revision); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("DeleteAddressAt(%q, %d) = %+v, %v; want ErrNotFound", a, k.Revision, rec, err)
			}
			if rec, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: a, Parent: owner("thief")}, k.Revision); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("ReplaceAddressAt(%q, %d) = %+v, %v; want ErrNotFound", a, k.Revision, rec, err)
			}
		}
	}
	all, err := s.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kept {
		if !slices.ContainsFunc(all, func(r ipaddress.IPAddress) bool { return sameRecord(r, k) }) {
			t.Errorf("the record of %s is gone or changed after lookups of unstorable addresses: %+v", k.Addr, all)
		}
	}
}

func testZeroRevisionsNeverMatch(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCIDR(t, s, "here", "10.0.0.0/24")
	if err := s.DeleteCIDR(ctx, "missing", 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteCIDR(missing, 0): %v, want ErrNotFound", err)
	}
	if err := s.DeleteCIDR(ctx, c.Name, 0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("DeleteCIDR(%s, 0): %v, want ErrConflict", c.Name, err)
	}
	for _, f := range []store.Fence{{CIDR: "missing"}, {CIDR: c.Name}, {CIDR: "missing", Touch: true}, {CIDR: c.Name, Touch: true}} {
		var fe *store.FencedError
		if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.9"), Parent: owner("a")}}, f); !errors.As(err, &fe) || fe.Fence != f {
			t.Errorf("CreateAddresses fenced on %+v: %v, want a FencedError naming it", f, err)
		}
		if err := s.DeleteCIDR(ctx, c.Name, c.Revision, f); !errors.As(err, &fe) || fe.Fence != f {
			t.Errorf("DeleteCIDR(%s) fenced on %+v: %v, want a FencedError naming it", c.Name, f, err)
		}
	}
	if got, err := s.GetCIDR(ctx, c.Name); err != nil || got.Revision != c.Revision {
		t.Errorf("after refused deletes and fences: %+v, %v; want %s unchanged at revision %d", got, err, c.Name, c.Revision)
	}
	if _, err := s.GetAddress(ctx, ip("10.0.0.9")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("a create fenced on revision 0 stored its address: %v", err)
	}
	a := mustAddr(t, s, "10.0.0.7", "b")
	if _, _, err := s.DeleteAddressAt(ctx, a.Addr, 0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("DeleteAddressAt(%s, 0): %v, want ErrConflict", a.Addr, err)
	}
	if _, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: a.Addr, Parent: owner("c")}, 0); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ReplaceAddressAt(%s, 0): %v, want ErrConflict", a.Addr, err)
	}
	if _, _, err := s.DeleteAddressAt(ctx, ip("10.0.0.8"), 0); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteAddressAt(10.0.0.8, 0) of no record: %v, want ErrNotFound", err)
	}
	if got, err := s.GetAddress(ctx, a.Addr); err != nil || got.Revision != a.Revision {
		t.Errorf("after DeleteAddressAt(%s, 0): %+v, %v; want the record kept", a.Addr, got, err)
	}
}

func testUnstorableCIDRs(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	for _, c := range []cidrset.CIDR{
		{Name: "zero", Prefixes: []netip.Prefix{{}}},
		{Name: "second-zero", Prefixes: []netip.Prefix{pfx("10.0.0.0/24"), {}}},
		{Prefixes: []netip.Prefix{pfx("10.0.0.0/24")}},
		// The etcd store would take its key for a nested store's.
		{Name: "a/b", Prefixes: []netip.Prefix{pfx("10.0.0.0/24")}},
		// Past what some store can keep (a bbolt key, a count in a byte).
		{Name: strings.Repeat("n", store.MaxCIDRNameLen+1), Prefixes: []netip.Prefix{pfx("10.0.0.0/24")}},
		{Name: "too-many-prefixes", Prefixes: manyPrefixes(store.MaxCIDRPrefixes + 1)},
	} {
		if got, err := s.CreateCIDR(ctx, c); !errors.Is(err, ipaddress.ErrInvalid) {
			t.Errorf("CreateCIDR(%.100v) = %.100v, %v; want ipaddress.ErrInvalid", c, got, err) // cut: a name may be 32 KiB
		}
		if c.Name == "" {
			continue
		}
		if _, err := s.GetCIDR(ctx, c.Name); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetCIDR(%.100s) after a refused create: %v, want ErrNotFound", c.Name, err)
		}
	}
	// At the limits, every store keeps the CIDR and reads it back.
	edge := cidrset.CIDR{Name: strings.Repeat("e", store.MaxCIDRNameLen), Prefixes: manyPrefixes(store.MaxCIDRPrefixes)}
	if made, err := s.CreateCIDR(ctx, edge); err != nil {
		t.Errorf("CreateCIDR of a %d-byte name with %d prefixes: %v", len(edge.Name), len(edge.Prefixes), err)
	} else if got, err := s.GetCIDR(ctx, edge.Name); err != nil || got.Revision != made.Revision || !slices.Equal(got.Prefixes, edge.Prefixes) {
		t.Errorf("GetCIDR of the CIDR at the limits: %d prefixes, revision %d, %v; want %d prefixes, revision %d", len(got.Prefixes), got.Revision, err, len(edge.Prefixes), made.Revision)
	}
	c := mustCIDR(t, s, "kept", "10.0.0.0/24")
	bad := c.Clone()
	bad.Prefixes = append(bad.Prefixes, netip.Prefix{})
	if _, err := s.UpdateCIDR(ctx, bad); !errors.Is(err, ipaddress.ErrInvalid) {
		t.Errorf("UpdateCIDR to an invalid prefix: %v, want ipaddress.ErrInvalid", err)
	}
	if got, err := s.GetCIDR(ctx, c.Name); err != nil || got.Revision != c.Revision || !slices.Equal(got.Prefixes, c.Prefixes) {
		t.Errorf("after a refused update: %+v, %v; want %+v", got, err, c)
	}
	// A name no CIDR can have: not found, nor does a fence on it hold.
	if _, err := s.UpdateCIDR(ctx, cidrset.CIDR{Name: "a/b", Revision: c.Revision, Prefixes: c.Prefixes}); !errors.Is(err, ipaddress.ErrInvalid) {
		t.Errorf("UpdateCIDR(a/b): %v, want ipaddress.ErrInvalid", err)
	}
	if err := s.DeleteCIDR(ctx, "a/b", c.Revision); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteCIDR(a/b): %v, want ErrNotFound", err)
	}
	for _, f := range []store.Fence{{CIDR: "a/b", Revision: c.Revision}, {CIDR: "a/b", Revision: c.Revision, Touch: true}} {
		var fe *store.FencedError
		if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.9"), Parent: owner("a")}}, f); !errors.As(err, &fe) || fe.Fence != f {
			t.Errorf("CreateAddresses fenced on %+v: %v, want a FencedError naming it", f, err)
		}
		if err := s.DeleteCIDR(ctx, c.Name, c.Revision, f); !errors.As(err, &fe) || fe.Fence != f {
			t.Errorf("DeleteCIDR(%s) fenced on %+v: %v, want a FencedError naming it", c.Name, f, err)
		}
	}
	// The store still watches: nothing it cannot decode was written.
	if err := s.Watch(ctx, &recorder{}); err != nil {
		t.Errorf("Watch after refused writes: %v", err)
	}
}

func testTouchTwice(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCIDR(t, s, "c", "10.0.0.0/24")
	touch := fenceOf(c)
	touch.Touch = true
	r := watch(t, ctx, s)
	rec := mustAddr(t, s, "10.0.0.5", "twice", touch, touch)
	got, err := s.GetCIDR(ctx, "c")
	if err != nil || got.Revision != rec.Revision {
		t.Fatalf("a CIDR touched twice by one create: %+v, %v; want it at the record's revision %d", got, err, rec.Revision)
	}
	// One change of the CIDR, one event: a second would be a change that
	// did not happen. The next write fences the events in. (CIDRPut sorts
	// before AddressPut.)
	mustAddr(t, s, "10.0.0.6", "after")
	evs := r.waitEvents(t, 3)
	var kinds []store.EventKind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	slices.Sort(kinds) // the order within one revision is the store's
	if want := []store.EventKind{store.CIDRPut, store.AddressPut, store.AddressPut}; !slices.Equal(kinds, want) {
		t.Fatalf("events of a create touching one CIDR twice, then a create: %v, want %v", kinds, want)
	}
}

// manyPrefixes returns n distinct IPv4 /24 prefixes.
func manyPrefixes(n int) []netip.Prefix {
	ps := make([]netip.Prefix, n)
	for i := range ps {
		ps[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
	}
	return ps
}
