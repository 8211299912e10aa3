package etcd

import (
	"errors"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
)

// Close of an allocator over etcd while its calls are in flight: each call
// ends, with its own answer or allocator.ErrClosed, none hangs, and the
// allocator's watch of the store (the store stays open) leaves no
// goroutine behind.
func TestAllocatorCloseInFlightOverEtcdEndsEveryCallAndLeavesNoGoroutine(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	c := startCluster(t, 1)
	s, err := New(c.newClient(t), WithPrefix("/close"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ok := func(err error) bool {
		if err == nil {
			return true
		}
		for _, e := range []error{allocator.ErrClosed, allocator.ErrFull, allocator.ErrAllocated, allocator.ErrNotFound, allocator.ErrExists, allocator.ErrDeletionBlocked} {
			if errors.Is(err, e) {
				return true
			}
		}
		return false
	}
	round := func(r int) {
		a, err := allocator.New(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.EnsureDefault(ctx, netip.MustParsePrefix("10.0.0.0/26")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := 0; ; i++ {
					var err error
					addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + (g*7+i)%62)})
					switch i % 4 {
					case 0:
						_, err = a.AllocateNext(ctx, ipaddress.IPv4, nthOwner(r*10000+g*1000+i))
					case 1:
						_, err = a.Allocate(ctx, addr, nthOwner(r*10000+g*1000+i))
					case 2:
						err = a.Release(ctx, addr)
					case 3:
						if _, err = a.CreateCIDR(ctx, "extra", netip.MustParsePrefix("10.0.0.0/27")); err == nil || errors.Is(err, allocator.ErrExists) {
							err = a.DeleteCIDR(ctx, "extra")
						}
					}
					if !ok(err) {
						t.Errorf("round %d: a call Close cut into: %v", r, err)
					}
					if errors.Is(err, allocator.ErrClosed) {
						return
					}
				}
			})
		}
		time.Sleep(time.Duration(20+10*r) * time.Millisecond)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: calls in flight at Close did not end", r)
		}
	}
	round(0) // warms the client's connections and streams up
	time.Sleep(500 * time.Millisecond)
	base := runtime.NumGoroutine()
	for r := 1; r <= 6; r++ {
		round(r)
	}
	deadline := time.Now().Add(10 * time.Second)
	n := runtime.NumGoroutine()
	for n > base+2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	if n > base+2 {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines after six more allocators closed, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}
