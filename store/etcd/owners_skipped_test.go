package etcd

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// skippedKey is a record a test expects named in a *store.SkippedError:
// its address (zero for a key that is no address) and its key.
type skippedKey struct {
	addr netip.Addr
	key  string
}

// checkSkipped fails the test unless err is a *store.SkippedError matching
// store.ErrCorrupt that names exactly want, in that order, each with a
// *CorruptError of its key; or nil, when want is empty.
func checkSkipped(t *testing.T, what string, err error, want ...skippedKey) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("%s: %v, want no error", what, err)
		}
		return
	}
	var se *store.SkippedError
	if !errors.As(err, &se) || !errors.Is(err, store.ErrCorrupt) || se.Count != len(want) || len(se.Records) != len(want) {
		t.Fatalf("%s: %v, want a *store.SkippedError of %d records matching ErrCorrupt", what, err, len(want))
	}
	for i, w := range want {
		if r := se.Records[i]; r.Addr != w.addr {
			t.Fatalf("%s: skipped record %d at %v, want %v (%v)", what, i, r.Addr, w.addr, err)
		} else {
			checkCorrupt(t, r.Err, w.key)
		}
	}
}

// store.Store.AddressesOf: a key under the address prefix whose value (or
// key) the store cannot decode might be any owner's, and hides none of an
// owner's records. AddressesOf returns those and a *store.SkippedError
// naming every such key in key order, from the owner index's first
// listing and from its watch alike, and no error once they are gone.
func TestAddressesOfReturnsTheOwnersRecordsBesideOnesItCannotDecode(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/skip-of"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, b := svc("a"), svc("b")
	for _, r := range []ipaddress.IPAddress{{Addr: v4(1), Parent: a}, {Addr: v4(2), Parent: a}, {Addr: v4(3), Parent: b}} {
		if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{r}); err != nil {
			t.Fatal(err)
		}
	}
	put := func(key, val string) {
		t.Helper()
		if _, err := cli.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
	}
	del := func(key string) {
		t.Helper()
		if _, err := cli.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, s *Store, owner ipaddress.ParentRef, want []netip.Addr, skipped ...skippedKey) {
		t.Helper()
		recs, err := s.AddressesOf(ctx, owner)
		var got []netip.Addr
		for _, r := range recs {
			if r.Parent != owner {
				t.Fatalf("%s: AddressesOf(%v) returned %+v", what, owner, r)
			}
			got = append(got, r.Addr)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: AddressesOf(%v) = %v (%v), want %v", what, owner, got, err, want)
		}
		checkSkipped(t, what, err, skipped...)
	}

	// A value written by hand before the index starts: its first listing
	// meets it. Whose it is cannot be known, so every owner's answer names
	// it.
	edited := s.addrKey(v4(9))
	put(edited, `{"v":99}`)
	check("first listing", s, a, []netip.Addr{v4(1), v4(2)}, skippedKey{v4(9), edited})
	check("first listing", s, b, []netip.Addr{v4(3)}, skippedKey{v4(9), edited})
	del(edited)
	check("the edited key deleted", s, a, []netip.Addr{v4(1), v4(2)})

	// Damage the running index's watch meets: a key that is no address,
	// then the value of one of a's own records, which a's answer then
	// lacks. Named in key order, whatever the order of the map they are
	// kept in.
	badKey := s.ipPfx + "4/zz"
	put(badKey, `{"v":2}`)
	check("watched bad key", s, a, []netip.Addr{v4(1), v4(2)}, skippedKey{netip.Addr{}, badKey})
	aKey := s.addrKey(v4(2))
	resp, err := cli.Get(ctx, aKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading %s: %v, %v", aKey, resp, err)
	}
	put(aKey, string(resp.Kvs[0].Value)+" ")
	both := []skippedKey{{v4(2), aKey}, {netip.Addr{}, badKey}}
	for range 10 {
		check("watched damage of a's record", s, a, []netip.Addr{v4(1)}, both...)
	}
	check("watched damage of a's record", s, b, []netip.Addr{v4(3)}, both...)

	// Another store's index, started now, lists the same damage.
	s2, err := New(c.newClient(t), WithPrefix("/skip-of"))
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	check("another index's first listing", s2, a, []netip.Addr{v4(1)}, both...)

	del(badKey)
	del(aKey)
	check("the damage deleted", s, a, []netip.Addr{v4(1)})
	check("the damage deleted", s2, a, []netip.Addr{v4(1)})
	check("the damage deleted", s, b, []netip.Addr{v4(3)})
}

// Allocator.ReleaseOwner over etcd: records that cannot be decoded (one of
// the owner's, one of another owner's) keep none of the owner's others
// held. It releases those, returns them, and returns the
// *store.SkippedError naming the damaged keys, which stay as they were;
// once they are gone, it releases the rest with no error.
func TestReleaseOwnerReleasesTheRecordsBesideOnesItCannotDecode(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	var log errLog
	s, err := New(cli, WithPrefix("/skip-release"), WithErrorHandler(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	al, err := allocator.New(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	a, b := svc("a"), svc("b")
	for i, owner := range []ipaddress.ParentRef{a, a, a, b} {
		if _, err := al.Allocate(ctx, v4(i+1), owner); err != nil {
			t.Fatal(err)
		}
	}
	// 10.0.0.3 (a's) and 10.0.0.4 (b's) edited by hand.
	damaged := map[string]string{}
	for _, addr := range []netip.Addr{v4(3), v4(4)} {
		key := s.addrKey(addr)
		resp, err := cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("reading %s: %v, %v", key, resp, err)
		}
		damaged[key] = string(resp.Kvs[0].Value) + " "
		if _, err := cli.Put(ctx, key, damaged[key]); err != nil {
			t.Fatal(err)
		}
	}

	released, err := al.ReleaseOwner(ctx, a)
	if !slices.Equal(released, []netip.Addr{v4(1), v4(2)}) {
		t.Fatalf("ReleaseOwner(a) released %v (%v), want 10.0.0.1 and 10.0.0.2", released, err)
	}
	checkSkipped(t, "ReleaseOwner(a)", err, skippedKey{v4(3), s.addrKey(v4(3))}, skippedKey{v4(4), s.addrKey(v4(4))})
	for _, addr := range released {
		if rec, err := s.GetAddress(ctx, addr); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("GetAddress(%s) after its release: %+v, %v; want ErrNotFound", addr, rec, err)
		}
	}
	for key, val := range damaged {
		if resp, err := cli.Get(ctx, key); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != val {
			t.Errorf("%s after ReleaseOwner: %v, %v; want it as it was", key, resp, err)
		}
	}

	// The damage removed by hand, nothing is left of a's.
	for key := range damaged {
		if _, err := cli.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	if released, err := al.ReleaseOwner(ctx, a); err != nil || len(released) != 0 {
		t.Fatalf("ReleaseOwner(a) again: %v, %v; want nothing and no error", released, err)
	}
}
