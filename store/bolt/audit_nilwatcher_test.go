package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

// auditWatcher counts what it is told.
type auditWatcher struct{ resets, applies int }

func (w *auditWatcher) Reset(store.Snapshot) { w.resets++ }
func (w *auditWatcher) Apply(store.Event)    { w.applies++ }

// A nil Watcher is bad input: Watch refuses it with an error matching
// ipaddress.ErrInvalid, as the memory store does, instead of panicking on
// its Reset; and the store goes on watching and writing afterwards.
func TestAuditWatchRefusesANilWatcherWithATypedError(t *testing.T) {
	s, err := bolt.Open(filepath.Join(t.TempDir(), "db"))
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
	var w auditWatcher
	if err := s.Watch(ctx, &w); err != nil {
		t.Fatalf("Watch after a refused nil watcher: %v", err)
	}
	if _, err := s.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.1"), Parent: ipaddress.ParentRef{Resource: "services", Name: "a"}}}); err != nil {
		t.Fatalf("a write after a refused nil watcher: %v", err)
	}
	if w.resets != 1 || w.applies != 1 {
		t.Fatalf("the watcher got %d resets and %d events, want 1 and 1", w.resets, w.applies)
	}
}
