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

// A CIDR name with a "/" is refused (store.CheckCIDRName): its key would
// read as a nested store's, so no Watch would ever show the CIDR, while
// GetCIDR would read it back. Nor do GetCIDR, DeleteCIDR or a fence read or
// write the key such a name builds: it may be another store's.
func TestACIDRNameWithASlashIsRefusedAndItsKeyLeftAlone(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	c := startCluster(t, 1)
	cli := c.newClient(t)
	s, err := New(cli, WithPrefix("/slash"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ten := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}
	var fe *ipaddress.FieldError
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "a/b", Prefixes: ten}); !errors.As(err, &fe) || !errors.Is(err, ipaddress.ErrInvalid) {
		t.Fatalf("CreateCIDR(a/b): %v, want an *ipaddress.FieldError", err)
	}
	kept, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "kept", Prefixes: ten})
	if err != nil {
		t.Fatal(err)
	}

	// A CIDR of a store at /slash/v1/cidrs/zz (which New now refuses, but
	// an older version or another writer may have made).
	const name = "zz/v1/cidrs/b"
	key := s.cidrKey(name)
	put, err := cli.Put(ctx, key, string(encodeCIDR(cidrset.CIDR{Prefixes: ten, Created: time.Now()})))
	if err != nil {
		t.Fatal(err)
	}
	rev := put.Header.Revision
	if got, err := s.GetCIDR(ctx, name); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("GetCIDR(%q) = %+v, %v; want ErrNotFound", name, got, err)
	}
	if _, err := s.UpdateCIDR(ctx, cidrset.CIDR{Name: name, Prefixes: ten, Terminating: true, Revision: rev}); !errors.As(err, &fe) {
		t.Errorf("UpdateCIDR(%q): %v, want an *ipaddress.FieldError", name, err)
	}
	if err := s.DeleteCIDR(ctx, name, rev); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("DeleteCIDR(%q): %v, want ErrNotFound", name, err)
	}
	for _, f := range []store.Fence{{CIDR: name, Revision: rev}, {CIDR: name, Revision: rev, Touch: true}} {
		var fenced *store.FencedError
		if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.9"), Parent: svc("x")}}, f); !errors.As(err, &fenced) {
			t.Errorf("CreateAddresses fenced on %+v: %v, want a *FencedError", f, err)
		}
		if err := s.DeleteCIDR(ctx, kept.Name, kept.Revision, f); !errors.As(err, &fenced) {
			t.Errorf("DeleteCIDR(kept) fenced on %+v: %v, want a *FencedError", f, err)
		}
	}
	resp, err := cli.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != rev {
		t.Fatalf("the other store's key %s after the calls naming it: %v, want it untouched at revision %d", key, resp.Kvs, rev)
	}
	if _, err := s.GetCIDR(ctx, kept.Name); err != nil {
		t.Fatalf("a delete fenced on %q removed %s: %v", name, kept.Name, err)
	}
}
