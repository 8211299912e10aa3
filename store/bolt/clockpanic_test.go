package bolt_test

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
)

// clockFailure is what the embedder's clock panics with.
type clockFailure struct{}

// panicOf runs fn and returns what it panicked with, and its error.
func panicOf(fn func() error) (p any, err error) {
	defer func() { p = recover() }()
	return nil, fn()
}

// A panic of the embedder's clock (WithClock) is the embedder's: the write
// that called it panics with it, in the caller's goroutine, rather than
// return a *CorruptError calling a sound file damaged. Writes queued with
// it at the time are not failed for it, and the store goes on.
func TestAPanickingClockPanicsAndDamagesNothing(t *testing.T) {
	ctx := ctxT(t)
	path := tempPath(t)
	var failing atomic.Bool
	good := fakeClock()
	clock := func() time.Time {
		if failing.Load() {
			panic(clockFailure{})
		}
		return good()
	}
	st := mustOpen(t, path, bolt.WithClock(clock))
	if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	held := create(t, st, "10.0.0.1", svc("default", "held"))

	failing.Store(true)
	writes := map[string]func() error{
		"CreateCIDR": func() error {
			_, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "b", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}})
			return err
		},
		"CreateAddresses": func() error {
			_, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.2"), Parent: svc("default", "x")}})
			return err
		},
		"ReplaceAddressAt": func() error {
			_, err := st.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: held.Addr, Parent: svc("default", "other")}, held.Revision)
			return err
		},
	}
	for name, write := range writes {
		// Several at once, so that some are queued behind another's
		// commit (group commit) when the clock panics.
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				p, err := panicOf(write)
				if _, ok := p.(clockFailure); !ok {
					t.Errorf("%s with a panicking clock: panic %v, error %v; want the clock's panic", name, p, err)
				}
				if errors.Is(err, store.ErrCorrupt) {
					t.Errorf("%s: %v: the clock's panic reported as a damaged file", name, err)
				}
			})
		}
		wg.Wait()
	}
	if rev, err := st.Revision(ctx); err != nil || rev != held.Revision {
		t.Errorf("revision %d (%v) after the failed writes, want %d: one of them wrote", rev, err, held.Revision)
	}

	// The file is sound, and the same store writes once the clock works.
	failing.Store(false)
	for name, write := range writes {
		if err := write(); err != nil {
			t.Errorf("%s once the clock works: %v", name, err)
		}
	}
	if err := st.Check(ctx); err != nil {
		t.Errorf("Check: %v", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	again := mustOpen(t, path)
	if err := again.Check(ctx); err != nil {
		t.Errorf("Check after reopening: %v", err)
	}
	if recs, err := again.ListAddresses(ctx); err != nil || len(recs) != 2 {
		t.Errorf("ListAddresses after reopening = %v, %v; want 2 records", recs, err)
	}
}
