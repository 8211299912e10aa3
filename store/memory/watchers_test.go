package memory

import (
	"context"
	"runtime"
	"testing"

	"github.com/netipam/netipam/store"
)

type nopWatcher struct{ resets int }

func (w *nopWatcher) Reset(store.Snapshot) { w.resets++ }
func (w *nopWatcher) Apply(store.Event)    {}

// othersWatch follows every change of the watchers (its common case is
// cached in soleWords): a write by the sole watcher builds nothing to
// tell, and a write by anyone else, or once another registers, does.
func TestOthersWatchFollowsEveryChangeOfTheWatchers(t *testing.T) {
	s := New()
	a, b := &nopWatcher{}, &nopWatcher{}
	ctxA, cancelA := context.WithCancel(context.Background())
	ctxB, cancelB := context.WithCancel(context.Background())
	defer cancelA()
	defer cancelB()
	check := func(step string, wantA, wantB, wantNil bool) {
		t.Helper()
		s.mu.Lock()
		defer s.mu.Unlock()
		if got := s.othersWatch(a); got != wantA {
			t.Errorf("%s: othersWatch(a) = %v, want %v", step, got, wantA)
		}
		if got := s.othersWatch(b); got != wantB {
			t.Errorf("%s: othersWatch(b) = %v, want %v", step, got, wantB)
		}
		if got := s.othersWatch(nil); got != wantNil {
			t.Errorf("%s: othersWatch(nil) = %v, want %v", step, got, wantNil)
		}
	}
	// waitFor waits for a watch's removal, which runs in its own goroutine
	// once its context ends.
	waitFor := func(n int) {
		for {
			s.mu.Lock()
			left := len(s.watchers)
			s.mu.Unlock()
			if left == n {
				return
			}
			runtime.Gosched()
		}
	}
	check("no watchers", false, false, false)
	if err := s.Watch(ctxA, a); err != nil {
		t.Fatal(err)
	}
	check("a alone", false, true, true)
	if err := s.Watch(ctxB, b); err != nil {
		t.Fatal(err)
	}
	check("a and b", true, true, true)
	cancelB()
	waitFor(1)
	check("a left alone", false, true, true)
	ctxB2, cancelB2 := context.WithCancel(context.Background())
	defer cancelB2()
	if err := s.Watch(ctxB2, b); err != nil {
		t.Fatal(err)
	}
	check("b back", true, true, true)
	cancelB2()
	waitFor(1)
	check("a left alone again", false, true, true)
	cancelA()
	waitFor(0)
	check("all gone", false, false, false)
	if err := s.Watch(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	check("b alone", true, false, true)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	check("closed", false, false, false)
}
