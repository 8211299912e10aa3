package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// KEP-1880: a Terminating ServiceCIDR loses its finalizer once no IPAddress
// would be orphaned. Over etcd the allocator's index learns of a release
// through a watch, which may deliver it after the delete returned (here it
// always does, by lateWatch); Release must still leave the CIDR removed when
// it returns, as it does over the in-process stores.
func TestReleaseOfTheLastAddressRemovesTheTerminatingCIDR(t *testing.T) {
	c := startCluster(t, 1)
	st, err := New(c.newClient(t), WithPrefix("/finalizer"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := allocator.New(ctx, lateWatch{st, 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "web"}
	for i := range 3 {
		name := fmt.Sprintf("round-%d", i)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 1, byte(i), 0}), 24)
		if _, err := a.CreateCIDR(ctx, name, p); err != nil {
			t.Fatal(err)
		}
		addr := p.Addr().Next()
		if _, err := a.Allocate(ctx, addr, owner); err != nil {
			t.Fatal(err)
		}
		var blocked *allocator.DeletionBlockedError
		if err := a.DeleteCIDR(ctx, name); !errors.As(err, &blocked) {
			t.Fatalf("%s: DeleteCIDR with %s allocated: %v, want *DeletionBlockedError", name, addr, err)
		}
		if err := a.Release(ctx, addr); err != nil {
			t.Fatal(err)
		}
		if got, err := st.GetCIDR(ctx, name); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s after its last address was released: %+v, %v; want ErrNotFound", name, got, err)
		}
	}
}

// lateWatch delivers each address deletion to the watcher late, as a
// loaded etcd member or a slow link may.
type lateWatch struct {
	*Store
	delay time.Duration
}

func (s lateWatch) Watch(ctx context.Context, w store.Watcher) error {
	return s.Store.Watch(ctx, lateWatcher{w, s.delay})
}

type lateWatcher struct {
	store.Watcher
	delay time.Duration
}

func (w lateWatcher) Apply(e store.Event) {
	if e.Kind == store.AddressDeleted {
		time.Sleep(w.delay)
	}
	w.Watcher.Apply(e)
}
