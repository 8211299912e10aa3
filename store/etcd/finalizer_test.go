package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// KEP-1880: a Terminating ServiceCIDR loses its finalizer once no IPAddress
// would be orphaned. Over etcd the allocator's index learns of a release
// through a watch, which may deliver it after the delete returned (here it
// always does, by lateWatch); a release must still leave the CIDR removed
// when it returns, as it does over the in-process stores, so that a
// process that exits right after (ipamctl) leaves no CIDR behind. Each
// round releases its CIDR's last address another way: Release by address;
// ReleaseRecords and ReleaseOwner, whose records go in one transaction
// (store.RecordsDeleter). The background reconciler cannot do it for
// them: the watch that would wake it is late.
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
	releases := []struct {
		how     string
		release func(addr netip.Addr) error
	}{
		{"Release", func(addr netip.Addr) error { return a.Release(ctx, addr) }},
		{"ReleaseRecords", func(addr netip.Addr) error {
			rec, err := a.Get(ctx, addr)
			if err != nil {
				return err
			}
			return a.ReleaseRecords(ctx, []ipaddress.IPAddress{rec})[0]
		}},
		{"ReleaseOwner", func(addr netip.Addr) error {
			got, err := a.ReleaseOwner(ctx, owner)
			if err == nil && (len(got) != 1 || got[0] != addr) {
				err = fmt.Errorf("released %v, want %s", got, addr)
			}
			return err
		}},
	}
	for i, r := range releases {
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
		if err := r.release(addr); err != nil {
			t.Fatalf("%s: %s(%s): %v", name, r.how, addr, err)
		}
		if got, err := st.GetCIDR(ctx, name); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s after %s of its last address: %+v, %v; want ErrNotFound", name, r.how, got, err)
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

// KEP-1880 with allocators on several machines: a live CIDR inside a
// Terminating one serves every request while it has room. Each create
// there touches the Terminating CIDR, and each touch gives it a new
// revision; one allocator's touch must not fence out the other's create
// of a different address (store.Fence.HeldAt). Two allocators, each with
// its own etcd client, allocate and release at once: no create is fenced
// out, none fails, and the Terminating CIDR stays, held by the address
// only it contains. (With exact revisions, 100 allocations here met 171
// fenced-out creates, each retried after a wait for the watch.)
func TestAllocatorsServeFromALiveCIDRInsideATerminatingOneTogether(t *testing.T) {
	c := startCluster(t, 1)
	ctx := testCtx(t, time.Minute)
	var fenced atomic.Int64
	var as []*allocator.Allocator
	for range 2 {
		st, err := New(c.newClient(t), WithPrefix("/touching"))
		if err != nil {
			t.Fatal(err)
		}
		a, err := allocator.New(ctx, fenceCounting{st, &fenced})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		as = append(as, a)
	}
	if _, err := as[0].CreateCIDR(ctx, "outer", netip.MustParsePrefix("10.0.0.0/16")); err != nil {
		t.Fatal(err)
	}
	if _, err := as[0].Allocate(ctx, netip.MustParseAddr("10.0.200.1"), svc("holder")); err != nil {
		t.Fatal(err)
	}
	inner, err := as[0].CreateCIDR(ctx, "inner", netip.MustParsePrefix("10.0.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	if err := as[0].DeleteCIDR(ctx, "outer"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(outer) = %v, want blocked by 10.0.200.1", err)
	}
	outer, err := as[0].GetCIDR("outer")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		if err := a.WaitRevision(ctx, max(inner.Revision, outer.Revision)); err != nil {
			t.Fatal(err)
		}
	}
	const workers, each = 4, 25
	errs := make(chan error, workers*each)
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			a := as[w%len(as)]
			for i := range each {
				r, err := a.AllocateNext(ctx, ipaddress.IPv4, svc(fmt.Sprintf("w%d-%d", w, i)))
				if err != nil {
					errs <- fmt.Errorf("AllocateNext: %w", err)
					continue
				}
				if !inner.Prefixes[0].Contains(r.Addr) {
					errs <- fmt.Errorf("AllocateNext = %s, outside the live CIDR", r.Addr)
				}
				if err := a.Release(ctx, r.Addr); err != nil {
					errs <- fmt.Errorf("Release(%s): %w", r.Addr, err)
				}
			}
		}()
	}
	for range workers {
		<-done
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := fenced.Load(); n > 0 {
		t.Errorf("%d creates fenced out in %d allocations", n, workers*each)
	}
	if got, err := as[1].GetCIDR("outer"); err != nil || !got.Terminating {
		t.Fatalf("outer after the allocations: %+v, %v; want it kept, Terminating", got, err)
	}
}

// fenceCounting counts the creates refused by a fence.
type fenceCounting struct {
	*Store
	fenced *atomic.Int64
}

func (s fenceCounting) CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...store.Fence) ([]ipaddress.IPAddress, error) {
	out, err := s.Store.CreateAddresses(ctx, recs, fences...)
	if errors.Is(err, store.ErrFenced) {
		s.fenced.Add(1)
	}
	return out, err
}
