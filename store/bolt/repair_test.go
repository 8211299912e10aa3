package bolt_test

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
)

// SPEC §1/§3 (one owner per address) with §6, over bolt: a repair pass
// hands a wrongly referenced record to the consumer that holds the
// address while a second allocator on the same store serves requests; the
// address must never be free for it to take. Real concurrency, no hooks.
func TestRepairOverBoltNeverHandsAConsumersAddressToAnother(t *testing.T) {
	const trials = 60
	lost := 0
	for trial := range trials {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		st := mustOpen(t, tempPath(t))
		a1, err := allocator.New(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		a2, err := allocator.New(ctx, st, allocator.WithStrategy(allocator.Sequential()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a1.CreateCIDR(ctx, "kubernetes", netip.MustParsePrefix("10.0.0.0/29")); err != nil {
			t.Fatal(err)
		}
		consumers := []repair.Consumer{{Ref: svc("default", "a"), Addrs: []string{"10.0.0.1"}}, {Ref: svc("default", "b")}}
		for i := 2; i <= 6; i++ {
			addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
			ref := svc("default", fmt.Sprintf("fill-%d", i))
			if _, err := a1.Allocate(ctx, addr, ref); err != nil {
				t.Fatal(err)
			}
			consumers = append(consumers, repair.Consumer{Ref: ref, Addrs: []string{addr.String()}})
		}
		x := ip("10.0.0.1")
		rec, err := a1.Allocate(ctx, x, svc("default", "b"))
		if err != nil {
			t.Fatal(err)
		}
		if err := a2.WaitRevision(ctx, rec.Revision); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := a2.AllocateNext(ctx, ipaddress.IPv4, svc("default", "d"))
				if err == nil {
					return
				}
				if !errors.Is(err, allocator.ErrFull) {
					t.Error(err)
					return
				}
				time.Sleep(50 * time.Microsecond)
			}
		})
		r := &repair.Repairer{Allocator: a1, Consumers: repair.NewStatic(consumers...), LeakGrace: -1}
		rep, err := r.Run(ctx)
		time.Sleep(20 * time.Millisecond)
		close(stop)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		got, gerr := st.GetAddress(ctx, x)
		if gerr != nil || got.Parent != svc("default", "a") {
			lost++
			t.Logf("trial %d: 10.0.0.1 held by consumer a is recorded for %v (%v); events %v", trial, got.Parent, gerr, rep.Events)
		}
		a1.Close()
		a2.Close()
		st.Close()
		cancel()
	}
	if lost > 0 {
		t.Fatalf("in %d of %d passes another owner took the address consumer a holds (SPEC §1/§3: one owner per address)", lost, trials)
	}
}
