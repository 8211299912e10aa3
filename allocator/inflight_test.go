package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// heldCreateStore is a memory store taken the remote way whose first
// address create is held inside the call. With fail, it is held until its
// context ends and then creates nothing, as an etcd create whose caller
// gave up before it was sent; otherwise it is held until release is
// closed and then made.
type heldCreateStore struct {
	store.Store
	fail    bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (h *heldCreateStore) CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...store.Fence) ([]ipaddress.IPAddress, error) {
	first := false
	h.once.Do(func() { first = true })
	if first {
		close(h.entered)
		if h.fail {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		select {
		case <-h.release:
		case <-ctx.Done(): // a test that failed first
			return nil, ctx.Err()
		}
	}
	return h.Store.CreateAddresses(ctx, recs, fences...)
}

// Spec §3, "when all are full → range is full", and a static request's
// "already allocated": both are answers about the store. An address this
// allocator chose for a create still in flight is not held yet; another
// call that finds no other address, or asks for that one, waits for the
// create's outcome. If the create fails, the address is served to the
// waiting call; if it succeeds, the waiting call gets ErrFull or
// ErrAllocated.
func TestSpec3AnAddressInFlightIsServedAgainIfItsCreateFails(t *testing.T) {
	const last = "10.0.0.2" // of 10.0.0.0/30, once 10.0.0.1 is held
	for _, static := range []bool{false, true} {
		for _, fail := range []bool{true, false} {
			t.Run(fmt.Sprintf("static=%v/createFails=%v", static, fail), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				mem := memory.New()
				if _, err := mem.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{pfx("10.0.0.0/30")}}); err != nil {
					t.Fatal(err)
				}
				if _, err := mem.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.1"), Parent: svc("first")}}); err != nil {
					t.Fatal(err)
				}
				held := &heldCreateStore{Store: unlockedStore{mem}, fail: fail, entered: make(chan struct{}), release: make(chan struct{})}
				a, err := allocator.New(ctx, held)
				if err != nil {
					t.Fatal(err)
				}
				defer a.Close()

				inFlightCtx, giveUp := context.WithCancel(ctx)
				defer giveUp()
				inFlight := make(chan error, 1)
				go func() {
					_, err := a.AllocateNext(inFlightCtx, ipaddress.IPv4, svc("in-flight"))
					inFlight <- err
				}()
				<-held.entered

				type answer struct {
					addr netip.Addr
					err  error
				}
				second := make(chan answer, 1)
				go func() {
					if static {
						r, err := a.Allocate(ctx, ip(last), svc("second"))
						second <- answer{r.Addr, err}
						return
					}
					r, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("second"))
					second <- answer{r.Addr, err}
				}()
				// The second call has answered (wrongly, unless it is told
				// nothing of the outcome) or waits for the create.
				var got answer
				answered := false
				for !answered && !allocator.WaitingForInFlight(a) {
					select {
					case got = <-second:
						answered = true
					case <-ctx.Done():
						t.Fatal("the second call neither answered nor waited")
					case <-time.After(time.Millisecond):
					}
				}
				if fail {
					giveUp()
				} else {
					close(held.release)
				}
				if err := <-inFlight; (err == nil) == fail {
					t.Fatalf("the held create: %v, want failed=%v", err, fail)
				}
				if !answered {
					got = <-second
				}

				wantOwner := "second"
				switch {
				case fail && (got.err != nil || got.addr != ip(last)):
					t.Fatalf("with the create in flight failing, the second call got %v, %v; want %s", got.addr, got.err, last)
				case !fail && static && !errors.Is(got.err, allocator.ErrAllocated):
					t.Fatalf("with the create in flight made, the static call got %v, %v; want ErrAllocated", got.addr, got.err)
				case !fail && !static && !errors.Is(got.err, allocator.ErrFull):
					t.Fatalf("with the create in flight made, the dynamic call got %v, %v; want ErrFull", got.addr, got.err)
				case !fail:
					wantOwner = "in-flight"
				}
				recs, err := mem.AddressesOf(ctx, svc(wantOwner))
				if err != nil || len(recs) != 1 || recs[0].Addr != ip(last) {
					t.Fatalf("the store's records of %s: %v, %v; want %s", wantOwner, recs, err, last)
				}
			})
		}
	}
}
