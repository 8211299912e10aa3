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

// FencedError.Seen is a revision a Watch of the store reaches. When the
// latest write to etcd is another key's (another prefix's, another
// application's), etcd's revision is none: a caller waiting for its view
// to reach it (the finalizer, for 5 s per retry) would wait in vain. For a
// CIDR changed since the fence, and for one deleted since, on each path
// that reports a broken fence.
func TestFencedSeenIsReachedByAWatchAfterAWriteOutsideTheStore(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/fence-seen"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m := newModel()
	if err := s.Watch(ctx, m); err != nil {
		t.Fatal(err)
	}
	create := func(name, p string) cidrset.CIDR {
		got, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: name, Prefixes: []netip.Prefix{netip.MustParsePrefix(p)}})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	changed, deleted, kept := create("changed", "10.0.0.0/24"), create("deleted", "10.1.0.0/24"), create("kept", "10.2.0.0/24")
	upd := changed.Clone()
	upd.Terminating = true
	if _, err := s.UpdateCIDR(ctx, upd); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCIDR(ctx, deleted.Name, deleted.Revision); err != nil {
		t.Fatal(err)
	}
	recs, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.2.0.1"), Parent: svc("last")}})
	if err != nil {
		t.Fatal(err)
	}
	last := recs[0].Revision // the store's latest write
	if _, err := cli.Put(ctx, "/some-other-application/key", "x"); err != nil {
		t.Fatal(err)
	}
	var maxSeen int64
	for _, f := range []store.Fence{
		{CIDR: changed.Name, Revision: changed.Revision},
		{CIDR: deleted.Name, Revision: deleted.Revision},
		{CIDR: deleted.Name, Revision: deleted.Revision, Touch: true},
	} {
		_, cerr := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.9"), Parent: svc("x")}}, f)
		derr := s.DeleteCIDR(ctx, kept.Name, kept.Revision, f)
		for i, err := range []error{cerr, derr} {
			var fe *store.FencedError
			if !errors.As(err, &fe) {
				t.Fatalf("fenced on %+v: %v, want a *FencedError", f, err)
			}
			if i == 0 && f.CIDR == deleted.Name {
				// An allocation does not wait for etcd to tell when the
				// CIDR went (its next sync of past watchers, up to 100 ms).
				if fe.Seen != 0 {
					t.Errorf("CreateAddresses fenced on %+v, gone: Seen = %d, want 0 (unknown, at once)", f, fe.Seen)
				}
				continue
			}
			if fe.Seen <= f.Revision || fe.Seen > last {
				t.Errorf("fenced on %+v: Seen = %d, want after the fence's revision and at most %d, the store's latest write (etcd's is another key's)", f, fe.Seen, last)
			}
			maxSeen = max(maxSeen, fe.Seen)
		}
	}
	// The watch gets there at once; only a Seen it never delivers waits.
	deadline := time.Now().Add(hangLimit)
	for {
		m.mu.Lock()
		at := m.rev
		m.mu.Unlock()
		if at >= maxSeen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store's watch, at revision %d, never reached Seen = %d", at, maxSeen)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Where the history that tells when a fenced CIDR went is compacted, or
// the CIDR never had the fence's revision, Seen is 0 (unknown), at once,
// rather than a revision a Watch may never reach.
func TestFencedSeenIsUnknownWithoutTheCIDRsHistory(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/fence-compacted"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "d", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteCIDR(ctx, d.Name, d.Revision); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Put(ctx, "/some-other-application/key", "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	for _, f := range []store.Fence{
		{CIDR: d.Name, Revision: d.Revision},
		{CIDR: d.Name, Revision: d.Revision, Touch: true},
		{CIDR: "never", Revision: 1},
	} {
		_, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.1.0.9"), Parent: svc("x")}}, f)
		var fe *store.FencedError
		if !errors.As(err, &fe) || fe.Seen != 0 {
			t.Fatalf("fenced on %+v: %v (%+v), want a *FencedError with Seen 0", f, err, fe)
		}
	}
}
