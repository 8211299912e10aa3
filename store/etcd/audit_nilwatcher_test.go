package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
)

// A nil Watcher is bad input: Watch refuses it with an error matching
// ipaddress.ErrInvalid, as the memory store does, instead of panicking on
// its Reset (with the call counted as in flight); and the store goes on
// watching afterwards.
func TestAuditWatchRefusesANilWatcherWithATypedError(t *testing.T) {
	c := startCluster(t, 1)
	s, err := New(c.newClient(t), WithPrefix("/audit-nil-watcher"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	ctx := context.Background()
	if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		err = s.Watch(ctx, nil)
	}()
	if !errors.Is(err, ipaddress.ErrInvalid) {
		t.Fatalf("Watch(ctx, nil) = %v, want an error matching ipaddress.ErrInvalid", err)
	}
	m := newModel()
	if err := s.Watch(ctx, m); err != nil {
		t.Fatalf("Watch after a refused nil watcher: %v", err)
	}
	if resets, cidrs, _ := m.state(); resets != 1 || len(cidrs) != 1 {
		t.Fatalf("the watcher got %d resets and CIDRs %v, want 1 reset and the CIDR", resets, cidrs)
	}
}
