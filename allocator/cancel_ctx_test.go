package allocator

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

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// asyncStore is a memory store seen as a remote one (its Locked side
// hidden) whose watch delivers events from a goroutine of its own, a
// little after the write, as an etcd watch does.
type asyncStore struct {
	store.Store
}

type asyncWatcher struct {
	w  store.Watcher
	mu sync.Mutex
	q  []store.Event
	// kick wakes the deliverer.
	kick chan struct{}
}

func (a *asyncWatcher) Reset(s store.Snapshot) { a.w.Reset(s) }

func (a *asyncWatcher) Apply(e store.Event) {
	a.mu.Lock()
	a.q = append(a.q, e)
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

func (a *asyncWatcher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.kick:
		}
		for {
			a.mu.Lock()
			if len(a.q) == 0 {
				a.mu.Unlock()
				break
			}
			e := a.q[0]
			a.q = a.q[1:]
			a.mu.Unlock()
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			a.w.Apply(e)
		}
	}
}

func (s asyncStore) Watch(ctx context.Context, w store.Watcher) error {
	aw := &asyncWatcher{w: w, kick: make(chan struct{}, 1)}
	if err := s.Store.Watch(ctx, aw); err != nil {
		return err
	}
	go aw.run(ctx)
	return nil
}

func nthOwner(i int) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "churn", Name: fmt.Sprintf("o-%d", i)}
}

// shortCtx returns a context that ends after a random few microseconds, or
// has ended already, or never ends.
func shortCtx(parent context.Context) (context.Context, context.CancelFunc) {
	switch rand.IntN(4) {
	case 0:
		ctx, cancel := context.WithCancel(parent)
		cancel()
		return ctx, cancel
	case 1:
		return context.WithCancel(parent)
	}
	return context.WithTimeout(parent, time.Duration(rand.IntN(300))*time.Microsecond)
}

// syncIndex has a reach the store's latest revision: a CIDR written
// through the store, and waited for.
func syncIndex(t *testing.T, ctx context.Context, a *Allocator, st store.Store, i int) {
	t.Helper()
	c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: fmt.Sprintf("sync-%d", i), Prefixes: []netip.Prefix{netip.MustParsePrefix("fd00:99::/120")}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.WaitRevision(wctx, c.Revision); err != nil {
		t.Fatal(err)
	}
}

// A call whose context ends at any point, over a store whose watch lags
// its writes, leaves the allocators' indexes as the store (once the watch
// caught up), and no record for an owner told its allocation failed;
// one told it succeeded holds what it was told.
func TestACanceledCallLeavesTheIndexAsTheStoreAndNoUntoldRecord(t *testing.T) {
	for _, remote := range []bool{false, true} {
		t.Run(fmt.Sprintf("remote=%v", remote), func(t *testing.T) {
			ctx := context.Background()
			mem := memory.New(memory.WithOwnerIndex())
			var st store.Store = mem
			if remote {
				st = asyncStore{mem}
			}
			as := []*Allocator{newTestAllocator(t, st), newTestAllocator(t, st)}
			if _, err := as[0].CreateCIDR(ctx, "a", netip.MustParsePrefix("10.0.0.0/26"), netip.MustParsePrefix("fd00::/122")); err != nil {
				t.Fatal(err)
			}
			syncIndex(t, ctx, as[1], mem, 0)
			type told struct {
				addrs []netip.Addr
				ok    bool
			}
			var mu sync.Mutex
			results := map[int]told{}
			var wg sync.WaitGroup
			const workers, ops = 6, 300
			for g := range workers {
				wg.Go(func() {
					a := as[g%2]
					for i := range ops {
						id := g*ops + i
						owner := nthOwner(id)
						cctx, cancel := shortCtx(ctx)
						var got []netip.Addr
						var err error
						switch rand.IntN(5) {
						case 0:
							var r ipaddress.IPAddress
							r, err = a.AllocateNext(cctx, ipaddress.IPv4, owner)
							got = []netip.Addr{r.Addr}
						case 1:
							var r ipaddress.IPAddress
							r, err = a.Allocate(cctx, netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + rand.IntN(62))}), owner)
							got = []netip.Addr{r.Addr}
						case 2:
							var r4, r6 ipaddress.IPAddress
							r4, r6, err = a.AllocateDualStack(cctx, owner, netip.Addr{}, netip.Addr{})
							got = []netip.Addr{r4.Addr, r6.Addr}
						case 3:
							var r ipaddress.IPAddress
							r, err = a.Restore(cctx, netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + rand.IntN(62))}), owner)
							got = []netip.Addr{r.Addr}
						case 4:
							addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + rand.IntN(62))})
							if rand.IntN(2) == 0 {
								addr = netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(1 + rand.IntN(63))})
							}
							_ = a.Release(cctx, addr)
							cancel()
							continue
						}
						cancel()
						if errors.Is(err, store.ErrOutcomeUnknown) {
							t.Errorf("%v from a store that never loses an answer", err)
						}
						mu.Lock()
						results[id] = told{addrs: got, ok: err == nil}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			for i, a := range as {
				syncIndex(t, ctx, a, mem, 1+i)
				if err := a.checkDerived(ctx, mem); err != nil {
					t.Errorf("allocator %d: %v", i, err)
				}
			}
			for id, r := range results {
				recs, err := mem.AddressesOf(ctx, nthOwner(id))
				if err != nil {
					t.Fatal(err)
				}
				var held []netip.Addr
				for _, rec := range recs {
					held = append(held, rec.Addr)
				}
				switch {
				case !r.ok && len(held) > 0:
					t.Errorf("owner %d was told its allocation failed, but holds %v", id, held)
				case r.ok:
					// Released since, perhaps, by a random Release: only
					// what it holds must be what it was told.
					for _, h := range held {
						if !slices.Contains(r.addrs, h) {
							t.Errorf("owner %d holds %s, was told %v", id, h, r.addrs)
						}
					}
				}
			}
		})
	}
}
