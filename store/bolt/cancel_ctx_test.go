package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

func nthOwner(i int) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "churn", Name: fmt.Sprintf("o-%d", i)}
}

// Allocations whose contexts end at random points, then Close in flight,
// over a bbolt file: every owner told its allocation failed holds nothing,
// every one told it succeeded holds what it was told (or nothing, if
// released since), and a new allocator over the file counts what it holds.
func TestACanceledAllocationOverBoltLeavesNoUntoldRecord(t *testing.T) {
	ctx := context.Background()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ipam.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateCIDR(ctx, "a", netip.MustParsePrefix("10.0.0.0/26"), netip.MustParsePrefix("fd00::/122")); err != nil {
		t.Fatal(err)
	}
	type told struct {
		addrs []netip.Addr
		ok    bool
	}
	var mu sync.Mutex
	results := map[int]told{}
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			for i := 0; ; i++ {
				id := g*100000 + i
				var cctx context.Context
				var cancel context.CancelFunc
				if i%3 == 0 {
					cctx, cancel = context.WithCancel(ctx)
					time.AfterFunc(time.Duration(rand.IntN(500))*time.Microsecond, cancel)
				} else {
					cctx, cancel = context.WithTimeout(ctx, time.Duration(rand.IntN(2000))*time.Microsecond)
				}
				var got []netip.Addr
				var err error
				switch i % 4 {
				case 0:
					var r ipaddress.IPAddress
					r, err = a.AllocateNext(cctx, ipaddress.IPv4, nthOwner(id))
					got = []netip.Addr{r.Addr}
				case 1:
					var r4, r6 ipaddress.IPAddress
					r4, r6, err = a.AllocateDualStack(cctx, nthOwner(id), netip.Addr{}, netip.Addr{})
					got = []netip.Addr{r4.Addr, r6.Addr}
				case 2:
					var r ipaddress.IPAddress
					r, err = a.Allocate(cctx, netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + rand.IntN(62))}), nthOwner(id))
					got = []netip.Addr{r.Addr}
				case 3:
					err = a.Release(cctx, netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + rand.IntN(62))}))
					cancel()
					if errors.Is(err, allocator.ErrClosed) {
						return
					}
					continue
				}
				cancel()
				if errors.Is(err, store.ErrOutcomeUnknown) {
					t.Errorf("%v from a store that never loses an answer", err)
				}
				if errors.Is(err, allocator.ErrClosed) {
					return
				}
				mu.Lock()
				results[id] = told{addrs: got, ok: err == nil}
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("calls in flight at Close did not end")
	}
	oks := 0
	for id, r := range results {
		recs, err := st.AddressesOf(ctx, nthOwner(id))
		if err != nil {
			t.Fatal(err)
		}
		if r.ok {
			oks++
		}
		for _, rec := range recs {
			if !r.ok || !slices.Contains(r.addrs, rec.Addr) {
				t.Errorf("owner %d holds %s; it was told %v (ok %v)", id, rec.Addr, r.addrs, r.ok)
			}
		}
	}
	if oks == 0 {
		t.Fatal("no allocation succeeded: the test exercised nothing")
	}
	b, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	all, err := st.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range all {
		if r.Addr.Is4() {
			n++
		}
	}
	u, err := b.Usage("a")
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Prefixes[0].Used.String(); got != fmt.Sprint(n) {
		t.Errorf("a new allocator counts %s used, the file holds %d", got, n)
	}
	t.Logf("%d calls, %d succeeded", len(results), oks)
}
