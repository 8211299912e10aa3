package allocator_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// heldStore is a memory store seen as a remote one (its Locked methods
// hidden) whose watch can be held: events are queued while hold is set
// and delivered one by one by step. Its UpdateCIDR can also play another
// writer (another allocator's reconciler) that removes the CIDR right
// after it was marked Terminating, before the caller reads it again.
type heldStore struct {
	store.Store
	mu        sync.Mutex
	hold      bool
	q         []store.Event
	w         store.Watcher
	removeNow bool
}

type heldWatcher struct{ s *heldStore }

func (h heldWatcher) Reset(sn store.Snapshot) { h.s.w.Reset(sn) }
func (h heldWatcher) Apply(e store.Event) {
	h.s.mu.Lock()
	if h.s.hold {
		h.s.q = append(h.s.q, e)
		h.s.mu.Unlock()
		return
	}
	h.s.mu.Unlock()
	h.s.w.Apply(e)
}

func (s *heldStore) Watch(ctx context.Context, w store.Watcher) error {
	s.w = w
	return s.Store.Watch(ctx, heldWatcher{s})
}

// step delivers the oldest held event.
func (s *heldStore) step() store.Event {
	s.mu.Lock()
	e := s.q[0]
	s.q = s.q[1:]
	s.mu.Unlock()
	s.w.Apply(e)
	return e
}

// release delivers every held event, in order, and stops holding.
func (s *heldStore) release() {
	// Under mu, so that no event overtakes the held ones.
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.q {
		s.w.Apply(e)
	}
	s.q, s.hold = nil, false
}

func (s *heldStore) UpdateCIDR(ctx context.Context, c cidrset.CIDR) (cidrset.CIDR, error) {
	got, err := s.Store.UpdateCIDR(ctx, c)
	if err == nil && s.removeNow && got.Terminating {
		// Another allocator's reconciler, whose watch is prompt, removes
		// it at once.
		if derr := s.Store.DeleteCIDR(ctx, got.Name, got.Revision); derr != nil {
			return got, derr
		}
	}
	return got, err
}

func names(cs []cidrset.CIDR) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// A CIDR DeleteCIDR removed stays gone when the call returns, even when
// another writer removed it first and the watch is behind: the watch's
// late put of the Terminating mark, and of any older copy, does not bring
// it back (SPEC §4: removed once the finalizer is released).
func TestAWatchBehindDoesNotBringBackACIDRTheAllocatorRemoved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hs := &heldStore{Store: memory.New()}
	a, err := allocator.New(ctx, hs, allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "x", netip.MustParsePrefix("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	hs.mu.Lock()
	hs.hold, hs.removeNow = true, true
	hs.mu.Unlock()

	if err := a.DeleteCIDR(ctx, "x"); err != nil {
		t.Fatalf("DeleteCIDR: %v", err)
	}
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "s"}
	gone := func(when string) {
		t.Helper()
		if got := names(a.CIDRs()); len(got) != 0 {
			t.Errorf("%s: CIDRs %v, want none", when, got)
		}
		if _, err := a.AllocateNext(ctx, ipaddress.IPv4, owner); !errors.Is(err, allocator.ErrMismatch) {
			t.Errorf("%s: AllocateNext: %v, want ErrMismatch", when, err)
		}
	}
	gone("right after DeleteCIDR")
	// The watch delivers what it held, in order: the mark, then the
	// deletion.
	if e := hs.step(); e.Kind != store.CIDRPut || !e.CIDR.Terminating {
		t.Fatalf("first held event: %+v, want the Terminating mark", e)
	}
	gone("after the watch delivered the mark")
	if e := hs.step(); e.Kind != store.CIDRDeleted {
		t.Fatalf("second held event: %+v, want the deletion", e)
	}
	gone("after the watch delivered the deletion")

	// A CIDR of that name created again is served.
	hs.mu.Lock()
	hs.hold, hs.removeNow = false, false
	hs.mu.Unlock()
	if _, err := a.CreateCIDR(ctx, "x", netip.MustParsePrefix("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AllocateNext(ctx, ipaddress.IPv4, owner); err != nil {
		t.Errorf("AllocateNext in x created again: %v", err)
	}
}
