package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// closeOutcome reports whether err may end a call Close cut into: the
// call's own answer (nil, or a refusal of what it asked) or ErrClosed.
func closeOutcome(err error) bool {
	if err == nil {
		return true
	}
	for _, e := range []error{ErrClosed, ErrFull, ErrAllocated, ErrNotFound, ErrExists, ErrDeletionBlocked, ErrTerminating, ErrNotInRange, ErrMismatch} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// settledGoroutines waits up to 5 s for the goroutine count to fall to
// want or below, and returns the count.
func settledGoroutines(want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close while calls are in flight: each call ends, with its own answer or
// ErrClosed, none hangs, and once they have, the allocators leave no
// goroutine behind, whatever the store's watch (in the writer, or lagging
// in a goroutine of its own).
func TestCloseInFlightEndsEveryCallAndLeavesNoGoroutine(t *testing.T) {
	for _, remote := range []bool{false, true} {
		t.Run(fmt.Sprintf("remote=%v", remote), func(t *testing.T) {
			ctx := context.Background()
			mem := memory.New(memory.WithOwnerIndex())
			var st store.Store = mem
			if remote {
				st = asyncStore{mem}
			}
			base := runtime.NumGoroutine()
			for round := range 20 {
				a, err := New(ctx, st)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := a.EnsureDefault(ctx, netip.MustParsePrefix("10.0.0.0/26")); err != nil && !errors.Is(err, ErrTerminating) {
					t.Fatal(err)
				}
				var wg sync.WaitGroup
				ended := make(chan struct{})
				for g := range 6 {
					wg.Go(func() {
						for i := 0; ; i++ {
							owner := nthOwner(round*100000 + g*10000 + i)
							var err error
							switch (g + i) % 6 {
							case 0:
								_, err = a.AllocateNext(ctx, ipaddress.IPv4, owner)
							case 1:
								_, err = a.Allocate(ctx, netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + i%62)}), owner)
							case 2:
								err = a.Release(ctx, netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + i%62)}))
							case 3:
								name := fmt.Sprintf("c-%d-%d", g, i%3)
								if _, err = a.CreateCIDR(ctx, name, netip.MustParsePrefix("10.0.0.0/27")); err == nil || errors.Is(err, ErrExists) {
									err = a.DeleteCIDR(ctx, name)
								}
							case 4:
								_, err = a.ReleaseOwner(ctx, nthOwner(round*100000+g*10000+i-4))
							case 5:
								_, err = a.Restore(ctx, netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + i%62)}), owner)
							}
							if !closeOutcome(err) {
								t.Errorf("round %d: a call Close cut into: %v", round, err)
							}
							if errors.Is(err, ErrClosed) {
								return
							}
						}
					})
				}
				time.Sleep(time.Duration(1+round%5) * time.Millisecond)
				if err := a.Close(); err != nil {
					t.Fatal(err)
				}
				go func() { wg.Wait(); close(ended) }()
				select {
				case <-ended:
				case <-time.After(30 * time.Second):
					t.Fatalf("round %d: calls in flight at Close did not end", round)
				}
			}
			if n := settledGoroutines(base); n > base {
				buf := make([]byte, 1<<20)
				t.Errorf("%d goroutines after every allocator closed, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
			}
		})
	}
}
