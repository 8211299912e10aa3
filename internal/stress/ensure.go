package stress

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// EnsureNextAgrees checks allocator.EnsureNext over a store shared by two
// allocators: calls for one owner and family made at once, through both,
// all return one address, and the owner holds that one only. Each trial
// starts callersPerOwner calls for each of a few owners and both families
// together; as many calls of allocator.EnsureDualStack for each of a few
// other owners, one of each owner's calls being EnsureNext of one family
// instead, so that a pair and a lone address race; and as many calls of
// allocator.EnsureAllocated for an address of another owner's own (in the
// IPv6 lower band, which EnsureNext leaves alone), which must all succeed
// with it. open returns the two allocators' stores for one trial (the
// same one, or two clients of one etcd) and what closes them.
func EnsureNextAgrees(t *testing.T, trials, callersPerOwner int, open func(trial int) (st1, st2 store.Store, done func())) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const owners = 4
	fams := []ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6}
	for trial := range trials {
		st1, st2, done := open(trial)
		a1, a2 := allocatorPair(ctx, t, st1, st2, "pods", []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/120")})
		type key struct {
			owner ipaddress.ParentRef
			fam   ipaddress.Family
		}
		var (
			mu   sync.Mutex
			got  = map[key][]netip.Addr{}
			wg   sync.WaitGroup
			errs = make(chan error, owners*(len(fams)+2)*callersPerOwner)
		)
		// The address of each static owner's EnsureAllocated calls.
		static := func(o int) netip.Addr { return netip.AddrFrom16([16]byte{0: 0xfd, 15: byte(2 + o)}) }
		staticOwner := func(o int) ipaddress.ParentRef {
			return ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: fmt.Sprintf("trial%d-static%d", trial, o)}
		}
		start := make(chan struct{})
		for o := range owners {
			owner := ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: fmt.Sprintf("trial%d-pod%d", trial, o)}
			for _, f := range fams {
				for i := range callersPerOwner {
					a := []*allocator.Allocator{a1, a2}[i%2]
					wg.Go(func() {
						<-start
						rec, err := a.EnsureNext(ctx, f, owner)
						if err != nil {
							errs <- fmt.Errorf("EnsureNext(%v, %s): %w", f, owner.Name, err)
							return
						}
						mu.Lock()
						got[key{owner, f}] = append(got[key{owner, f}], rec.Addr)
						mu.Unlock()
					})
				}
			}
			dual := ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: fmt.Sprintf("trial%d-dual%d", trial, o)}
			for i := range callersPerOwner {
				a := []*allocator.Allocator{a1, a2}[i%2]
				wg.Go(func() {
					<-start
					var recs []ipaddress.IPAddress
					if i == callersPerOwner-1 {
						f := fams[o%2]
						rec, err := a.EnsureNext(ctx, f, dual)
						if err != nil {
							errs <- fmt.Errorf("EnsureNext(%v, %s): %w", f, dual.Name, err)
							return
						}
						recs = append(recs, rec)
					} else {
						v4, v6, err := a.EnsureDualStack(ctx, dual)
						if err != nil {
							errs <- fmt.Errorf("EnsureDualStack(%s): %w", dual.Name, err)
							return
						}
						recs = append(recs, v4, v6)
					}
					mu.Lock()
					for _, r := range recs {
						k := key{dual, ipaddress.FamilyOf(r.Addr)}
						got[k] = append(got[k], r.Addr)
					}
					mu.Unlock()
				})
			}
			for i := range callersPerOwner {
				a := []*allocator.Allocator{a1, a2}[i%2]
				wg.Go(func() {
					<-start
					rec, err := a.EnsureAllocated(ctx, static(o), staticOwner(o))
					if err != nil || rec.Addr != static(o) || rec.Parent != staticOwner(o) {
						errs <- fmt.Errorf("EnsureAllocated(%s, %s) = %s of %s, %w", static(o), staticOwner(o).Name, rec.Addr, rec.Parent, err)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		for k, addrs := range got {
			for _, a := range addrs[1:] {
				if a != addrs[0] {
					t.Errorf("trial %d: calls at once for %s, %v, returned %v: want one address", trial, k.owner.Name, k.fam, addrs)
					break
				}
			}
			held, err := a2.AddressesOf(ctx, k.owner)
			if err != nil {
				t.Fatal(err)
			}
			var ofFam []netip.Addr
			for _, r := range held {
				if ipaddress.FamilyOf(r.Addr) == k.fam {
					ofFam = append(ofFam, r.Addr)
				}
			}
			if len(ofFam) != 1 || ofFam[0] != addrs[0] {
				t.Errorf("trial %d: %s holds %v of %v after the calls returned %s: want that one only", trial, k.owner.Name, ofFam, k.fam, addrs[0])
			}
			// A setup retried later gets it too.
			if rec, err := a1.EnsureNext(ctx, k.fam, k.owner); err != nil || rec.Addr != addrs[0] {
				t.Errorf("trial %d: EnsureNext(%v, %s) again = %s, %v; want %s", trial, k.fam, k.owner.Name, rec.Addr, err, addrs[0])
			}
		}
		for o := range owners {
			held, err := a1.AddressesOf(ctx, staticOwner(o))
			if err != nil || len(held) != 1 || held[0].Addr != static(o) {
				t.Errorf("trial %d: %s holds %v, %v after its EnsureAllocated calls; want %s only", trial, staticOwner(o).Name, held, err, static(o))
			}
		}
		if err := a1.Close(); err != nil {
			t.Error(err)
		}
		if err := a2.Close(); err != nil {
			t.Error(err)
		}
		done()
		if t.Failed() {
			return
		}
	}
}
