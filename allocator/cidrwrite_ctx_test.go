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

// A CIDR call whose write the store took has succeeded, even when its
// context ends while it waits for a lagging watch to show the write: a
// caller told "failed" (an error other than store.ErrOutcomeUnknown)
// takes the store as it was. CreateCIDR, UpdateCIDR and EnsureDefault
// then return nil; DeleteCIDR, whose mark stands but whose removal was not
// decided, a *DeletionPendingError, and the allocator removes the CIDR
// in the background once the watch catches up.
func TestACIDRCallWhoseWriteStandsSucceedsWhenItsContextEnds(t *testing.T) {
	calls := []struct {
		name string
		call func(ctx context.Context, a *Allocator) error
		want string // the CIDRs after, as dumpCIDRs gives them
	}{
		{"CreateCIDR", func(ctx context.Context, a *Allocator) error {
			_, err := a.CreateCIDR(ctx, "new", netip.MustParsePrefix("10.1.0.0/24"))
			return err
		}, "[new[10.1.0.0/24] terminating=false x[10.0.0.0/24] terminating=false]"},
		{"UpdateCIDR", func(ctx context.Context, a *Allocator) error {
			_, err := a.UpdateCIDR(ctx, "x", netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/120"))
			return err
		}, "[x[10.0.0.0/24 fd00::/120] terminating=false]"},
		{"EnsureDefault", func(ctx context.Context, a *Allocator) error {
			_, err := a.EnsureDefault(ctx, netip.MustParsePrefix("10.96.0.0/28"))
			return err
		}, "[kubernetes[10.96.0.0/28] terminating=false x[10.0.0.0/24] terminating=false]"},
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
			st.pause()
			cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			err := c.call(cctx, a)
			cancel()
			st.resume()
			if got := fmt.Sprint(dumpCIDRs(t, ctx, mem)); err != nil || got != c.want {
				t.Errorf("%s with its ctx ended while the watch lagged: %v; store %s, want nil and %s", c.name, err, got, c.want)
			}
		})
	}
	t.Run("DeleteCIDR", func(t *testing.T) {
		ctx := context.Background()
		mem := memory.New()
		st := &pausedStore{Store: mem}
		a := newTestAllocator(t, st)
		if _, err := a.CreateCIDR(ctx, "x", netip.MustParsePrefix("10.0.0.0/24")); err != nil {
			t.Fatal(err)
		}
		st.pause()
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		err := a.DeleteCIDR(cctx, "x")
		cancel()
		var pending *DeletionPendingError
		if !errors.As(err, &pending) || pending.CIDR != "x" || !errors.Is(err, ErrTerminating) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("DeleteCIDR with its ctx ended while the watch lagged: %v, want a *DeletionPendingError for x matching ErrTerminating and the ctx's error", err)
		}
		if got := fmt.Sprint(dumpCIDRs(t, ctx, mem)); got != "[x[10.0.0.0/24] terminating=true]" {
			t.Fatalf("store after the pending deletion: %s, want x marked Terminating", got)
		}
		// Nothing holds x: once the watch shows the mark, the background
		// reconciler removes it.
		st.resume()
		deadline := time.Now().Add(10 * time.Second)
		for fmt.Sprint(dumpCIDRs(t, ctx, mem)) != "[]" {
			if time.Now().After(deadline) {
				t.Fatalf("x still in the store 10 s after the watch caught up: %v", dumpCIDRs(t, ctx, mem))
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
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
