package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// touchRaceStore is a memory store taken the remote way (as bolt and
// etcd are) that runs before, if set, just ahead of every address create
// whose fences touch a CIDR: the moment another apiserver's allocation
// can land between this allocator's choice and its write.
type touchRaceStore struct {
	store.Store
	before func()
}

func (s touchRaceStore) CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...store.Fence) ([]ipaddress.IPAddress, error) {
	if s.before != nil && slices.ContainsFunc(fences, func(f store.Fence) bool { return f.Touch }) {
		s.before()
	}
	return s.Store.CreateAddresses(ctx, recs, fences...)
}

// setupTerminatingOverLive makes T = 10.0.0.0/16 Terminating, held by an
// address only it contains, and L = 10.0.0.0/24 live inside it, through
// a: every dynamic IPv4 allocation then comes from L, inside T.
func setupTerminatingOverLive(t *testing.T, a *allocator.Allocator) {
	t.Helper()
	ctx := context.Background()
	if _, err := a.CreateCIDR(ctx, "t", pfx("10.0.0.0/16")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, ip("10.0.200.1"), svc("holder")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateCIDR(ctx, "l", pfx("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteCIDR(ctx, "t"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(t): %v, want blocked", err)
	}
}

// SPEC §3: a dynamic request is served by any Ready CIDR with room, and
// fails only with "range is full" once every one is full. Two
// allocations of different addresses from a live CIDR do not conflict,
// also where that CIDR lies inside a Terminating one: each create
// touches the Terminating CIDR (so that a removal decided before the
// address existed fails), and every touch gives it a new revision; a
// touching fence holds at a later revision than the one it names
// (store.Fence.HeldAt), so the others' touches do not fence this one out.
// (With exact revisions, an allocator whose every write followed one
// other allocation there retried maxAttempts times and then failed with
// *store.FencedError, over a store that is not store.Locked.)
func TestSpec3ALiveCIDRWithRoomServesWhileOthersAllocateInsideATerminatingCIDR(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	other, err := allocator.New(ctx, st) // another apiserver
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	setupTerminatingOverLive(t, other)

	n := 0
	racing := touchRaceStore{Store: unlockedStore{st}, before: func() {
		n++
		if _, err := other.AllocateNext(ctx, ipaddress.IPv4, svc(fmt.Sprint("other-", n))); err != nil {
			t.Errorf("the other allocator: %v", err)
		}
	}}
	a, err := allocator.New(ctx, racing, allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	r, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("mine"))
	if err != nil {
		t.Fatalf("AllocateNext from L (room: %d addresses) while another allocator allocates %d times inside T: %v (store.ErrFenced: %v)",
			238-n, n, err, errors.Is(err, store.ErrFenced))
	}
	if !pfx("10.0.0.0/24").Contains(r.Addr) {
		t.Fatalf("AllocateNext = %s, want an address of L", r.Addr)
	}
}

// The same under plain concurrency, without a scripted interleaving:
// three allocators over a store whose watch is told after the write (as
// etcd's), twelve goroutines allocating and releasing from L inside the
// Terminating T. No call may fail. (With exact revisions, some failed
// with *store.FencedError in 2 runs of 10 on a 2-core host.)
func TestSpec3ConcurrentAllocationsInsideATerminatingCIDRDoNotFail(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	var as []*allocator.Allocator
	for range 3 {
		a, err := allocator.New(ctx, allocator.AsyncWatch(st), allocator.WithStrategy(allocator.RandomStart(rand.NewPCG(1, 2))))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		as = append(as, a)
	}
	setupTerminatingOverLive(t, as[0])
	c, err := st.GetCIDR(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range as {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := a.WaitRevision(wctx, c.Revision)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	failed := map[string]int{}
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := as[w%len(as)]
			for i := range 500 {
				r, err := a.AllocateNext(ctx, ipaddress.IPv4, svc(fmt.Sprintf("w%d-%d", w, i)))
				if err != nil {
					mu.Lock()
					failed[fmt.Sprintf("%T", err)]++
					mu.Unlock()
					continue
				}
				_ = a.Release(ctx, r.Addr)
			}
		}()
	}
	wg.Wait()
	if len(failed) > 0 {
		t.Fatalf("allocations from L (never more than 12 of its 254 addresses held) failed: %v", failed)
	}
}
