package etcd

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// TestCorruptValues puts garbage under a CIDR key, an address key and a
// layout-1 owner key, and under keys that are no address: reads report a
// *CorruptError naming the key (AddressesOf, which cannot tell whose a
// corrupt record is, names it in a *store.SkippedError whatever the owner
// asked for; the owner key is never read), and the watch, from its first
// snapshot on, reports them to the error handler, leaves the CIDR out and
// goes on. Nothing panics.
func TestCorruptValues(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	var log errLog
	s, err := New(cli, WithPrefix("/corrupt"), WithErrorHandler(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	put := func(key, val string) {
		t.Helper()
		if _, err := cli.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "x"}
	badAddr := netip.MustParseAddr("10.0.0.9")
	cidrKey, addrKey := s.cidrKey("bad"), s.addrKey(badAddr)
	ownerKey := s.ownerKey(owner, netip.MustParseAddr("10.0.0.8"))
	put(cidrKey, "\x00garbage")
	put(addrKey, `{"v":99}`)
	put(ownerKey, `not json`)

	_, err = s.GetCIDR(ctx, "bad")
	checkCorrupt(t, err, cidrKey)
	_, err = s.GetAddress(ctx, badAddr)
	checkCorrupt(t, err, addrKey)
	_, _, err = s.DeleteAddress(ctx, badAddr)
	checkCorrupt(t, err, addrKey)
	// The batches compare a record's value with the bytes the store would
	// write for it, not only its revision: a record given at the corrupt
	// key's revision matches nothing, and the value stays as it is.
	resp, err := cli.Get(ctx, addrKey)
	if err != nil {
		t.Fatal(err)
	}
	given := ipaddress.IPAddress{Addr: badAddr, Parent: owner, Revision: resp.Kvs[0].ModRevision}
	if _, err := s.DeleteRecords(ctx, []ipaddress.IPAddress{given}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("DeleteRecords of a record at the corrupt key's revision: %v, want ErrConflict", err)
	}
	if _, err := s.ReplaceRecords(ctx, []ipaddress.IPAddress{given}, []ipaddress.ParentRef{owner}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("ReplaceRecords of a record at the corrupt key's revision: %v, want ErrConflict", err)
	}
	if after, err := cli.Get(ctx, addrKey); err != nil || len(after.Kvs) != 1 || string(after.Kvs[0].Value) != `{"v":99}` || after.Kvs[0].ModRevision != given.Revision {
		t.Fatalf("the corrupt value after the batches: %+v, %v; want it as it was", after, err)
	}
	_, err = s.ListAddresses(ctx)
	checkCorrupt(t, err, addrKey)
	_, err = s.AddressesOf(ctx, owner)
	checkCorrupt(t, err, addrKey)
	upd := cidrset.CIDR{Name: "bad", Revision: 1, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	_, err = s.UpdateCIDR(ctx, upd)
	checkCorrupt(t, err, cidrKey)

	// A corrupt CIDR in the first snapshot is reported and left out, as in
	// a re-list: the watch starts. Address values are not read by the
	// snapshot (the key is the address), so the corrupt address is there.
	good, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "good", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel()
	if err := s.Watch(ctx, m); err != nil {
		t.Fatalf("Watch over a corrupt CIDR: %v", err)
	}
	if _, cidrs, addrs := m.state(); !slices.Equal(cidrs, []string{fmt.Sprintf("good@%d", good.Revision)}) || !slices.Equal(addrs, []netip.Addr{badAddr}) {
		t.Fatalf("snapshot: %v %v", cidrs, addrs)
	}
	if errs := log.all(); len(errs) != 1 {
		t.Fatalf("the first snapshot reported %v, want the corrupt CIDR only", errs)
	} else {
		checkCorrupt(t, errs[0], cidrKey)
	}

	// Corruption met by the running watch: reported, and the watch goes on.
	addr2Key := s.addrKey(netip.MustParseAddr("10.0.0.10"))
	badKey := s.ipPfx + "4/zz"
	put(s.cidrKey("good"), "{")
	put(addr2Key, "[1,2]")
	put(badKey, `{"v":1}`)
	mustCreate(t, ctx, s, netip.MustParseAddr("10.0.0.11"))
	eventually(t, "the events after the corrupt ones", func() bool {
		_, _, addrs := m.state()
		return slices.Contains(addrs, netip.MustParseAddr("10.0.0.11"))
	})
	_, cidrs, addrs := m.state()
	if len(cidrs) != 0 {
		t.Fatalf("a CIDR that cannot be decoded is still served: %v (was %v)", cidrs, good)
	}
	if !slices.Contains(addrs, netip.MustParseAddr("10.0.0.10")) {
		t.Fatalf("the address of a corrupt record is not known as taken: %v", addrs)
	}
	for _, key := range []string{cidrKey, s.cidrKey("good"), addr2Key, badKey} {
		if !slices.ContainsFunc(log.all(), func(err error) bool {
			var ce *CorruptError
			return errors.As(err, &ce) && ce.Key == key && errors.Is(err, store.ErrCorrupt)
		}) {
			t.Fatalf("corrupt key %q not reported; reported: %v", key, log.all())
		}
	}
	// A value the store can read brings the CIDR in.
	put(cidrKey, string(encodeCIDR(cidrset.CIDR{Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}})))
	eventually(t, "the repaired CIDR", func() bool {
		_, cidrs, _ := m.state()
		return len(cidrs) == 1 && strings.HasPrefix(cidrs[0], "bad@")
	})

	// The owner index, following the same writes, names the corrupt keys,
	// the first in key order first, until they are gone; the garbage owner
	// key is not read at all.
	_, err = s.AddressesOf(ctx, owner)
	checkCorrupt(t, err, addrKey)
	for _, key := range []string{addrKey, addr2Key} {
		if _, err := cli.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.AddressesOf(ctx, owner)
	checkCorrupt(t, err, badKey)
	if _, err := cli.Delete(ctx, badKey); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.AddressesOf(ctx, owner); err != nil || len(recs) != 0 {
		t.Fatalf("AddressesOf after the corrupt records went: %v, %v", recs, err)
	}
}

// TestAllocatorStartsBesideACorruptCIDR: a CIDR value the store never
// wrote (here with a field it does not know) keeps no allocator from
// starting. The allocator serves the other CIDRs and nothing from the
// corrupt one, and the store reports its key.
func TestAllocatorStartsBesideACorruptCIDR(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	var log errLog
	s, err := New(cli, WithPrefix("/corrupt-start"), WithErrorHandler(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// 10.0.0.0/30 offers .1 and .2; .1 is taken.
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "good", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/30")}}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, ctx, s, netip.MustParseAddr("10.0.0.1"))
	badKey := s.cidrKey("bad")
	if _, err := cli.Put(ctx, badKey, `{"v":1,"prefixes":["10.1.0.0/24"],"created":0,"note":"edited"}`); err != nil {
		t.Fatal(err)
	}

	a, err := allocator.New(ctx, s)
	if err != nil {
		t.Fatalf("allocator beside a corrupt CIDR: %v", err)
	}
	defer a.Close()
	if cidrs := a.CIDRs(); len(cidrs) != 1 || cidrs[0].Name != "good" {
		t.Fatalf("allocator serves %+v, want good only", cidrs)
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "web"}
	if r, err := a.AllocateNext(ctx, ipaddress.IPv4, owner); err != nil || r.Addr != netip.MustParseAddr("10.0.0.2") {
		t.Fatalf("AllocateNext = %+v, %v; want 10.0.0.2 from good", r, err)
	}
	if r, err := a.AllocateNext(ctx, ipaddress.IPv4, owner); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("AllocateNext with good full = %+v, %v; want ErrFull, nothing from the corrupt CIDR", r, err)
	}
	if errs := log.all(); len(errs) != 1 {
		t.Fatalf("reported %v, want the corrupt CIDR once", errs)
	} else {
		checkCorrupt(t, errs[0], badKey)
	}
	_, err = s.GetCIDR(ctx, "bad")
	checkCorrupt(t, err, badKey)
}
