package etcd

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func v4(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}) }

func mustCreate(t *testing.T, ctx context.Context, s store.Store, addrs ...netip.Addr) {
	t.Helper()
	for _, a := range addrs {
		recs := []ipaddress.IPAddress{{Addr: a, Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "svc-" + a.String()}}}
		if _, err := s.CreateAddresses(ctx, recs); err != nil {
			t.Fatalf("create %s: %v", a, err)
		}
	}
}

// TestWatchRelistsAfterCompaction cuts a watching client off its member,
// writes and compacts past the watch's revision meanwhile, and checks that
// the watch, reconnected, is told the history is gone, re-lists, Resets and
// ends up with the store's state.
func TestWatchRelistsAfterCompaction(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	c := startCluster(t, 1)
	px := startProxy(t, c.members[0].client.Host)
	var log errLog
	watching, err := New(c.newClient(t, "http://"+px.Addr()), WithPrefix("/compact"), WithErrorHandler(log.add))
	if err != nil {
		t.Fatal(err)
	}
	defer watching.Close()
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/compact"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	a, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 10; i++ {
		mustCreate(t, ctx, s, v4(i))
	}
	m := newModel()
	if err := watching.Watch(ctx, m); err != nil {
		t.Fatal(err)
	}
	for i := 11; i <= 15; i++ {
		mustCreate(t, ctx, s, v4(i))
	}
	eventually(t, "the watch to see 15 addresses", func() bool { _, _, addrs := m.state(); return len(addrs) == 15 })

	px.Pause()
	for i := 16; i <= 40; i++ {
		mustCreate(t, ctx, s, v4(i))
	}
	for i := 1; i <= 5; i++ {
		if _, _, err := s.DeleteAddress(ctx, v4(i)); err != nil {
			t.Fatal(err)
		}
	}
	a.Terminating = true
	if _, err := s.UpdateCIDR(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "b", Prefixes: []netip.Prefix{netip.MustParsePrefix("fd00::/64")}}); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "/compact")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	if resets, _, _ := m.state(); resets != 1 {
		t.Fatalf("%d resets while cut off", resets)
	}
	px.Resume()

	wantCIDRs, wantAddrs := storeState(t, ctx, s)
	eventually(t, "a second Reset with the store's state", func() bool {
		resets, cidrs, addrs := m.state()
		return resets >= 2 && slices.Equal(cidrs, wantCIDRs) && slices.Equal(addrs, wantAddrs)
	})
	if !slices.ContainsFunc(log.all(), func(err error) bool { return errors.Is(err, rpctypes.ErrCompacted) }) {
		t.Fatalf("no compaction reported; errors: %v", log.all())
	}
	// And the watch goes on after the re-list.
	mustCreate(t, ctx, s, v4(41))
	eventually(t, "an event after the re-list", func() bool {
		_, _, addrs := m.state()
		return slices.Contains(addrs, v4(41))
	})
	if len(m.backward) > 0 {
		t.Fatalf("events out of order: %v", m.backward)
	}
	resets, _, _ := m.state()
	t.Logf("resets %d, reported errors %d (first: %v)", resets, len(log.all()), log.all()[0])
}

// TestWatchStopsOnClose checks that Close ends the watch goroutines.
func TestWatchStopsOnClose(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/close"))
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(cli, WithPrefix("/close"))
	if err != nil {
		t.Fatal(err)
	}
	m := newModel()
	if err := s.Watch(ctx, m); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, ctx, other, v4(1))
	eventually(t, "the first event", func() bool { _, _, addrs := m.state(); return len(addrs) == 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, ctx, other, v4(2))
	time.Sleep(200 * time.Millisecond)
	if _, _, addrs := m.state(); len(addrs) != 1 {
		t.Fatalf("watch went on after Close: %v", addrs)
	}
	if err := s.Watch(ctx, newModel()); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Watch after Close: %v", err)
	}
	// The client is the caller's: still usable.
	if _, err := cli.Get(ctx, "x"); err != nil {
		t.Fatalf("client closed with the store: %v", err)
	}
}
