package etcd

import (
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
	c := startCluster(t, 1)
	px := startProxy(t, c.members[0].client.Host)
	s, err := New(c.newClient(t, "http://"+px.Addr()), WithPrefix("/cut"), WithCloseClient())
	if err != nil {
		t.Fatal(err)
	}
	s.closeWait = 100 * time.Millisecond
	if _, err := s.GetCIDR(ctx, "warm"); !errors.Is(err, store.ErrNotFound) {
		t.Fatal(err)
	}
	px.HoldReplies()
	defer px.ReleaseReplies()
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

// A touching fence on a CIDR rewritten since its revision was read has
// failed, whatever the new value: ErrFenced, as without Touch, even when
// the value does not decode.
func TestATouchingFenceOnAChangedCIDRIsFenced(t *testing.T) {
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
	for _, touch := range []bool{false, true} {
		_, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: v4(1), Parent: ipaddress.ParentRef{Resource: "services", Namespace: "d", Name: "x"}}},
			store.Fence{CIDR: "a", Revision: cidr.Revision, Touch: touch})
		if !errors.Is(err, store.ErrFenced) {
			t.Errorf("Touch %v: %v, want ErrFenced", touch, err)
		}
	}
}
