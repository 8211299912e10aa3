package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// pausedStore is a memory store seen as a remote one whose watch delivers
// nothing while paused, as an etcd watch that lags: events wait, in order,
// for resume.
type pausedStore struct {
	store.Store
	mu     sync.Mutex
	paused bool
	q      []store.Event
	w      store.Watcher
}

type pausedWatcher struct{ s *pausedStore }

func (p pausedWatcher) Reset(sn store.Snapshot) { p.s.w.Reset(sn) }

func (p pausedWatcher) Apply(e store.Event) {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	if p.s.paused || len(p.s.q) > 0 {
		p.s.q = append(p.s.q, e)
		return
	}
	p.s.w.Apply(e)
}

func (s *pausedStore) Watch(ctx context.Context, w store.Watcher) error {
	s.w = w
	return s.Store.Watch(ctx, pausedWatcher{s})
}

func (s *pausedStore) pause() {
	s.mu.Lock()
	s.paused = true
	s.mu.Unlock()
}

func (s *pausedStore) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = false
	for _, e := range s.q {
		s.w.Apply(e)
	}
	s.q = nil
}

// A CIDR call that fails with an error other than store.ErrOutcomeUnknown
// has written nothing: a caller told its call failed may take the store
// as it was. Here the call's context ends while it waits for a lagging
// watch to show its write.
func TestACIDRCallThatFailsWithItsContextWritesNothing(t *testing.T) {
	calls := []struct {
		name string
		call func(ctx context.Context, a *Allocator) error
	}{
		{"CreateCIDR", func(ctx context.Context, a *Allocator) error {
			_, err := a.CreateCIDR(ctx, "new", netip.MustParsePrefix("10.1.0.0/24"))
			return err
		}},
		{"UpdateCIDR", func(ctx context.Context, a *Allocator) error {
			_, err := a.UpdateCIDR(ctx, "x", netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/120"))
			return err
		}},
		{"DeleteCIDR", func(ctx context.Context, a *Allocator) error { return a.DeleteCIDR(ctx, "x") }},
		{"EnsureDefault", func(ctx context.Context, a *Allocator) error {
			_, err := a.EnsureDefault(ctx, netip.MustParsePrefix("10.96.0.0/28"))
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			mem := memory.New()
			st := &pausedStore{Store: mem}
			a := newTestAllocator(t, st)
			if _, err := a.CreateCIDR(ctx, "x", netip.MustParsePrefix("10.0.0.0/24")); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Allocate(ctx, netip.MustParseAddr("10.0.0.5"), auditOwner(1)); err != nil {
				t.Fatal(err)
			}
			before := dumpCIDRs(t, ctx, mem)
			st.pause()
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err := c.call(cctx, a)
			cancel()
			st.resume()
			after := dumpCIDRs(t, ctx, mem)
			if err != nil && !errors.Is(err, store.ErrOutcomeUnknown) && !slices.Equal(before, after) {
				t.Errorf("%s failed with %v, yet the store went from %v to %v", c.name, err, before, after)
			}
		})
	}
}

// dumpCIDRs lists the store's CIDRs, as name, prefixes and state, through
// a watch's first snapshot.
func dumpCIDRs(t *testing.T, ctx context.Context, st store.Store) []string {
	t.Helper()
	var snap store.Snapshot
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := st.Watch(wctx, resetWatcher{&snap}); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range snap.CIDRs {
		out = append(out, fmt.Sprintf("%s%v terminating=%v", c.Name, c.Prefixes, c.Terminating))
	}
	slices.Sort(out)
	return out
}
