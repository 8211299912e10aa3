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

// RepairRestoreRace checks SPEC §1/§3 (one owner per address) with §6 (a
// consumer address without a record gets one) over a store shared by two
// allocators: a repair pass writes back the lost records of 40 consumer
// addresses (in batches, allocator.RestoreRecords, over a store of round
// trips) while the other allocator takes every address it can of the same
// range, dynamically. The pass keeps its grace: the other allocator's
// records are young, and left alone. Each consumer address ends up
// recorded once: for its consumer, reported Repaired and nothing else; or
// for the other allocator's owner, reported either as a young record left
// for later (taken before the pass listed the records) or as held twice
// ("already allocated": taken after). None is left without a record, none
// is reported Repaired but held by another, and nothing fails. open
// returns the two allocators' stores for one trial and what closes them.
func RepairRestoreRace(t *testing.T, trials int, open func(trial int) (st1, st2 store.Store, done func())) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const held = 40
	for trial := range trials {
		st1, st2, done := open(trial)
		a1, a2 := allocatorPair(ctx, t, st1, st2, "c", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/26")})
		consumers := make([]repair.Consumer, held)
		owner := map[netip.Addr]ipaddress.ParentRef{}
		for i := range consumers {
			addr := netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + i)})
			ref := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprint("c-", i)}
			consumers[i] = repair.Consumer{Ref: ref, Addrs: []string{addr.String()}}
			owner[addr] = ref
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for n := 0; ; n++ {
				_, err := a2.AllocateNext(ctx, ipaddress.IPv4, ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprint("other-", n)})
				if errors.Is(err, allocator.ErrFull) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
		r := &repair.Repairer{Allocator: a1, Consumers: repair.NewStatic(consumers...)}
		rep, err := r.Run(ctx)
		wg.Wait()
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[netip.Addr][]repair.Kind{}
		for _, e := range rep.Events {
			if e.Kind == repair.Failed {
				t.Errorf("trial %d: %v", trial, e)
			}
			a, err := netip.ParseAddr(e.Addr)
			if err != nil {
				t.Fatalf("trial %d: event %v names no address", trial, e)
			}
			kinds[a] = append(kinds[a], e.Kind)
		}
		outcomes := map[repair.Kind]int{}
		for addr, ref := range owner {
			rec, err := st1.GetAddress(ctx, addr)
			got := kinds[addr]
			if len(got) == 1 {
				outcomes[got[0]]++
			}
			switch {
			case err != nil:
				t.Errorf("trial %d: %s, held by %s, has no record (%v); events %v", trial, addr, ref, err, got)
			case rec.Parent == ref:
				if len(got) != 1 || got[0] != repair.Repaired {
					t.Errorf("trial %d: %s, held by %s and recorded for it: events %v, want one %s", trial, addr, ref, got, repair.Repaired)
				}
			case len(got) != 1 || got[0] != repair.LeakPending && got[0] != repair.Duplicate:
				t.Errorf("trial %d: %s, held by %s, recorded for %s: events %v, want one %s or %s", trial, addr, ref, rec.Parent, got, repair.LeakPending, repair.Duplicate)
			}
		}
		t.Logf("trial %d: consumer addresses %v", trial, outcomes)
		a1.Close()
		a2.Close()
		done()
		if t.Failed() {
			return
		}
	}
}
