package etcd

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// A create etcd has applied is reported done even when Close comes while
// its answer is on the way: Close waits for calls in flight before it
// closes a client it owns.
func TestCloseWaitsForACreateEtcdApplied(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	px := startProxy(t, c.members[0].client.Host)
	s, err := New(c.newClient(t, "http://"+px.Addr()), WithPrefix("/closing"), WithCloseClient())
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(c.newClient(t), WithPrefix("/closing"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := s.GetCIDR(ctx, "warm"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err) // the connection is up before replies are held
	}
	px.HoldReplies()
	created := make(chan error, 1)
	go func() {
		_, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: v4(7), Parent: ipaddress.ParentRef{Resource: "services", Namespace: "d", Name: "x"}}})
		created <- err
	}()
	eventually(t, "etcd to apply the create", func() bool {
		_, err := other.GetAddress(ctx, v4(7))
		return err == nil
	})
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	time.Sleep(200 * time.Millisecond) // Close is waiting now
	px.ReleaseReplies()
	if err := <-created; err != nil {
		t.Fatalf("a create etcd applied, Close coming meanwhile: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetCIDR(ctx, "warm"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("a call after Close: %v, want ErrClosed", err)
	}
}

// A call that Close cuts short, its wait over, fails with an error that
// says the store was closed.
func TestACallCutShortByCloseIsErrClosed(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	s, _ := newCutRig(t, ctx, "/cut")
	got := make(chan error, 1)
	go func() { _, err := s.GetCIDR(ctx, "x"); got <- err }()
	time.Sleep(200 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, store.ErrClosed) {
		t.Fatalf("GetCIDR cut short by Close: %v, want an error matching ErrClosed", err)
	}
}

// A write that Close cuts short may have been applied: its error matches
// store.ErrOutcomeUnknown as well as store.ErrClosed.
func TestAWriteCutShortByCloseIsOutcomeUnknown(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	s, other := newCutRig(t, ctx, "/cut-write")
	got := make(chan error, 1)
	go func() {
		_, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "cut", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
		got <- err
	}()
	eventually(t, "etcd to apply the create", func() bool {
		_, err := other.GetCIDR(ctx, "cut")
		return err == nil
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-got; !errors.Is(err, store.ErrClosed) || !errors.Is(err, store.ErrOutcomeUnknown) {
		t.Fatalf("CreateCIDR cut short by Close: %v, want an error matching ErrClosed and ErrOutcomeUnknown", err)
	}
}

// A CIDR rewritten since its revision was read, with a value that does not
// decode: a plain fence on the old revision fails (ErrFenced); a touching
// one holds (store.Fence.HeldAt) and gives the key a new revision, its
// value left byte for byte as etcd held it, undecoded.
func TestATouchingFenceOnARewrittenCIDRKeepsItsValue(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/touch"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cidr, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, s.cidrKey("a"), "not a CIDR"); err != nil {
		t.Fatal(err)
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "d", Name: "x"}
	_, err = s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: v4(1), Parent: owner}}, store.Fence{CIDR: "a", Revision: cidr.Revision})
	if !errors.Is(err, store.ErrFenced) {
		t.Errorf("plain fence: %v, want ErrFenced", err)
	}
	recs, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: v4(1), Parent: owner}}, store.Fence{CIDR: "a", Revision: cidr.Revision, Touch: true})
	if err != nil {
		t.Fatalf("touching fence: %v", err)
	}
	resp, err := cli.Get(ctx, s.cidrKey("a"))
	if err != nil {
		t.Fatal(err)
	}
	if kv := resp.Kvs[0]; string(kv.Value) != "not a CIDR" || kv.ModRevision != recs[0].Revision {
		t.Errorf("touched key: %q at revision %d, want %q at the record's revision %d", kv.Value, kv.ModRevision, "not a CIDR", recs[0].Revision)
	}
}

// Stores with different prefixes share nothing: New refuses a prefix
// inside another store's records, and keys nested under a store's CIDR
// keys by other writers are none of its CIDRs.
func TestANestedPrefixIsRefusedAndNestedKeysIgnored(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	for _, p := range []string{"/n1/v1/cidrs/zz", "/n1/v1/ips", "/n1/v1/owners/x/"} {
		if _, err := New(cli, WithPrefix(p)); err == nil {
			t.Errorf("New with prefix %q, inside /n1's records: no error", p)
		}
		if CheckPrefix(p) == nil {
			t.Errorf("CheckPrefix(%q), inside /n1's records: nil", p)
		}
	}
	for _, p := range []string{"", "/", "/n1", "/n1/v1", "/n1/v1/cidrsx/"} {
		if err := CheckPrefix(p); err != nil {
			t.Errorf("CheckPrefix(%q) = %v, want nil", p, err)
		}
	}
	outer, err := New(cli, WithPrefix("/n1"))
	if err != nil {
		t.Fatal(err)
	}
	defer outer.Close()
	if _, err := outer.CreateCIDR(ctx, cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.70.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	m := newModel()
	if err := outer.Watch(ctx, m); err != nil {
		t.Fatal(err)
	}
	// What a store under /n1/v1/cidrs/zz would write, before and after.
	cidrValue := string(encodeCIDR(cidrset.CIDR{Name: "b", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.71.0.0/24")}, Created: time.Now()}))
	for _, key := range []string{"/n1/v1/cidrs/zz/v1/cidrs/b", "/n1/v1/cidrs/zz/v1/ips/4/0a470001"} {
		if _, err := cli.Put(ctx, key, cidrValue); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := outer.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.72.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the watch to see c", func() bool {
		_, cidrs, _ := m.state()
		return len(cidrs) == 2
	})
	if _, cidrs, _ := m.state(); len(cidrs) != 2 || cidrs[0][:2] != "a@" || cidrs[1][:2] != "c@" {
		t.Fatalf("the watch sees %v, want a and c only", cidrs)
	}
	m2 := newModel()
	if err := outer.Watch(ctx, m2); err != nil {
		t.Fatalf("a Watch beside nested keys: %v", err)
	}
	if _, cidrs, _ := m2.state(); len(cidrs) != 2 {
		t.Fatalf("a snapshot beside nested keys sees %v, want a and c only", cidrs)
	}
}

// newCutRig returns a store on prefix whose client reaches a one-member
// cluster through a proxy now holding every reply, so that the next call
// waits until Close cuts it short (after 100 ms), and a store on the same
// prefix on a client of its own, to look with. The connection is up: a
// call was answered before the replies were held.
func newCutRig(t *testing.T, ctx context.Context, prefix string) (s, other *Store) {
	t.Helper()
	c := startCluster(t, 1)
	px := startProxy(t, c.members[0].client.Host)
	s, err := New(c.newClient(t, "http://"+px.Addr()), WithPrefix(prefix), WithCloseClient())
	if err != nil {
		t.Fatal(err)
	}
	s.closeWait = 100 * time.Millisecond
	other, err = New(c.newClient(t), WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	if _, err := s.GetCIDR(ctx, "warm"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	px.HoldReplies()
	t.Cleanup(px.ReleaseReplies)
	return s, other
}
