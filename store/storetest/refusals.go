package storetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// ownersAtLimits are owners of store.MaxOwnerLen bytes, split among the
// fields as the stores' encodings find hardest, named for messages (an
// owner is 32 KiB to print).
func ownersAtLimits() map[string]ipaddress.ParentRef {
	n := func(k int) string { return strings.Repeat("n", k) }
	// Text JSON escapes, most of it six bytes for one: the largest value
	// the etcd store writes for an owner.
	odd := "\x00\"\\<>&/%\u2028\u2029é\U0001F600\x7f"
	escaped := odd + strings.Repeat("\x01", store.MaxOwnerLen-len("servicesdefault")-len(odd))
	return map[string]ipaddress.ParentRef{
		"all in group":     {Group: n(store.MaxOwnerLen)},
		"all in resource":  {Resource: n(store.MaxOwnerLen)},
		"all in namespace": {Namespace: n(store.MaxOwnerLen)},
		"all in name":      {Name: n(store.MaxOwnerLen)},
		// Every length two bytes as a varint, the longest three: the
		// longest owner-index key store/bolt writes.
		"longest lengths": {Group: n(128), Resource: n(128), Namespace: n(128), Name: n(store.MaxOwnerLen - 3*128)},
		"all escaped":     {Resource: "services", Namespace: "default", Name: escaped},
	}
}

// ownersPastLimits are owners store.CheckOwner refuses, one way each.
func ownersPastLimits() map[string]ipaddress.ParentRef {
	n := func(k int) string { return strings.Repeat("n", k) }
	return map[string]ipaddress.ParentRef{
		"group one byte long":          {Group: n(store.MaxOwnerLen + 1)},
		"resource one byte long":       {Resource: n(store.MaxOwnerLen + 1)},
		"namespace one byte long":      {Namespace: n(store.MaxOwnerLen + 1)},
		"name one byte long":           {Resource: "services", Name: n(store.MaxOwnerLen + 1 - len("services"))},
		"longest lengths, a byte more": {Group: n(128), Resource: n(128), Namespace: n(128), Name: n(store.MaxOwnerLen - 3*128 + 1)},
		"group not UTF-8":              {Group: "\xff", Resource: "services", Name: "a"},
		"resource not UTF-8":           {Resource: "services\xc3", Name: "a"},                        // cut short
		"namespace not UTF-8":          {Resource: "services", Namespace: "\xed\xa0\x80", Name: "a"}, // a surrogate
		"name not UTF-8":               {Resource: "services", Name: "\xc0\x80"},                     // NUL, overlong
	}
}

// The owners at the limits: every store keeps them, reads them back as
// they were, and finds them by owner; created, and given by
// ReplaceAddressAt. Where the store has CreateAddressLocked, the longest
// and the zero ValidParentRef, all it can be given, through it too.
func testOwnersAtLimits(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCIDR(t, s, "c", "10.0.0.0/16")
	owners := ownersAtLimits()
	names := slices.Sorted(maps.Keys(owners))
	want := map[netip.Addr]ipaddress.IPAddress{}
	for i, name := range names {
		o := owners[name]
		if err := store.CheckOwner(o); err != nil {
			t.Fatalf("%s: CheckOwner refuses the case: %v", name, err)
		}
		// Created with the fence the allocator puts on every create.
		a := netip.AddrFrom4([4]byte{10, 0, 1, byte(i)})
		recs, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: a, Parent: o}}, fenceOf(c))
		if err != nil {
			t.Errorf("CreateAddresses for an owner %s: %v", name, err)
			continue
		}
		want[a] = recs[0]
		// Given by ReplaceAddressAt, from an owner of a few bytes.
		b := netip.AddrFrom4([4]byte{10, 0, 2, byte(i)})
		plain := mustAddr(t, s, b.String(), "plain")
		got, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: b, Parent: o}, plain.Revision)
		if err != nil {
			t.Errorf("ReplaceAddressAt to an owner %s: %v", name, err)
			continue
		}
		want[b] = got
	}
	// The owner indexes of stores that build them on demand are built
	// now, from the records above, and kept by the writes below.
	if _, err := s.AddressesOf(ctx, owner("nobody")); err != nil {
		t.Fatal(err)
	}
	// CreateAddressLocked takes only owners that passed Validate, whose
	// limits are far below these: its longest, and the zero one.
	if l, ok := s.(store.Locked); ok {
		n := func(k int) string { return strings.Repeat("n", k) }
		longest, err := ipaddress.CheckParentRef(ipaddress.ParentRef{Group: n(253), Resource: n(63), Namespace: n(63), Name: n(253)})
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range []ipaddress.ValidParentRef{longest, {}} {
			a := netip.AddrFrom4([4]byte{10, 0, 3, byte(i)})
			l.Mutex().Lock()
			rev, created, err := l.CreateAddressLocked(a, &v, fenceOf(c), nil)
			l.Mutex().Unlock()
			if err != nil {
				t.Errorf("CreateAddressLocked for %.80q: %v", v.ParentRef(), err)
				continue
			}
			want[a] = ipaddress.IPAddress{Addr: a, Parent: v.ParentRef(), Created: created, Revision: rev}
		}
	}
	for a, w := range want {
		if got, err := s.GetAddress(ctx, a); err != nil || !sameRecord(got, w) {
			t.Errorf("GetAddress(%s): revision %d, owner read back as it was %v, %v; want revision %d", a, got.Revision, got.Parent == w.Parent, err, w.Revision)
		}
	}
	for _, name := range names {
		o := owners[name]
		recs, err := s.AddressesOf(ctx, o)
		var addrs []netip.Addr
		for _, r := range recs {
			addrs = append(addrs, r.Addr)
			if !sameRecord(r, want[r.Addr]) {
				t.Errorf("AddressesOf(an owner %s) has %s at revision %d, owner read back as it was %v; want revision %d", name, r.Addr, r.Revision, r.Parent == o, want[r.Addr].Revision)
			}
		}
		var wantAddrs []netip.Addr
		for a, w := range want {
			if w.Parent == o {
				wantAddrs = append(wantAddrs, a)
			}
		}
		slices.SortFunc(wantAddrs, netip.Addr.Compare)
		if err != nil || !slices.Equal(addrs, wantAddrs) {
			t.Errorf("AddressesOf(an owner %s) = %v, %v; want %v", name, addrs, err, wantAddrs)
		}
	}
	all, err := s.ListAddresses(ctx)
	if err != nil || len(all) != len(want) {
		t.Fatalf("ListAddresses: %d records, %v; want %d", len(all), err, len(want))
	}
	for _, r := range all {
		if !sameRecord(r, want[r.Addr]) {
			t.Errorf("ListAddresses has %s at revision %d, owner read back as it was %v; want revision %d", r.Addr, r.Revision, r.Parent == want[r.Addr].Parent, want[r.Addr].Revision)
		}
	}
}

// The owners past the limits: every store refuses them with
// store.CheckOwner's error before it writes anything. A batch is refused
// whole (its storable records come first), a touching fence touches
// nothing, a record to be replaced stays with its owner, and no watcher
// hears of a change: the store's revision did not move.
func testUnstorableOwners(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCIDR(t, s, "c", "10.0.0.0/16")
	kept := mustAddr(t, s, "10.0.0.1", "kept", fenceOf(c))
	r := watch(t, ctx, s)
	touch := fenceOf(c)
	touch.Touch = true
	// A store that tells its revision (store/bolt) shows it unmoved too.
	revisioner, tells := s.(interface {
		Revision(context.Context) (int64, error)
	})
	var rev int64
	if tells {
		var err error
		if rev, err = revisioner.Revision(ctx); err != nil {
			t.Fatal(err)
		}
	}
	owners := ownersPastLimits()
	for _, name := range slices.Sorted(maps.Keys(owners)) {
		o := owners[name]
		if store.CheckOwner(o) == nil {
			t.Fatalf("%s: CheckOwner takes the case", name)
		}
		type call struct {
			name string
			do   func() error
		}
		calls := []call{
			{"CreateAddresses", func() error {
				_, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.2"), Parent: owner("fine")}, {Addr: ip("10.0.0.3"), Parent: o}}, touch)
				return err
			}},
			{"CreateAddresses (large batch)", func() error {
				var big []ipaddress.IPAddress // past the stores' small-batch shortcuts
				for i := range 20 {
					big = append(big, ipaddress.IPAddress{Addr: netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}), Parent: owner("fine")})
				}
				big = append(big, ipaddress.IPAddress{Addr: ip("10.0.0.3"), Parent: o})
				_, err := s.CreateAddresses(ctx, big, touch)
				return err
			}},
			{"ReplaceAddressAt", func() error {
				_, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: kept.Addr, Parent: o}, kept.Revision)
				return err
			}},
		}
		if l, ok := s.(store.Locked); ok {
			calls = append(calls, call{"CreateAddressesLocked", func() error {
				l.Mutex().Lock()
				defer l.Mutex().Unlock()
				_, err := l.CreateAddressesLocked([]ipaddress.IPAddress{{Addr: ip("10.0.0.2"), Parent: owner("fine")}, {Addr: ip("10.0.0.3"), Parent: o}}, []store.Fence{touch})
				return err
			}})
		}
		for _, cl := range calls {
			err := cl.do()
			var fe *ipaddress.FieldError
			if !errors.Is(err, ipaddress.ErrInvalid) || !errors.As(err, &fe) || !strings.HasPrefix(fe.Field, "spec.parentRef") {
				t.Errorf("%s for an owner %s: %.300v; want an *ipaddress.FieldError of spec.parentRef matching ipaddress.ErrInvalid", cl.name, name, err)
			}
		}
		if recs, err := s.AddressesOf(ctx, o); err != nil || len(recs) != 0 {
			t.Errorf("AddressesOf(an owner %s) = %d records, %v; want none, no error", name, len(recs), err)
		}
	}
	if tells {
		if now, err := revisioner.Revision(ctx); err != nil || now != rev {
			t.Errorf("the store's revision after refused writes: %d, %v; want %d", now, err, rev)
		}
	}
	if got, err := s.GetCIDR(ctx, c.Name); err != nil || got.Revision != c.Revision {
		t.Errorf("the CIDR after refused touching creates: revision %d, %v; want %d", got.Revision, err, c.Revision)
	}
	all, err := s.ListAddresses(ctx)
	if err != nil || len(all) != 1 || !sameRecord(all[0], kept) {
		t.Errorf("after refused writes the store holds %d records (%v), want only %s as it was", len(all), err, kept)
	}
	if recs, err := s.AddressesOf(ctx, owner("fine")); err != nil || len(recs) != 0 {
		t.Errorf("AddressesOf(fine) = %d records, %v; want none: every batch was refused", len(recs), err)
	}
	// The next write is the first a watcher hears of since kept.
	last := mustAddr(t, s, "10.0.0.4", "last")
	r.waitRevision(t, last.Revision)
	r.mu.Lock()
	var told []string // not the events: an owner may be 32 KiB
	for _, e := range r.events {
		told = append(told, fmt.Sprintf("%v %s %s at %d", e.Kind, e.CIDR.Name, e.Address.Addr, e.Revision))
	}
	r.mu.Unlock()
	if want := fmt.Sprintf("%v  %s at %d", store.AddressPut, last.Addr, last.Revision); len(told) != 1 || told[0] != want {
		t.Errorf("a watcher since %s was told %q, want %q alone", kept, told, want)
	}
}
