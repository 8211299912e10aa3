// Package storetest is the conformance suite every store.Store runs from its
// own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) store.Store { return memory.New() })
//	}
//
// It checks the contract allocators rely on: create-if-absent uniqueness
// under concurrency, fencing on CIDR revisions, strictly increasing
// revisions, the owner index, and a watch that delivers every change in
// order.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// NewStore returns a new, empty store for one test. The suite closes it.
type NewStore func(t *testing.T) store.Store

// Run runs every conformance test against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(*testing.T, store.Store)
	}{
		{"CIDRCreateGetAndExists", testCIDRCreate},
		{"CIDRUpdateIsOptimistic", testCIDRUpdate},
		{"CIDRDeleteIsFencedOnRevisions", testCIDRDelete},
		{"AddressCreateGetDelete", testAddressLifecycle},
		{"AddressDeleteAtIsConditionalOnRevision", testAddressDeleteAt},
		{"AddressReplaceAtKeepsTheAddressHeld", testAddressReplaceAt},
		{"AddressBatchIsAllOrNothing", testAddressBatch},
		{"LockedPairIsBothOrNeither", testPairLocked},
		{"AddressCreateIsFencedOnCIDRRevision", testAddressFence},
		{"FencedSeenIsReachedByAWatch", testFencedSeen},
		{"EmptyAddressBatchTakesNoRevision", testEmptyBatch},
		{"TouchingFenceGivesTheCIDRANewRevision", testAddressFenceTouch},
		{"OwnerIndex", testOwnerIndex},
		{"OwnerIndexTakesAnyOwner", testOwnerIndexTakesAnyOwner},
		{"OwnerIndexSinceARevision", testOwnerIndexSince},
		{"RecordsDeleteIsAllOrNothing", testDeleteRecords},
		{"RecordsReplaceIsAllOrNothing", testReplaceRecords},
		{"RevisionsStrictlyIncrease", testRevisions},
		{"WatchResetThenEveryChangeInOrder", testWatch},
		{"WatchStopsWithContext", testWatchStops},
		{"WatchRefusesANilWatcher", testWatchNil},
		{"ConcurrentCreatesOfOneAddressHaveOneWinner", testRaceOneWinner},
		{"FencedCreatesRacingACIDRUpdate", testRaceFence},
		{"ConcurrentDistinctCreatesAllSucceed", testDistinctCreates},
		{"UnstorableAddressesAreInvalid", testInvalidAddress},
		{"UnstorableAddressesHaveNoRecord", testUnstorableLookups},
		{"UnstorableCIDRsAreInvalid", testUnstorableCIDRs},
		{"OwnersAtTheLimitsAreKept", testOwnersAtLimits},
		{"UnstorableOwnersAreInvalid", testUnstorableOwners},
		{"RevisionZeroNeverMatches", testZeroRevisionsNeverMatch},
		{"RandomCallsFollowAModel", testRandomCallsFollowAModel},
		{"OneCreateMayNameATouchTwice", testTouchTwice},
		{"ClosedStoreRefusesCalls", testClosed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func ip(s string) netip.Addr    { return netip.MustParseAddr(s) }

func owner(name string) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: name}
}

func mustCIDR(t *testing.T, s store.Store, name string, prefixes ...string) cidrset.CIDR {
	t.Helper()
	c := cidrset.CIDR{Name: name}
	for _, p := range prefixes {
		c.Prefixes = append(c.Prefixes, pfx(p))
	}
	got, err := s.CreateCIDR(ctxT(t), c)
	if err != nil {
		t.Fatalf("CreateCIDR(%s): %v", name, err)
	}
	return got
}

func fenceOf(c cidrset.CIDR) store.Fence { return store.Fence{CIDR: c.Name, Revision: c.Revision} }

func mustAddr(t *testing.T, s store.Store, addr, ownerName string, fences ...store.Fence) ipaddress.IPAddress {
	t.Helper()
	recs, err := s.CreateAddresses(ctxT(t), []ipaddress.IPAddress{{Addr: ip(addr), Parent: owner(ownerName)}}, fences...)
	if err != nil {
		t.Fatalf("CreateAddresses(%s): %v", addr, err)
	}
	return recs[0]
}

func testCIDRCreate(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	before := time.Now().Add(-time.Minute)
	c := mustCIDR(t, s, "dual", "10.0.0.0/16", "fd00:10::/108")
	if c.Revision <= 0 || c.Created.Before(before) {
		t.Fatalf("created CIDR has revision %d, created %v", c.Revision, c.Created)
	}
	got, err := s.GetCIDR(ctx, "dual")
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "dual" || !slices.Equal(got.Prefixes, c.Prefixes) || got.Revision != c.Revision || !got.Created.Equal(c.Created) || got.Terminating {
		t.Fatalf("GetCIDR = %+v, want %+v", got, c)
	}
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "dual", Prefixes: []netip.Prefix{pfx("10.1.0.0/16")}}); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second CreateCIDR: %v, want ErrExists", err)
	}
	if _, err := s.GetCIDR(ctx, "missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetCIDR(missing): %v, want ErrNotFound", err)
	}
}

func testCIDRUpdate(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCIDR(t, s, "single", "10.0.0.0/24")
	upd := c.Clone()
	upd.Prefixes = append(upd.Prefixes, pfx("2001:db8::/64"))
	upd.Terminating = true
	got, err := s.UpdateCIDR(ctx, upd)
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision <= c.Revision || !got.Created.Equal(c.Created) || !got.Terminating || len(got.Prefixes) != 2 {
		t.Fatalf("UpdateCIDR = %+v (was %+v)", got, c)
	}
	if _, err := s.UpdateCIDR(ctx, upd); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("update at stale revision: %v, want ErrConflict", err)
	}
	reread, err := s.GetCIDR(ctx, "single")
	if err != nil || reread.Revision != got.Revision || !reread.Terminating {
		t.Fatalf("GetCIDR after update = %+v, %v", reread, err)
	}
	if _, err := s.UpdateCIDR(ctx, cidrset.CIDR{Name: "missing", Revision: 1, Prefixes: []netip.Prefix{pfx("10.0.0.0/8")}}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("update of missing CIDR: %v, want ErrNotFound", err)
	}
}

func testCIDRDelete(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	a := mustCIDR(t, s, "a", "10.0.0.0/24")
	b := mustCIDR(t, s, "b", "10.0.0.0/23")
	if err := s.DeleteCIDR(ctx, "a", a.Revision-1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete at wrong revision: %v, want ErrConflict", err)
	}
	stale := fenceOf(b)
	stale.Revision--
	err := s.DeleteCIDR(ctx, "a", a.Revision, stale)
	var fe *store.FencedError
	if !errors.Is(err, store.ErrFenced) || !errors.As(err, &fe) || fe.Fence != stale {
		t.Fatalf("delete with a failing fence: %v, want *FencedError for %v", err, stale)
	}
	if fe.Seen < b.Revision {
		t.Fatalf("FencedError.Seen = %d, before b's revision %d", fe.Seen, b.Revision)
	}
	if err := s.DeleteCIDR(ctx, "a", a.Revision, store.Fence{CIDR: "gone", Revision: 1}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("delete fenced on a missing CIDR: %v, want ErrFenced", err)
	}
	if _, err := s.GetCIDR(ctx, "a"); err != nil {
		t.Fatalf("refused deletes removed the CIDR: %v", err)
	}
	if err := s.DeleteCIDR(ctx, "a", a.Revision, fenceOf(b)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetCIDR(ctx, "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetCIDR after delete: %v, want ErrNotFound", err)
	}
	if err := s.DeleteCIDR(ctx, "a", a.Revision); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
}

func testAddressLifecycle(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCIDR(t, s, "v6", "2001:db8::/48")
	ref := ipaddress.ParentRef{Group: "example.com", Resource: "widgets", Namespace: "ns-1", Name: "w.1"}
	recs, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("2001:db8::ffff:1"), Parent: ref}}, fenceOf(c))
	if err != nil {
		t.Fatal(err)
	}
	r := recs[0]
	if r.Revision <= c.Revision || r.Created.IsZero() || r.Parent != ref {
		t.Fatalf("created record %+v", r)
	}
	got, err := s.GetAddress(ctx, ip("2001:db8::ffff:1"))
	if err != nil || got.Parent != ref || got.Revision != r.Revision || !got.Created.Equal(r.Created) {
		t.Fatalf("GetAddress = %+v, %v; want %+v", got, err, r)
	}
	_, err = s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("2001:db8::ffff:1"), Parent: owner("other")}})
	var ex *store.AddressExistsError
	if !errors.As(err, &ex) || ex.Addr != ip("2001:db8::ffff:1") || !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: %v, want *AddressExistsError", err)
	}
	del, deleted, err := s.DeleteAddress(ctx, ip("2001:db8::ffff:1"))
	if err != nil || del.Parent != ref || del.Revision != r.Revision || deleted <= r.Revision {
		t.Fatalf("DeleteAddress = %+v, deleted at %d, %v; want %+v deleted after its revision", del, deleted, err, r)
	}
	if _, err := s.GetAddress(ctx, ip("2001:db8::ffff:1")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetAddress after delete: %v", err)
	}
	if _, _, err := s.DeleteAddress(ctx, ip("2001:db8::ffff:1")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	// IPv4 and IPv6 addresses with the same low bits are different records.
	mustAddr(t, s, "0.0.0.1", "v4")
	mustAddr(t, s, "::1", "v6")
	all, err := s.ListAddresses(ctx)
	if err != nil || len(all) != 2 {
		t.Fatalf("ListAddresses = %v, %v; want 2 records", all, err)
	}
}

func testAddressDeleteAt(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	old := mustAddr(t, s, "10.0.0.7", "first")
	if _, _, err := s.DeleteAddress(ctx, old.Addr); err != nil {
		t.Fatal(err)
	}
	cur := mustAddr(t, s, "10.0.0.7", "second")
	// A decision taken on the first record must not remove the second.
	if _, _, err := s.DeleteAddressAt(ctx, old.Addr, old.Revision); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("DeleteAddressAt with a stale revision: %v, want ErrConflict", err)
	}
	if got, err := s.GetAddress(ctx, cur.Addr); err != nil || got.Parent != cur.Parent {
		t.Fatalf("after a refused DeleteAddressAt: %+v, %v; want the record of %q", got, err, cur.Parent.Name)
	}
	del, deleted, err := s.DeleteAddressAt(ctx, cur.Addr, cur.Revision)
	if err != nil || del.Parent != cur.Parent || del.Revision != cur.Revision || deleted <= cur.Revision {
		t.Fatalf("DeleteAddressAt = %+v, deleted at %d, %v; want %+v deleted after its revision", del, deleted, err, cur)
	}
	if _, _, err := s.DeleteAddressAt(ctx, cur.Addr, cur.Revision); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("DeleteAddressAt of a gone record: %v, want ErrNotFound", err)
	}
	if recs, err := s.AddressesOf(ctx, cur.Parent); err != nil || len(recs) != 0 {
		t.Fatalf("owner index after DeleteAddressAt: %v, %v", recs, err)
	}
}

func testAddressReplaceAt(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	old := mustAddr(t, s, "10.0.0.7", "first")
	r := watch(t, ctx, s)
	if _, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: old.Addr, Parent: owner("second")}, old.Revision-1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("ReplaceAddressAt with a stale revision: %v, want ErrConflict", err)
	}
	cur, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: old.Addr, Parent: owner("second")}, old.Revision)
	if err != nil || cur.Addr != old.Addr || cur.Parent != owner("second") || cur.Revision <= old.Revision || cur.Created.IsZero() {
		t.Fatalf("ReplaceAddressAt = %+v, %v; want the record of %q at a new revision", cur, err, "second")
	}
	if got, err := s.GetAddress(ctx, old.Addr); err != nil || !sameRecord(got, cur) {
		t.Fatalf("GetAddress after ReplaceAddressAt = %+v, %v; want %+v", got, err, cur)
	}
	if recs, err := s.AddressesOf(ctx, old.Parent); err != nil || len(recs) != 0 {
		t.Fatalf("AddressesOf(old owner) after ReplaceAddressAt = %+v, %v; want none", recs, err)
	}
	if recs, err := s.AddressesOf(ctx, cur.Parent); err != nil || len(recs) != 1 || !sameRecord(recs[0], cur) {
		t.Fatalf("AddressesOf(new owner) after ReplaceAddressAt = %+v, %v; want %+v", recs, err, cur)
	}
	// A decision taken on the old record must not touch the new one.
	if _, _, err := s.DeleteAddressAt(ctx, old.Addr, old.Revision); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("DeleteAddressAt of the replaced revision: %v, want ErrConflict", err)
	}
	if _, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: old.Addr, Parent: owner("third")}, old.Revision); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second ReplaceAddressAt of the replaced revision: %v, want ErrConflict", err)
	}
	evs := r.waitEvents(t, 1)
	if e := evs[0]; e.Kind != store.AddressPut || e.Revision != cur.Revision || e.Address.Addr != cur.Addr ||
		e.Address.Parent != cur.Parent || e.Address.Revision != cur.Revision {
		t.Fatalf("watch event of the replacement %+v, want an AddressPut of %+v", e, cur)
	}
	if all, err := s.ListAddresses(ctx); err != nil || len(all) != 1 || !sameRecord(all[0], cur) {
		t.Fatalf("ListAddresses after ReplaceAddressAt = %+v, %v; want only %+v", all, err, cur)
	}
	if _, _, err := s.DeleteAddressAt(ctx, cur.Addr, cur.Revision); err != nil {
		t.Fatalf("DeleteAddressAt of the new record: %v", err)
	}
	if _, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: old.Addr, Parent: owner("third")}, cur.Revision); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReplaceAddressAt of a gone record: %v, want ErrNotFound", err)
	}
	if evs := r.waitEvents(t, 2); evs[1].Kind != store.AddressDeleted {
		t.Fatalf("events after the deletion: %+v", evs)
	}
}

func testAddressBatch(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	mustAddr(t, s, "10.0.0.2", "taken")
	batch := []ipaddress.IPAddress{{Addr: ip("10.0.0.1"), Parent: owner("x")}, {Addr: ip("10.0.0.2"), Parent: owner("x")}}
	_, err := s.CreateAddresses(ctx, batch)
	var ex *store.AddressExistsError
	if !errors.As(err, &ex) || ex.Addr != ip("10.0.0.2") {
		t.Fatalf("batch with a taken address: %v", err)
	}
	if _, err := s.GetAddress(ctx, ip("10.0.0.1")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("failed batch left 10.0.0.1 behind: %v", err)
	}
	dup := []ipaddress.IPAddress{{Addr: ip("10.0.0.3"), Parent: owner("x")}, {Addr: ip("10.0.0.3"), Parent: owner("y")}}
	if _, err := s.CreateAddresses(ctx, dup); !errors.Is(err, store.ErrExists) {
		t.Fatalf("batch naming one address twice: %v, want ErrExists", err)
	}
	// A larger batch (past the stores' small-batch shortcuts) with its
	// duplicate at the end: refused whole, naming the address.
	var big []ipaddress.IPAddress
	for i := range 20 {
		big = append(big, ipaddress.IPAddress{Addr: netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}), Parent: owner("big")})
	}
	big = append(big, ipaddress.IPAddress{Addr: ip("10.0.1.7"), Parent: owner("big")})
	if _, err := s.CreateAddresses(ctx, big); !errors.As(err, &ex) || ex.Addr != ip("10.0.1.7") {
		t.Fatalf("large batch naming 10.0.1.7 twice: %v, want an AddressExistsError naming it", err)
	}
	if recs, err := s.AddressesOf(ctx, owner("big")); err != nil || len(recs) != 0 {
		t.Fatalf("a refused large batch stored %d records (%v)", len(recs), err)
	}
	dual := []ipaddress.IPAddress{{Addr: ip("10.0.0.4"), Parent: owner("d")}, {Addr: ip("fd00::4"), Parent: owner("d")}}
	recs, err := s.CreateAddresses(ctx, dual)
	if err != nil || len(recs) != 2 || recs[0].Revision != recs[1].Revision {
		t.Fatalf("dual batch = %+v, %v; want two records at one revision", recs, err)
	}
}

// testPairLocked checks a store.PairLocked store's CreatePairLocked as a
// batch of two: a pair with either address held, or either fence stale,
// writes neither record and no revision; a pair written is two records of
// one revision, found by GetAddress and AddressesOf, and watched. Stores
// that do not implement it pass.
func testPairLocked(t *testing.T, s store.Store) {
	p, ok := s.(store.PairLocked)
	if !ok {
		return
	}
	l := s.(store.Locked) // PairLocked is for Locked stores
	ctx := ctxT(t)
	c := mustCIDR(t, s, "c", "10.0.0.0/24", "fd00::/64")
	mustAddr(t, s, "10.0.0.1", "taken")
	mustAddr(t, s, "fd00::1", "taken")
	r := watch(t, ctx, s)
	o, err := ipaddress.CheckParentRef(owner("pair"))
	if err != nil {
		t.Fatal(err)
	}
	stale := store.Fence{CIDR: c.Name, Revision: c.Revision - 1}
	create := func(v4, v6 string, f4, f6 store.Fence) (int64, time.Time, error) {
		l.Mutex().Lock()
		defer l.Mutex().Unlock()
		return p.CreatePairLocked(ip(v4), ip(v6), &o, f4, f6, nil)
	}
	var ex *store.AddressExistsError
	var fenced *store.FencedError
	for _, tc := range []struct {
		v4, v6 string
		f4, f6 store.Fence
		ok     func(error) bool
	}{
		{"10.0.0.1", "fd00::2", fenceOf(c), fenceOf(c), func(err error) bool { return errors.As(err, &ex) && ex.Addr == ip("10.0.0.1") }},
		{"10.0.0.2", "fd00::1", fenceOf(c), fenceOf(c), func(err error) bool { return errors.As(err, &ex) && ex.Addr == ip("fd00::1") }},
		{"10.0.0.2", "fd00::2", stale, fenceOf(c), func(err error) bool { return errors.As(err, &fenced) }},
		{"10.0.0.2", "fd00::2", fenceOf(c), stale, func(err error) bool { return errors.As(err, &fenced) }},
	} {
		if _, _, err := create(tc.v4, tc.v6, tc.f4, tc.f6); !tc.ok(err) {
			t.Errorf("CreatePairLocked(%s, %s) fenced at %d and %d: %v", tc.v4, tc.v6, tc.f4.Revision, tc.f6.Revision, err)
		}
		if recs, err := s.AddressesOf(ctx, owner("pair")); err != nil || len(recs) != 0 {
			t.Fatalf("a refused pair left %+v (%v)", recs, err)
		}
	}
	rev, created, err := create("10.0.0.2", "fd00::2", fenceOf(c), fenceOf(c))
	if err != nil {
		t.Fatalf("CreatePairLocked: %v", err)
	}
	recs, err := s.AddressesOf(ctx, owner("pair"))
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(recs, func(x, y ipaddress.IPAddress) int { return x.Addr.Compare(y.Addr) })
	want := []ipaddress.IPAddress{
		{Addr: ip("10.0.0.2"), Parent: owner("pair"), Created: created, Revision: rev},
		{Addr: ip("fd00::2"), Parent: owner("pair"), Created: created, Revision: rev},
	}
	if !sameRecords(recs, want) {
		t.Fatalf("AddressesOf after a pair = %+v, want %+v", recs, want)
	}
	for _, w := range want {
		if got, err := s.GetAddress(ctx, w.Addr); err != nil || !sameRecord(got, w) {
			t.Errorf("GetAddress(%s) = %+v, %v; want %+v", w.Addr, got, err, w)
		}
	}
	// The refusals took no revision: the pair's is the one after the
	// records made before the watch.
	// (Of one revision, in either order.)
	evs := r.waitEvents(t, 2)
	slices.SortFunc(evs, func(x, y store.Event) int { return x.Address.Addr.Compare(y.Address.Addr) })
	r.mu.Lock()
	reset := r.resets[0].Revision
	r.mu.Unlock()
	if len(evs) != 2 || evs[0].Revision != rev || evs[1].Revision != rev ||
		!sameRecord(evs[0].Address, want[0]) || !sameRecord(evs[1].Address, want[1]) || reset != rev-1 {
		t.Errorf("watched %+v after a reset at %d, want the pair's two records at revision %d", evs, reset, rev)
	}
}

// testFencedSeen checks FencedError.Seen: a revision at which the fence
// shows broken, no later than the store's latest write, that a Watch
// started before reaches. A caller waits for its view to reach it.
func testFencedSeen(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	r := watch(t, ctx, s)
	c := mustCIDR(t, s, "changed", "10.0.0.0/24")
	d := mustCIDR(t, s, "deleted", "10.1.0.0/24")
	kept := mustCIDR(t, s, "kept", "10.2.0.0/24")
	upd := c.Clone()
	upd.Terminating = true
	changed, err := s.UpdateCIDR(ctx, upd)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCIDR(ctx, d.Name, d.Revision); err != nil {
		t.Fatal(err)
	}
	last := mustAddr(t, s, "10.2.0.1", "last") // the store's latest write
	touching := func(f store.Fence) store.Fence {
		f.Touch = true
		return f
	}
	for _, tc := range []struct {
		fence store.Fence
		after int64 // Seen is at least this: the fence broke then or later
	}{
		{fenceOf(c), changed.Revision},
		{fenceOf(d), d.Revision + 1},
		{touching(fenceOf(d)), d.Revision + 1},
	} {
		for _, call := range []struct {
			name string
			do   func() error
		}{
			{"CreateAddresses", func() error {
				_, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.9"), Parent: owner("x")}}, tc.fence)
				return err
			}},
			{"DeleteCIDR", func() error { return s.DeleteCIDR(ctx, kept.Name, kept.Revision, tc.fence) }},
		} {
			var fe *store.FencedError
			if err := call.do(); !errors.As(err, &fe) || fe.Fence != tc.fence {
				t.Fatalf("%s fenced on %+v: %v, want a FencedError naming it", call.name, tc.fence, err)
			}
			// The store has the CIDR's history here, so Seen is known,
			// but for an allocation fenced on a CIDR gone since: finding
			// when may cost a store time an allocation should not wait.
			if fe.Seen == 0 && call.name == "CreateAddresses" && tc.fence.CIDR == d.Name {
				continue
			}
			if fe.Seen < tc.after || fe.Seen > last.Revision {
				t.Fatalf("%s fenced on %+v: Seen = %d, want from %d (the fence broke) to %d (the store's latest write)", call.name, tc.fence, fe.Seen, tc.after, last.Revision)
			}
			r.waitRevision(t, fe.Seen)
		}
	}
}

func testEmptyBatch(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	r := watch(t, ctx, s)
	c := mustCIDR(t, s, "c", "10.0.0.0/24")
	if got, err := s.CreateAddresses(ctx, nil, fenceOf(c)); err != nil || len(got) != 0 {
		t.Fatalf("CreateAddresses of no records: %v, %v; want none and no error", got, err)
	}
	// The fence is still checked, and the store's latest write is still
	// the CIDR's: a Seen past it would be a revision no watcher hears of.
	stale := store.Fence{CIDR: c.Name, Revision: c.Revision - 1}
	var fe *store.FencedError
	if _, err := s.CreateAddresses(ctx, nil, stale); !errors.As(err, &fe) || fe.Fence != stale {
		t.Fatalf("CreateAddresses of no records fenced on %+v: %v, want a FencedError naming it", stale, err)
	}
	if fe.Seen > c.Revision {
		t.Fatalf("Seen = %d after writes of no records, past the store's latest write (%d)", fe.Seen, c.Revision)
	}
	a := mustAddr(t, s, "10.0.0.1", "a", fenceOf(c))
	var fe2 *store.FencedError
	if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.2"), Parent: owner("b")}}, stale); !errors.As(err, &fe2) {
		t.Fatalf("CreateAddresses fenced on %+v: %v, want a FencedError", stale, err)
	}
	if fe2.Seen > a.Revision {
		t.Fatalf("Seen = %d, past the store's latest write (%d)", fe2.Seen, a.Revision)
	}
	r.waitRevision(t, a.Revision)
	var kinds []store.EventKind
	for _, e := range r.waitEvents(t, 2) {
		kinds = append(kinds, e.Kind)
	}
	if want := []store.EventKind{store.CIDRPut, store.AddressPut}; !slices.Equal(kinds, want) {
		t.Fatalf("events %v, want %v: a write of no records is no change", kinds, want)
	}
}

func testAddressFence(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCIDR(t, s, "c", "10.0.0.0/24")
	mustAddr(t, s, "10.0.0.1", "a", fenceOf(c))
	upd := c.Clone()
	upd.Terminating = true
	changed, err := s.UpdateCIDR(ctx, upd)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.2"), Parent: owner("b")}}, fenceOf(c))
	var fe *store.FencedError
	if !errors.As(err, &fe) || fe.Fence.CIDR != "c" {
		t.Fatalf("create fenced on a changed CIDR: %v, want *FencedError", err)
	}
	// Seen is a revision at which the change shows: a view that reaches it
	// decides on the changed CIDR.
	if fe.Seen < changed.Revision {
		t.Fatalf("FencedError.Seen = %d, before the change at %d", fe.Seen, changed.Revision)
	}
	if _, err := s.GetAddress(ctx, ip("10.0.0.2")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("fenced create stored the address: %v", err)
	}
	if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.3"), Parent: owner("b")}}, store.Fence{CIDR: "missing", Revision: 1}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("create fenced on a missing CIDR: %v, want ErrFenced", err)
	}
}

func testAddressFenceTouch(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCIDR(t, s, "c", "10.0.0.0/24", "fd00::/64")
	c.Terminating = true
	c, err := s.UpdateCIDR(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	touch := fenceOf(c)
	touch.Touch = true
	rec := mustAddr(t, s, "10.0.0.5", "adopted", touch)
	got, err := s.GetCIDR(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision <= c.Revision || got.Revision != rec.Revision {
		t.Fatalf("touched CIDR at revision %d (was %d, record %d); want the record's revision", got.Revision, c.Revision, rec.Revision)
	}
	if !got.Terminating || !slices.Equal(got.Prefixes, c.Prefixes) || !got.Created.Equal(c.Created) {
		t.Fatalf("touch changed the CIDR: %+v, was %+v", got, c)
	}
	// A removal decided on the old revision, before the address existed, fails.
	if err := s.DeleteCIDR(ctx, "c", c.Revision); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("DeleteCIDR at the revision before the touch: %v, want ErrConflict", err)
	}
	// The old revision no longer holds a plain fence...
	plain := touch
	plain.Touch = false
	if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.6"), Parent: owner("x")}}, plain); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("a plain fence at the revision before the touch: %v, want ErrFenced", err)
	}
	// ...but still a touching one: what a touch guards needs only the new
	// revision it gives, so another create inside the CIDR, decided on
	// the revision before the first touch (another allocator's), touches
	// it again rather than fail.
	again := mustAddr(t, s, "10.0.0.7", "adopted-too", touch)
	if got, err := s.GetCIDR(ctx, "c"); err != nil || got.Revision != again.Revision || !got.Terminating || !slices.Equal(got.Prefixes, c.Prefixes) {
		t.Fatalf("CIDR touched again at an older revision: %+v, %v; want it unchanged at the record's revision %d", got, err, again.Revision)
	}
	// A touching fence ahead of the CIDR's revision, or on a missing one,
	// does not hold.
	ahead := touch
	ahead.Revision = again.Revision + 1
	missing := store.Fence{CIDR: "missing", Revision: c.Revision, Touch: true}
	for _, f := range []store.Fence{ahead, missing} {
		if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.8"), Parent: owner("x")}}, f); !errors.Is(err, store.ErrFenced) {
			t.Fatalf("touching fence %+v: %v, want ErrFenced", f, err)
		}
	}
}

func testOwnerIndex(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	mustAddr(t, s, "10.0.0.1", "a")
	mustAddr(t, s, "fd00::1", "a")
	mustAddr(t, s, "10.0.0.2", "b")
	addrsOf := func(name string) []netip.Addr {
		recs, err := s.AddressesOf(ctx, owner(name))
		if err != nil {
			t.Fatal(err)
		}
		var out []netip.Addr
		for _, r := range recs {
			if r.Parent != owner(name) {
				t.Fatalf("AddressesOf(%s) returned %+v", name, r)
			}
			out = append(out, r.Addr)
		}
		if !slices.IsSortedFunc(out, netip.Addr.Compare) {
			t.Fatalf("AddressesOf(%s) = %v, not in address order", name, out)
		}
		return out
	}
	// More than a few, created out of order, so that an order the index
	// happens to keep does not pass for address order.
	for _, a := range []string{"10.0.0.9", "10.0.0.4", "10.0.0.7", "10.0.0.3", "10.0.0.8"} {
		mustAddr(t, s, a, "many")
	}
	if got := addrsOf("many"); !slices.Equal(got, []netip.Addr{ip("10.0.0.3"), ip("10.0.0.4"), ip("10.0.0.7"), ip("10.0.0.8"), ip("10.0.0.9")}) {
		t.Fatalf("AddressesOf(many) = %v", got)
	}
	if got := addrsOf("a"); !slices.Equal(got, []netip.Addr{ip("10.0.0.1"), ip("fd00::1")}) {
		t.Fatalf("AddressesOf(a) = %v", got)
	}
	if _, _, err := s.DeleteAddress(ctx, ip("10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	if got := addrsOf("a"); !slices.Equal(got, []netip.Addr{ip("fd00::1")}) {
		t.Fatalf("AddressesOf(a) after delete = %v", got)
	}
	if got := addrsOf("nobody"); len(got) != 0 {
		t.Fatalf("AddressesOf(nobody) = %v", got)
	}
	// Owners differing only in group or namespace are different owners.
	other := owner("b")
	other.Namespace = "kube-system"
	if recs, err := s.AddressesOf(ctx, other); err != nil || len(recs) != 0 {
		t.Fatalf("AddressesOf(%v) = %v, %v", other, recs, err)
	}
}

// testOwnerIndexSince checks a store.SinceReader store's AddressesOfSince:
// since the revision of the owner's last write, or of a later write of
// another kind, or of none, it answers as AddressesOf does; since that of
// a delete, without the record deleted; since a revision the store has
// not reached, it is an *ipaddress.FieldError for "revision". Stores that
// do not implement it pass.
func testOwnerIndexSince(t *testing.T, s store.Store) {
	sr, ok := s.(store.SinceReader)
	if !ok {
		return
	}
	ctx := ctxT(t)
	mustAddr(t, s, "10.0.0.1", "a")
	mustAddr(t, s, "10.0.0.2", "b")
	last := mustAddr(t, s, "fd00::1", "a")
	want, err := s.AddressesOf(ctx, owner("a"))
	if err != nil || len(want) != 2 {
		t.Fatalf("AddressesOf(a) = %+v, %v; want two records", want, err)
	}
	c := mustCIDR(t, s, "later", "10.1.0.0/24")
	for _, rev := range []int64{last.Revision, c.Revision, 0, -1} {
		got, err := sr.AddressesOfSince(ctx, owner("a"), rev)
		if err != nil || !sameRecords(got, want) {
			t.Errorf("AddressesOfSince(a, %d) = %+v, %v; want %+v", rev, got, err, want)
		}
	}
	// A delete up to the revision asked for is applied too.
	_, deleted, err := s.DeleteAddress(ctx, ip("10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := sr.AddressesOfSince(ctx, owner("a"), deleted); err != nil || !sameRecords(got, want[1:]) {
		t.Errorf("AddressesOfSince(a, %d), the revision of 10.0.0.1's delete = %+v, %v; want %+v", deleted, got, err, want[1:])
	}
	ahead := deleted + 1000
	var fe *ipaddress.FieldError
	if got, err := sr.AddressesOfSince(ctx, owner("a"), ahead); !errors.As(err, &fe) || fe.Field != "revision" || !errors.Is(err, ipaddress.ErrInvalid) {
		t.Errorf("AddressesOfSince(a, %d), a revision the store has not reached = %+v, %v; want a FieldError for revision", ahead, got, err)
	}
}

// testDeleteRecords checks a store.RecordsDeleter store's DeleteRecords:
// records as an owner lookup returned them are deleted in one revision,
// watched as deletes of it; a batch with any record replaced, gone, or
// given with another owner, revision or creation time deletes none
// (ErrConflict); an address twice is invalid; no records is no write.
// Stores that do not implement it pass.
func testDeleteRecords(t *testing.T, s store.Store) {
	d, ok := s.(store.RecordsDeleter)
	if !ok {
		return
	}
	ctx := ctxT(t)
	for _, a := range []string{"10.0.0.1", "10.0.0.2", "fd00::1"} {
		mustAddr(t, s, a, "a")
	}
	mustAddr(t, s, "10.0.0.3", "b")
	recs, err := s.AddressesOf(ctx, owner("a"))
	if err != nil || len(recs) != 3 {
		t.Fatalf("AddressesOf(a) = %+v, %v; want three records", recs, err)
	}
	if rev, err := d.DeleteRecords(ctx, nil); rev != 0 || err != nil {
		t.Errorf("DeleteRecords(none) = %d, %v; want 0, nil", rev, err)
	}
	if _, err := d.DeleteRecords(ctx, []ipaddress.IPAddress{recs[0], recs[1], recs[0]}); !errors.Is(err, ipaddress.ErrInvalid) {
		t.Errorf("DeleteRecords with an address twice: %v; want ErrInvalid", err)
	}
	b, err := s.GetAddress(ctx, ip("10.0.0.3"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range notAsHeld(recs[2], b) {
		if _, err := d.DeleteRecords(ctx, []ipaddress.IPAddress{recs[0], recs[1], tc.rec}); !errors.Is(err, store.ErrConflict) {
			t.Errorf("DeleteRecords with %s: %v; want ErrConflict", tc.what, err)
		}
		if got, err := s.AddressesOf(ctx, owner("a")); err != nil || !sameRecords(got, recs) {
			t.Fatalf("DeleteRecords with %s left %+v, %v; want every record of a", tc.what, got, err)
		}
	}
	r := watch(t, ctx, s)
	deleted, err := d.DeleteRecords(ctx, recs)
	if err != nil || deleted <= recs[2].Revision {
		t.Fatalf("DeleteRecords(a's records) = %d, %v; want a new revision", deleted, err)
	}
	if got, err := s.AddressesOf(ctx, owner("a")); err != nil || len(got) != 0 {
		t.Errorf("AddressesOf(a) after DeleteRecords = %+v, %v; want none", got, err)
	}
	if got, err := s.GetAddress(ctx, ip("10.0.0.3")); err != nil || !sameRecord(got, b) {
		t.Errorf("GetAddress(10.0.0.3), b's, after DeleteRecords of a's = %+v, %v", got, err)
	}
	for _, e := range r.waitEvents(t, 3) {
		if e.Kind != store.AddressDeleted || e.Revision != deleted {
			t.Errorf("after DeleteRecords at %d, watched %+v; want the deletes of that revision", deleted, e)
		}
	}
	// Gone: a batch again is refused.
	if _, err := d.DeleteRecords(ctx, recs[:1]); !errors.Is(err, store.ErrConflict) {
		t.Errorf("DeleteRecords of a record deleted: %v; want ErrConflict", err)
	}
}

// staleRecord is a record as a caller may give it that the store does not
// hold so, and what differs.
type staleRecord struct {
	what string
	rec  ipaddress.IPAddress
}

// notAsHeld returns rec, of owner a, changed in each way that makes it no
// longer the record the store holds; b is another owner's record.
func notAsHeld(rec, b ipaddress.IPAddress) []staleRecord {
	changed := func(f func(*ipaddress.IPAddress)) ipaddress.IPAddress {
		r := rec
		f(&r)
		return r
	}
	return []staleRecord{
		{"another owner", changed(func(r *ipaddress.IPAddress) { r.Parent = owner("c") })},
		{"another revision", changed(func(r *ipaddress.IPAddress) { r.Revision++ })},
		{"another creation time", changed(func(r *ipaddress.IPAddress) { r.Created = r.Created.Add(time.Second) })},
		{"an address held by another", changed(func(r *ipaddress.IPAddress) { *r = b; r.Parent = owner("a") })},
		{"an address no record has", changed(func(r *ipaddress.IPAddress) { r.Addr = ip("10.0.0.9") })},
	}
}

// testReplaceRecords checks a store.RecordsReplacer store's
// ReplaceRecords: records as an owner lookup returned them go to their new
// owners in one revision, watched as puts of it, each with a new creation
// time, and their addresses are never free; a batch with any record
// replaced, gone, or given with another owner, revision or creation time
// replaces none (ErrConflict); an address twice, owners and records of
// different counts, and an owner the store cannot hold are invalid; no
// records is no write. Stores that do not implement it pass.
func testReplaceRecords(t *testing.T, s store.Store) {
	rp, ok := s.(store.RecordsReplacer)
	if !ok {
		return
	}
	ctx := ctxT(t)
	for _, a := range []string{"10.0.0.1", "10.0.0.2", "fd00::1"} {
		mustAddr(t, s, a, "a")
	}
	b := mustAddr(t, s, "10.0.0.3", "b")
	recs, err := s.AddressesOf(ctx, owner("a"))
	if err != nil || len(recs) != 3 {
		t.Fatalf("AddressesOf(a) = %+v, %v; want three records", recs, err)
	}
	slices.SortFunc(recs, func(x, y ipaddress.IPAddress) int { return x.Addr.Compare(y.Addr) })
	to := []ipaddress.ParentRef{owner("c"), owner("c"), owner("d")}
	if got, err := rp.ReplaceRecords(ctx, nil, nil); len(got) != 0 || err != nil {
		t.Errorf("ReplaceRecords(none) = %+v, %v; want nothing, nil", got, err)
	}
	for _, tc := range []struct {
		what string
		recs []ipaddress.IPAddress
		to   []ipaddress.ParentRef
	}{
		{"an address twice", []ipaddress.IPAddress{recs[0], recs[1], recs[0]}, to},
		{"fewer owners than records", recs, to[:2]},
		{"an owner too long to store", recs, []ipaddress.ParentRef{owner("c"), owner("c"), owner(strings.Repeat("n", store.MaxOwnerLen))}},
	} {
		if _, err := rp.ReplaceRecords(ctx, tc.recs, tc.to); !errors.Is(err, ipaddress.ErrInvalid) {
			t.Errorf("ReplaceRecords with %s: %v; want ErrInvalid", tc.what, err)
		}
	}
	for _, tc := range notAsHeld(recs[2], b) {
		if _, err := rp.ReplaceRecords(ctx, []ipaddress.IPAddress{recs[0], recs[1], tc.rec}, to); !errors.Is(err, store.ErrConflict) {
			t.Errorf("ReplaceRecords with %s: %v; want ErrConflict", tc.what, err)
		}
		if got, err := s.AddressesOf(ctx, owner("a")); err != nil || !sameRecords(got, recs) {
			t.Fatalf("ReplaceRecords with %s left %+v, %v; want every record of a", tc.what, got, err)
		}
	}
	r := watch(t, ctx, s)
	got, err := rp.ReplaceRecords(ctx, recs, to)
	if err != nil || len(got) != len(recs) {
		t.Fatalf("ReplaceRecords(a's records) = %+v, %v", got, err)
	}
	for i, rec := range got {
		if rec.Addr != recs[i].Addr || rec.Parent != to[i] || rec.Revision <= recs[2].Revision || rec.Revision != got[0].Revision || rec.Created.IsZero() {
			t.Errorf("ReplaceRecords gave %s as %+v; want it %s's, at one new revision", recs[i].Addr, rec, to[i])
		}
		if held, err := s.GetAddress(ctx, rec.Addr); err != nil || !sameRecord(held, rec) {
			t.Errorf("GetAddress(%s) after ReplaceRecords = %+v, %v; want %+v", rec.Addr, held, err, rec)
		}
	}
	for o, n := range map[string]int{"a": 0, "c": 2, "d": 1} {
		if recs, err := s.AddressesOf(ctx, owner(o)); err != nil || len(recs) != n {
			t.Errorf("AddressesOf(%s) after ReplaceRecords = %+v, %v; want %d records", o, recs, err, n)
		}
	}
	for _, e := range r.waitEvents(t, 3) {
		if e.Kind != store.AddressPut || e.Revision != got[0].Revision {
			t.Errorf("after ReplaceRecords at %d, watched %+v; want the puts of that revision", got[0].Revision, e)
		}
	}
	// Replaced: a batch of the records as they were is refused.
	if _, err := rp.ReplaceRecords(ctx, recs[:1], to[:1]); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ReplaceRecords of a record replaced: %v; want ErrConflict", err)
	}
}

// A store does not validate owners (ipaddress.ParentRef.Validate is the
// allocator's to apply): a record of an owner the allocator would refuse is
// stored and listed by its owner like any other, field for field, so that
// owners that print alike stay apart. An owner no record has, however
// long, has none.
func testOwnerIndexTakesAnyOwner(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	odd := []ipaddress.ParentRef{
		{},
		{Name: "no-resource"},
		{Resource: "Services", Namespace: "default", Name: "Web"},
		// These two print alike, services/default/x/web.
		{Resource: "services", Namespace: "default/x", Name: "web"},
		{Resource: "services", Namespace: "default", Name: "x/web"},
		{Group: "Bad.Group", Resource: "services", Name: "a\x00b"},
		{Resource: "services", Namespace: "default", Name: "é"},
	}
	for i, o := range odd {
		if o.Validate() == nil {
			t.Fatalf("%#v: the case is a valid owner", o)
		}
		recs := []ipaddress.IPAddress{{Addr: netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), Parent: o}}
		if _, err := s.CreateAddresses(ctx, recs); err != nil {
			t.Fatalf("CreateAddresses for %#v: %v", o, err)
		}
	}
	for i, o := range odd {
		recs, err := s.AddressesOf(ctx, o)
		if err != nil || len(recs) != 1 || recs[0].Parent != o || recs[0].Addr != netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}) {
			t.Errorf("AddressesOf(%#v) = %+v, %v; want its one record", o, recs, err)
		}
	}
	long := owner(strings.Repeat("n", 64<<10)) // past what some store can key
	if recs, err := s.AddressesOf(ctx, long); err != nil || len(recs) != 0 {
		t.Errorf("AddressesOf(a %d-byte name) = %d records, %v; want none, no error", len(long.Name), len(recs), err)
	}
}

func testRevisions(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	var revs []int64
	c := mustCIDR(t, s, "c", "10.0.0.0/24")
	revs = append(revs, c.Revision)
	revs = append(revs, mustAddr(t, s, "10.0.0.1", "a").Revision)
	c.Terminating = true
	c, err := s.UpdateCIDR(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	revs = append(revs, c.Revision)
	revs = append(revs, mustAddr(t, s, "10.0.0.2", "b").Revision)
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Fatalf("revisions do not increase: %v", revs)
		}
	}
}

// watch starts a Watch of s into a new recorder, stopped when the test ends.
func watch(t *testing.T, ctx context.Context, s store.Store) *recorder {
	t.Helper()
	r := &recorder{}
	wctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if err := s.Watch(wctx, r); err != nil {
		t.Fatal(err)
	}
	return r
}

// recorder is a Watcher that keeps what it was told.
type recorder struct {
	mu     sync.Mutex
	resets []store.Snapshot
	events []store.Event
	rev    int64 // the revision of the last Reset or Apply
}

func (r *recorder) Reset(s store.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resets = append(r.resets, s)
	r.events = nil
	r.rev = s.Revision
}

func (r *recorder) Apply(e store.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	r.rev = e.Revision
}

// waitRevision waits until the watch has delivered revision rev.
func (r *recorder) waitRevision(t *testing.T, rev int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r.mu.Lock()
		at := r.rev
		r.mu.Unlock()
		if at >= rev {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch at revision %d, never reached %d", at, rev)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *recorder) waitEvents(t *testing.T, n int) []store.Event {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r.mu.Lock()
		got := slices.Clone(r.events)
		r.mu.Unlock()
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("watch delivered %d events, want %d: %+v", len(got), n, got)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testWatch(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCIDR(t, s, "before", "10.0.0.0/24")
	mustAddr(t, s, "10.0.0.1", "a")
	r := watch(t, ctx, s)
	r.mu.Lock()
	if len(r.resets) != 1 {
		t.Fatalf("Watch returned before Reset")
	}
	snap := r.resets[0]
	r.mu.Unlock()
	if len(snap.CIDRs) != 1 || snap.CIDRs[0].Name != "before" || snap.CIDRs[0].Revision != c.Revision ||
		!slices.Equal(snap.Addrs, []netip.Addr{ip("10.0.0.1")}) || snap.Revision < c.Revision {
		t.Fatalf("snapshot = %+v", snap)
	}
	c2 := mustCIDR(t, s, "after", "fd00::/64")
	a := mustAddr(t, s, "fd00::1", "b", fenceOf(c2))
	c2.Terminating = true
	c2, err := s.UpdateCIDR(ctx, c2)
	if err != nil {
		t.Fatal(err)
	}
	_, deleted, err := s.DeleteAddress(ctx, ip("fd00::1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCIDR(ctx, "after", c2.Revision); err != nil {
		t.Fatal(err)
	}
	evs := r.waitEvents(t, 5)
	want := []store.EventKind{store.CIDRPut, store.AddressPut, store.CIDRPut, store.AddressDeleted, store.CIDRDeleted}
	for i, e := range evs {
		if i >= len(want) {
			t.Fatalf("unexpected extra event %+v", e)
		}
		if e.Kind != want[i] {
			t.Fatalf("event %d kind %v, want %v: %+v", i, e.Kind, want[i], evs)
		}
		if e.Revision <= snap.Revision || (i > 0 && e.Revision <= evs[i-1].Revision) {
			t.Fatalf("event revisions not increasing after the snapshot: %+v", evs)
		}
	}
	if evs[1].Address.Addr != a.Addr || evs[1].Address.Parent != owner("b") || evs[1].Revision != a.Revision {
		t.Fatalf("address event %+v, want %+v", evs[1], a)
	}
	if !evs[2].CIDR.Terminating || evs[2].CIDR.Revision != c2.Revision {
		t.Fatalf("update event %+v", evs[2])
	}
	// A caller waits for a deletion's revision to see it in its view.
	if evs[3].Address.Addr != ip("fd00::1") || evs[3].Revision != deleted || evs[4].CIDR.Name != "after" {
		t.Fatalf("delete events %+v", evs[3:])
	}
}

func testWatchStops(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	var r recorder
	wctx, cancel := context.WithCancel(ctx)
	if err := s.Watch(wctx, &r); err != nil {
		t.Fatal(err)
	}
	mustAddr(t, s, "10.0.0.1", "a")
	r.waitEvents(t, 1)
	cancel()
	// Delivery stops soon after cancel; give an asynchronous watch time to wind down.
	time.Sleep(200 * time.Millisecond)
	r.mu.Lock()
	n := len(r.events)
	r.mu.Unlock()
	mustAddr(t, s, "10.0.0.2", "b")
	time.Sleep(200 * time.Millisecond)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) != n {
		t.Fatalf("watch delivered %d events after its context ended", len(r.events)-n)
	}
}

// testWatchNil: a nil watcher is bad input, refused with a typed error
// rather than a panic on its Reset, and the store watches on.
func testWatchNil(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	err := func() (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		return s.Watch(ctx, nil)
	}()
	if !errors.Is(err, ipaddress.ErrInvalid) {
		t.Fatalf("Watch(nil) = %v, want an error matching ipaddress.ErrInvalid", err)
	}
	var r recorder
	if err := s.Watch(ctx, &r); err != nil {
		t.Fatalf("Watch after a refused nil watcher: %v", err)
	}
	mustAddr(t, s, "10.0.0.1", "a")
	r.waitEvents(t, 1)
}

func testRaceOneWinner(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCIDR(t, s, "c", "10.0.0.0/24")
	for round := range 20 {
		addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(round + 1)})
		var wins, losses atomic.Int32
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				_, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: addr, Parent: owner(fmt.Sprintf("g%d", g))}}, fenceOf(c))
				switch {
				case err == nil:
					wins.Add(1)
				case errors.Is(err, store.ErrExists):
					losses.Add(1)
				default:
					t.Errorf("racing create: %v", err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 || losses.Load() != 15 {
			t.Fatalf("round %d: %d winners, %d losers; want 1 and 15", round, wins.Load(), losses.Load())
		}
	}
}

func testRaceFence(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	c := mustCIDR(t, s, "c", "10.0.0.0/16")
	fence := fenceOf(c)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var created []ipaddress.IPAddress
	start := make(chan struct{})
	for g := range 8 {
		wg.Go(func() {
			<-start
			for i := range 50 {
				addr := netip.AddrFrom4([4]byte{10, 0, byte(g), byte(i + 1)})
				recs, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: addr, Parent: owner("x")}}, fence)
				if err == nil {
					mu.Lock()
					created = append(created, recs...)
					mu.Unlock()
				} else if !errors.Is(err, store.ErrFenced) {
					t.Errorf("fenced create: %v", err)
				}
			}
		})
	}
	close(start)
	time.Sleep(time.Millisecond)
	upd := c.Clone()
	upd.Terminating = true
	upd, err := s.UpdateCIDR(ctx, upd)
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	all, err := s.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(created) {
		t.Fatalf("store holds %d records, callers were told of %d", len(all), len(created))
	}
	for _, r := range created {
		if r.Revision >= upd.Revision {
			t.Fatalf("address %s created at revision %d, after the fenced CIDR changed at %d", r.Addr, r.Revision, upd.Revision)
		}
	}
}

func testDistinctCreates(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 40 {
				addr := netip.AddrFrom16([16]byte{0xfd, 15: byte(i), 14: byte(g)})
				if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: addr, Parent: owner(fmt.Sprintf("o%d-%d", g, i))}}); err != nil {
					t.Errorf("create %s: %v", addr, err)
				}
			}
		})
	}
	wg.Wait()
	all, err := s.ListAddresses(ctx)
	if err != nil || len(all) != 320 {
		t.Fatalf("ListAddresses: %d records, %v; want 320", len(all), err)
	}
}

func testInvalidAddress(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	for _, a := range []netip.Addr{{}, ip("fe80::1%eth0"), ip("::ffff:10.0.0.1")} {
		_, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: a, Parent: owner("x")}})
		if !errors.Is(err, ipaddress.ErrInvalid) {
			t.Errorf("CreateAddresses(%q): %v, want ipaddress.ErrInvalid", a, err)
		}
	}
	if all, err := s.ListAddresses(ctx); err != nil || len(all) != 0 {
		t.Fatalf("invalid creates stored %v (%v)", all, err)
	}
}

func testClosed(t *testing.T, s store.Store) {
	ctx := ctxT(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := s.ListAddresses(ctx); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("ListAddresses after Close: %v, want ErrClosed", err)
	}
	if err := s.Watch(ctx, &recorder{}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Watch after Close: %v, want ErrClosed", err)
	}
	if _, err := s.GetCIDR(ctx, "x"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("GetCIDR after Close: %v, want ErrClosed", err)
	}
	if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.1"), Parent: owner("a")}}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("CreateAddresses after Close: %v, want ErrClosed", err)
	}
	// Whatever the input: a caller that takes ErrNotFound for "already
	// gone" must not read it from a closed store.
	bad := []netip.Addr{{}, ip("fe80::1%eth0"), ip("::ffff:10.0.0.1"), ip("10.0.0.1")}
	calls := map[string]func(a netip.Addr) error{
		"CreateAddresses": func(a netip.Addr) error {
			_, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: a, Parent: owner("a")}})
			return err
		},
		"DeleteAddress":   func(a netip.Addr) error { _, _, err := s.DeleteAddress(ctx, a); return err },
		"DeleteAddressAt": func(a netip.Addr) error { _, _, err := s.DeleteAddressAt(ctx, a, 1); return err },
		"ReplaceAddressAt": func(a netip.Addr) error {
			_, err := s.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: a, Parent: owner("b")}, 1)
			return err
		},
		"GetAddress": func(a netip.Addr) error { _, err := s.GetAddress(ctx, a); return err },
	}
	for name, call := range calls {
		for _, a := range bad {
			if err := call(a); !errors.Is(err, store.ErrClosed) {
				t.Errorf("%s(%q) after Close: %v, want ErrClosed", name, a, err)
			}
		}
	}
	for _, c := range []cidrset.CIDR{{}, {Name: "x", Prefixes: []netip.Prefix{{}}}, {Name: "x", Prefixes: []netip.Prefix{pfx("10.0.0.0/24")}}} {
		if _, err := s.CreateCIDR(ctx, c); !errors.Is(err, store.ErrClosed) {
			t.Errorf("CreateCIDR(%+v) after Close: %v, want ErrClosed", c, err)
		}
		if _, err := s.UpdateCIDR(ctx, c); !errors.Is(err, store.ErrClosed) {
			t.Errorf("UpdateCIDR(%+v) after Close: %v, want ErrClosed", c, err)
		}
		if err := s.DeleteCIDR(ctx, c.Name, 1); !errors.Is(err, store.ErrClosed) {
			t.Errorf("DeleteCIDR(%q) after Close: %v, want ErrClosed", c.Name, err)
		}
	}
	if _, err := s.AddressesOf(ctx, owner("a")); !errors.Is(err, store.ErrClosed) {
		t.Errorf("AddressesOf after Close: %v, want ErrClosed", err)
	}
	// And whatever the context: closed is the lasting reason.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for name, err := range map[string]error{
		"GetCIDR": func() error { _, err := s.GetCIDR(ended, "x"); return err }(),
		"CreateAddresses": func() error {
			_, err := s.CreateAddresses(ended, []ipaddress.IPAddress{{Addr: ip("10.0.0.1"), Parent: owner("a")}})
			return err
		}(),
		"DeleteAddress": func() error { _, _, err := s.DeleteAddress(ended, ip("10.0.0.1")); return err }(),
		"ListAddresses": func() error { _, err := s.ListAddresses(ended); return err }(),
		"Watch":         s.Watch(ended, &recorder{}),
		"DeleteCIDR":    s.DeleteCIDR(ended, "x", 1),
	} {
		if !errors.Is(err, store.ErrClosed) {
			t.Errorf("%s after Close with an ended context: %v, want ErrClosed", name, err)
		}
	}
}
