package stress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
)

// RepairHandOver checks SPEC §1/§3 (one owner per address) with §6 over a
// store shared by two allocators, as two apiservers share one: a repair
// pass hands a wrongly owned record (owner b, which exists and holds
// nothing) to the consumer that holds the address (a), while the other
// allocator keeps asking for addresses of a range with no other room.
// Were the address free for a moment, that allocator could take it. open
// returns the two allocators' stores for one trial (the same one, or two
// clients of one etcd) and what closes them.
func RepairHandOver(t *testing.T, trials int, open func(trial int) (st1, st2 store.Store, done func())) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svc := func(name string) ipaddress.ParentRef {
		return ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: name}
	}
	lost := 0
	for trial := range trials {
		st1, st2, done := open(trial)
		a1, a2 := allocatorPair(ctx, t, st1, st2, "kubernetes", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/29")}, allocator.WithStrategy(allocator.Sequential()))
		// .2-.6 held by their consumers; .1 held by a, recorded for b.
		consumers := []repair.Consumer{{Ref: svc("a"), Addrs: []string{"10.0.0.1"}}, {Ref: svc("b")}}
		for i := 2; i <= 6; i++ {
			addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
			ref := svc(fmt.Sprintf("fill-%d", i))
			if _, err := a1.Allocate(ctx, addr, ref); err != nil {
				t.Fatal(err)
			}
			consumers = append(consumers, repair.Consumer{Ref: ref, Addrs: []string{addr.String()}})
		}
		x := netip.MustParseAddr("10.0.0.1")
		rec, err := a1.Allocate(ctx, x, svc("b"))
		if err != nil {
			t.Fatal(err)
		}
		if err := a2.WaitRevision(ctx, rec.Revision); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var taken ipaddress.IPAddress
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				rec, err := a2.AllocateNext(ctx, ipaddress.IPv4, svc("d"))
				if err == nil {
					taken = rec
					return
				}
				if !errors.Is(err, allocator.ErrFull) {
					t.Error(err)
					return
				}
				time.Sleep(100 * time.Microsecond)
			}
		})
		r := &repair.Repairer{Allocator: a1, Consumers: repair.NewStatic(consumers...), LeakGrace: -1}
		rep, err := r.Run(ctx)
		time.Sleep(50 * time.Millisecond) // time to take an address the pass freed
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if got, err := st1.GetAddress(ctx, x); err != nil || got.Parent != svc("a") {
			lost++
			t.Logf("trial %d: %s, held by consumer a, is recorded for %v (%v); the other allocator got %s; events %v", trial, x, got.Parent, err, taken.Addr, rep.Events)
		}
		a1.Close()
		a2.Close()
		done()
	}
	if lost > 0 {
		t.Fatalf("in %d of %d passes another owner took the address consumer a holds", lost, trials)
	}
}
