package etcd

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// TestCorruptValues puts garbage under a CIDR key, an address key and a
// layout-1 owner key, and under keys that are no address: reads report a
// *CorruptError naming the key (AddressesOf, which cannot tell whose a
// corrupt record is, names it whatever the owner asked for; the owner key is
// never read), the watch refuses a corrupt first snapshot and, once running,
// reports corrupt events to the error handler and goes on. Nothing panics.
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
	_, err = s.ListAddresses(ctx)
	checkCorrupt(t, err, addrKey)
	_, err = s.AddressesOf(ctx, owner)
	checkCorrupt(t, err, addrKey)
	upd := cidrset.CIDR{Name: "bad", Revision: 1, Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	_, err = s.UpdateCIDR(ctx, upd)
	checkCorrupt(t, err, cidrKey)

	// A corrupt first snapshot fails Watch, naming the key.
	err = s.Watch(ctx, newModel())
	checkCorrupt(t, err, cidrKey)

	// Repair the CIDR: the watch starts. Address values are not read by the
	// snapshot (the key is the address), so the corrupt address is there.
	if _, err := cli.Delete(ctx, cidrKey); err != nil {
		t.Fatal(err)
	}
	good, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "good", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	m := newModel()
	if err := s.Watch(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, cidrs, addrs := m.state(); len(cidrs) != 1 || !slices.Equal(addrs, []netip.Addr{badAddr}) {
		t.Fatalf("snapshot: %v %v", cidrs, addrs)
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
	for _, key := range []string{s.cidrKey("good"), addr2Key, badKey} {
		if !slices.ContainsFunc(log.all(), func(err error) bool {
			var ce *CorruptError
			return errors.As(err, &ce) && ce.Key == key && errors.Is(err, store.ErrCorrupt)
		}) {
			t.Fatalf("corrupt key %q not reported; reported: %v", key, log.all())
		}
	}

	// The owner index, following the same writes, names the first corrupt
	// key until the corrupt records are gone; the garbage owner key is not
	// read at all.
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
