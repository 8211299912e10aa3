package etcd

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
)

// hangLimit bounds a call that returns in milliseconds unless it waits on
// a progress notification etcd never sends; only a hang reaches it.
const hangLimit = 15 * time.Second

// registered leaves a watch just started time to reach etcd, so that a
// hang the test looks for can show; it is not needed for the test to pass.
const registered = 500 * time.Millisecond

// addressesOfReturns fails the test if AddressesOf(owner) does not answer
// within hangLimit.
func addressesOfReturns(t *testing.T, ctx context.Context, addressesOf func(context.Context) error, what string) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, hangLimit)
	defer cancel()
	start := time.Now()
	if err := addressesOf(cctx); err != nil {
		t.Fatalf("AddressesOf %s: %v after %v", what, err, time.Since(start).Round(time.Millisecond))
	}
}

// The latest write is a CIDR's, so the owner index gets no event of it and
// AddressesOf waits on a progress notification. An allocator started then
// on the same client watches from past that revision; on a stream shared
// with the index, its watch would hold the notification back until etcd is
// written again.
func TestAddressesOfReturnsAfterAWatchStartsOnTheSameClient(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	s, err := New(c.newClient(t), WithPrefix("/progress-watch"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	addrsOf(t, ctx, s, svc("a")) // the owner index runs
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "kubernetes", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	a, err := allocator.New(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	time.Sleep(registered)
	addressesOfReturns(t, ctx, func(ctx context.Context) error {
		_, err := a.AddressesOf(ctx, svc("a"))
		return err
	}, "on a quiet store, after an allocator started on its client")
}

// The same after a lost connection: the client resumes the allocator's
// watch after the last CIDR event it received, past the current revision.
func TestAddressesOfReturnsAfterAReconnect(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	px := startProxy(t, c.members[0].client.Host)
	s, err := New(quickReconnectClient(t, "http://"+px.Addr()), WithPrefix("/progress-reconnect"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := allocator.New(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	addrsOf(t, ctx, s, svc("a"))
	if _, err := a.CreateCIDR(ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/24")); err != nil {
		t.Fatal(err)
	}
	// The allocator's watch has the CIDR event: it resumes past it.
	if err := a.WaitRevision(ctx, mustGetCIDR(t, ctx, s, "kubernetes").Revision); err != nil {
		t.Fatal(err)
	}
	px.Pause()
	time.Sleep(100 * time.Millisecond)
	px.Resume()
	time.Sleep(time.Second) // reconnected and resumed, when the hang can show
	addressesOfReturns(t, ctx, func(ctx context.Context) error {
		_, err := a.AddressesOf(ctx, svc("a"))
		return err
	}, "after a reconnect")
}

// Two stores on one client: the index of one, started after the latest
// write, watches from past it; it must not hold back the other's.
func TestAddressesOfReturnsWithTwoStoresOnOneClient(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	a, err := New(cli, WithPrefix("/progress-two-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(cli, WithPrefix("/progress-two-b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	addrsOf(t, ctx, b, svc("x"))
	if _, err := b.CreateCIDR(ctx, cidrset.CIDR{Name: "k", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	addrsOf(t, ctx, a, svc("x")) // a's index starts, watching from past the latest write
	time.Sleep(registered)
	addressesOfReturns(t, ctx, func(ctx context.Context) error {
		_, err := b.AddressesOf(ctx, svc("x"))
		return err
	}, "on one store after another store's owner index started on the same client")
}

func mustGetCIDR(t *testing.T, ctx context.Context, s *Store, name string) cidrset.CIDR {
	t.Helper()
	c, err := s.GetCIDR(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
