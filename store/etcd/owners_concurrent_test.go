package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// twoClients is two stores on two clients of one etcd, same prefix, each
// with an allocator: two apiservers.
type twoClients struct {
	ctx    context.Context
	st     [2]*Store
	a      [2]*allocator.Allocator
	prefix netip.Prefix
}

func newTwoClients(t *testing.T, prefix string, cidr string) *twoClients {
	t.Helper()
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	r := &twoClients{ctx: testCtx(t, 2*time.Minute), prefix: netip.MustParsePrefix(cidr)}
	for i := range 2 {
		st, err := New(c.newClient(t), WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		r.st[i] = st
	}
	for i := range 2 {
		a, err := allocator.New(r.ctx, r.st[i])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = a.Close() })
		r.a[i] = a
	}
	created, err := r.a[0].CreateCIDR(r.ctx, "kubernetes", r.prefix)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.a[1].WaitRevision(r.ctx, created.Revision); err != nil {
		t.Fatal(err)
	}
	return r
}

// byOwner is what ListAddresses says each owner holds, with revisions.
func (r *twoClients) byOwner(t *testing.T) map[ipaddress.ParentRef]map[netip.Addr]int64 {
	t.Helper()
	recs, err := r.st[0].ListAddresses(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[ipaddress.ParentRef]map[netip.Addr]int64{}
	for _, rec := range recs {
		if out[rec.Parent] == nil {
			out[rec.Parent] = map[netip.Addr]int64{}
		}
		out[rec.Parent][rec.Addr] = rec.Revision
	}
	return out
}

// The store.Store contract of AddressesOf (every write completed before
// the call, on any client) with the owner index kept from the watch:
// while two clients hand records from owner to owner (ReplaceAddressAt,
// repair's hand-over) and delete and re-create them, the index of each
// client, once quiet, holds exactly what the records say, revisions
// included.
func TestOwnerIndexMatchesRecordsAfterConcurrentHandOversAndDeletes(t *testing.T) {
	r := newTwoClients(t, "/owners", "10.0.0.0/26")
	owners := []ipaddress.ParentRef{svc("o0"), svc("o1"), svc("o2"), svc("o3")}
	// Start both indexes before the writes.
	for _, st := range r.st {
		if _, err := st.AddressesOf(r.ctx, owners[0]); err != nil {
			t.Fatal(err)
		}
	}
	var addrs []netip.Addr
	for a := r.prefix.Addr().Next(); len(addrs) < 24; a = a.Next() {
		addrs = append(addrs, a)
		if _, err := r.a[0].Allocate(r.ctx, a, owners[len(addrs)%len(owners)]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	deadline := time.Now().Add(3 * time.Second)
	for w := range 4 {
		st, a := r.st[w%2], r.a[w%2]
		rnd := rand.New(rand.NewPCG(uint64(w), 7))
		wg.Go(func() {
			for time.Now().Before(deadline) {
				x := addrs[rnd.IntN(len(addrs))]
				o := owners[rnd.IntN(len(owners))]
				switch rnd.IntN(3) {
				case 0, 1:
					cur, err := st.GetAddress(r.ctx, x)
					if errors.Is(err, store.ErrNotFound) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					_, err = st.ReplaceAddressAt(r.ctx, ipaddress.IPAddress{Addr: x, Parent: o}, cur.Revision)
					if err != nil && !errors.Is(err, store.ErrNotFound) && !errors.Is(err, store.ErrConflict) {
						t.Error(err)
						return
					}
				case 2:
					if err := a.Release(r.ctx, x); err != nil && !errors.Is(err, store.ErrNotFound) {
						t.Error(err)
						return
					}
					if _, err := a.Allocate(r.ctx, x, o); err != nil && !errors.Is(err, allocator.ErrAllocated) {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	want := r.byOwner(t)
	for i, st := range r.st {
		for _, o := range owners {
			recs, err := st.AddressesOf(r.ctx, o)
			if err != nil {
				t.Fatal(err)
			}
			got := map[netip.Addr]int64{}
			for _, rec := range recs {
				if rec.Parent != o {
					t.Errorf("client %d: AddressesOf(%s) returned %+v", i, o, rec)
				}
				got[rec.Addr] = rec.Revision
			}
			w := want[o]
			if w == nil {
				w = map[netip.Addr]int64{}
			}
			if fmt.Sprint(got) != fmt.Sprint(w) {
				t.Errorf("client %d: AddressesOf(%s) = %v; the records say %v", i, o, got, w)
			}
		}
	}
}

// ReleaseOwner's contract over etcd, two apiservers: allocations for one
// owner on both clients, then ReleaseOwner on either returns every address
// allocated before it started, and leaves none of them recorded; while
// allocations go on, everything it returns was the owner's and is free
// or another's now.
func TestReleaseOwnerReleasesEveryAddressAllocatedBeforeIt(t *testing.T) {
	r := newTwoClients(t, "/release-owner", "10.1.0.0/24")
	o := svc("owner")
	for round := range 6 {
		var mu sync.Mutex
		var before []netip.Addr
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for range 5 {
					rec, err := r.a[w].AllocateNext(r.ctx, ipaddress.IPv4, o)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					before = append(before, rec.Addr)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		// Allocations that go on meanwhile, on both clients.
		stop := make(chan struct{})
		var during []netip.Addr
		for w := range 2 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					rec, err := r.a[w].AllocateNext(r.ctx, ipaddress.IPv4, o)
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					during = append(during, rec.Addr)
					mu.Unlock()
				}
			})
		}
		got, err := r.a[round%2].ReleaseOwner(r.ctx, o)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range before {
			if !slices.Contains(got, x) {
				t.Fatalf("round %d: ReleaseOwner = %v, without %s, allocated for %s before it started", round, got, x, o)
			}
		}
		for _, x := range got {
			if !slices.Contains(before, x) && !slices.Contains(during, x) {
				t.Fatalf("round %d: ReleaseOwner returned %s, never allocated for %s", round, x, o)
			}
			if rec, err := r.st[0].GetAddress(r.ctx, x); err == nil && rec.Parent == o {
				// Released, then allocated again to o by a worker: only
				// an address allocated during the release may be.
				if !slices.Contains(during, x) {
					t.Fatalf("round %d: ReleaseOwner returned %s, still recorded for %s: %+v", round, x, o, rec)
				}
			}
		}
		// Clean up for the next round.
		if _, err := r.a[0].ReleaseOwner(r.ctx, o); err != nil {
			t.Fatal(err)
		}
		if recs, err := r.a[1].AddressesOf(r.ctx, o); err != nil || len(recs) != 0 {
			t.Fatalf("round %d: after ReleaseOwner with nothing allocating, AddressesOf = %v, %v", round, recs, err)
		}
	}
}
