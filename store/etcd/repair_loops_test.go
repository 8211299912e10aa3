package etcd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
)

// consumerRegistry is the consumers' truth (the Services), kept consistent
// with the store: an allocation and its registration, an unregistration
// and its release, are one step under mu, and List reads under mu.
type consumerRegistry struct {
	mu   sync.Mutex
	held map[ipaddress.ParentRef][]string
}

func (g *consumerRegistry) List(context.Context) ([]repair.Consumer, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []repair.Consumer
	for ref, addrs := range g.held {
		out = append(out, repair.Consumer{Ref: ref, Addrs: append([]string(nil), addrs...)})
	}
	return out, nil
}

func (g *consumerRegistry) Exists(_ context.Context, ref ipaddress.ParentRef) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.held[ref]
	return ok, nil
}

// SPEC §6 with two apiservers, each running its repair loop with its own
// allocator over one etcd, while consumers come and go on both: at
// quiescence every consumer's address is recorded for it, whatever the
// passes found (records lost, records of a deleted owner, records naming
// another owner), and no pass freed an address a consumer holds.
func TestTwoRepairLoopsAndLiveConsumersLeaveEveryConsumerAddressRecorded(t *testing.T) {
	r := newTwoClients(t, "/two-repairs", "10.2.0.0/26")
	g := &consumerRegistry{held: map[ipaddress.ParentRef][]string{}}
	// Consumers with damage: every third has lost its record, every third
	// has its record under a ghost owner. The damage comes once all hold
	// their addresses: an address whose record was lost is free, and a
	// later consumer given it too would make the consumers' truth name it
	// twice, which repair reports and leaves as it is (SPEC §6).
	recs := make([]ipaddress.IPAddress, 30)
	for i := range recs {
		ref := svc(fmt.Sprintf("s%d", i))
		rec, err := r.a[i%2].AllocateNext(r.ctx, ipaddress.IPv4, ref)
		if err != nil {
			t.Fatal(err)
		}
		g.held[ref] = []string{rec.Addr.String()}
		recs[i] = rec
	}
	for i, rec := range recs {
		switch i % 3 {
		case 1:
			if _, _, err := r.st[0].DeleteAddress(r.ctx, rec.Addr); err != nil {
				t.Fatal(err)
			}
		case 2:
			if _, err := r.st[1].ReplaceAddressAt(r.ctx, ipaddress.IPAddress{Addr: rec.Addr, Parent: svc("ghost")}, rec.Revision); err != nil {
				t.Fatal(err)
			}
		}
	}
	deadline := time.Now().Add(4 * time.Second)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			rp := &repair.Repairer{Allocator: r.a[i], Consumers: g, LeakGrace: -1}
			for time.Now().Before(deadline) {
				if _, err := rp.Run(r.ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	for w := range 2 {
		rnd := rand.New(rand.NewPCG(uint64(w), 11))
		wg.Go(func() {
			n := 0
			for time.Now().Before(deadline) {
				g.mu.Lock()
				var victim ipaddress.ParentRef
				for ref := range g.held {
					victim = ref
					break
				}
				if len(g.held) > 20 && rnd.IntN(2) == 0 {
					addrs := g.held[victim]
					delete(g.held, victim)
					for _, s := range addrs {
						err := r.a[w].Release(r.ctx, netip.MustParseAddr(s))
						if err != nil && !errors.Is(err, store.ErrNotFound) {
							t.Error(err)
						}
					}
				} else {
					n++
					ref := svc(fmt.Sprintf("w%d-%d", w, n))
					rec, err := r.a[w].AllocateNext(r.ctx, ipaddress.IPv4, ref)
					switch {
					case err == nil:
						g.held[ref] = []string{rec.Addr.String()}
					case !errors.Is(err, allocator.ErrFull):
						t.Error(err)
					}
				}
				g.mu.Unlock()
			}
		})
	}
	wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	for ref, addrs := range g.held {
		for _, s := range addrs {
			rec, err := r.st[0].GetAddress(r.ctx, netip.MustParseAddr(s))
			if err != nil || rec.Parent != ref {
				t.Errorf("%s of consumer %s: record %+v, %v; want recorded for it", s, ref, rec, err)
			}
		}
	}
}
