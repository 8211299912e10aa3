package bolt

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

func openGroupTest(t *testing.T) (*Store, cidrset.CIDR) {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "group.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	c, err := s.CreateCIDR(context.Background(), cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// queuedTogether runs the writes concurrently, queued in the order given
// while the test holds the write mutex, so that one commit takes them all
// as one group. It returns each write's error, or the value it panicked
// with, by index.
func queuedTogether(t *testing.T, s *Store, writes ...func() error) (errs []error, panics []any) {
	t.Helper()
	errs, panics = make([]error, len(writes)), make([]any, len(writes))
	s.mu.Lock()
	var wg sync.WaitGroup
	for i, write := range writes {
		wg.Go(func() {
			defer func() { panics[i] = recover() }()
			errs[i] = write()
		})
		waitQueued(t, s, i+1)
	}
	s.mu.Unlock()
	wg.Wait()
	return errs, panics
}

// waitQueued waits until n writes are queued.
func waitQueued(t *testing.T, s *Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Microsecond) {
		s.qmu.Lock()
		got := len(s.queue)
		s.qmu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", got, n)
		}
	}
}

func commitsOf(s *Store) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.commits
}

type eventLog struct {
	mu  sync.Mutex
	evs []store.Event
}

func (l *eventLog) Reset(store.Snapshot) {}
func (l *eventLog) Apply(e store.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, e)
}

func create(s *Store, addr string, owner string, fences ...store.Fence) func() error {
	return func() error {
		rec := ipaddress.IPAddress{Addr: netip.MustParseAddr(addr), Parent: ipaddress.ParentRef{Resource: "services", Name: owner}}
		_, err := s.CreateAddresses(context.Background(), []ipaddress.IPAddress{rec}, fences...)
		return err
	}
}

// Writes made at the same time share one transaction and its fsync, each
// at its own revision, in the order they were queued.
func TestGroupCommitConcurrentWritesShareOneTransaction(t *testing.T) {
	ctx := context.Background()
	s, c := openGroupTest(t)
	var log eventLog
	if err := s.Watch(ctx, &log); err != nil {
		t.Fatal(err)
	}
	const n = 32
	writes := make([]func() error, n)
	for i := range writes {
		writes[i] = create(s, fmt.Sprintf("10.0.0.%d", i+1), fmt.Sprintf("svc-%d", i), store.Fence{CIDR: "c", Revision: c.Revision})
	}
	before := commitsOf(s)
	errs, _ := queuedTogether(t, s, writes...)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if got := commitsOf(s) - before; got != 1 {
		t.Errorf("%d writes made at once took %d transactions, want 1", n, got)
	}
	for i := range n {
		rec, err := s.GetAddress(ctx, netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i+1)))
		if err != nil {
			t.Fatal(err)
		}
		if want := c.Revision + 1 + int64(i); rec.Revision != want {
			t.Errorf("write %d at revision %d, want %d", i, rec.Revision, want)
		}
	}
	if rev, _ := s.Revision(ctx); rev != c.Revision+n {
		t.Errorf("store revision %d, want %d", rev, c.Revision+n)
	}
	if len(log.evs) != n {
		t.Fatalf("%d events, want %d", len(log.evs), n)
	}
	for i, e := range log.evs {
		if e.Revision != c.Revision+1+int64(i) || e.Address.Revision != e.Revision {
			t.Errorf("event %d: revision %d (record's %d), want %d", i, e.Revision, e.Address.Revision, c.Revision+1+int64(i))
		}
	}
}

// A write that fails in a group is judged against the writes queued before
// it, and leaves nothing behind; the writes around it keep the outcome
// and the revisions they would have one transaction each.
func TestGroupCommitFailedWriteSeesTheWritesBeforeIt(t *testing.T) {
	ctx := context.Background()
	s, c := openGroupTest(t)
	var log eventLog
	if err := s.Watch(ctx, &log); err != nil {
		t.Fatal(err)
	}
	fence := store.Fence{CIDR: "c", Revision: c.Revision}
	terminating := c.Clone()
	terminating.Terminating = true
	before := commitsOf(s)
	errs, _ := queuedTogether(t, s,
		create(s, "10.0.0.1", "a", fence),
		create(s, "10.0.0.2", "b", fence),
		create(s, "10.0.0.1", "c", fence), // taken by a, just before
		func() error { // runs twice: once in a group that fails after it
			_, err := s.UpdateCIDR(ctx, terminating)
			return err
		},
		create(s, "10.0.0.3", "d", fence), // fenced on the revision just changed
		create(s, "10.0.0.4", "e"),
	)
	want := []error{nil, nil, store.ErrExists, nil, store.ErrFenced, nil}
	for i, err := range errs {
		if (want[i] == nil) != (err == nil) || want[i] != nil && !errors.Is(err, want[i]) {
			t.Errorf("write %d: %v, want %v", i, err, want[i])
		}
	}
	// a and b; then the update; then e: the failures cost no fsync.
	if got := commitsOf(s) - before; got != 3 {
		t.Errorf("%d transactions, want 3", got)
	}
	held := map[string]string{}
	all, err := s.ListAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range all {
		held[r.Addr.String()] = fmt.Sprintf("%s@%d", r.Parent.Name, r.Revision)
	}
	r := c.Revision
	wantHeld := map[string]string{
		"10.0.0.1": fmt.Sprintf("a@%d", r+1),
		"10.0.0.2": fmt.Sprintf("b@%d", r+2),
		"10.0.0.4": fmt.Sprintf("e@%d", r+4),
	}
	if fmt.Sprint(held) != fmt.Sprint(wantHeld) {
		t.Errorf("held %v, want %v", held, wantHeld)
	}
	got, err := s.GetCIDR(ctx, "c")
	if err != nil || !got.Terminating || got.Revision != r+3 {
		t.Errorf("CIDR %+v, %v: want Terminating at revision %d", got, err, r+3)
	}
	var revs []int64
	for _, e := range log.evs {
		revs = append(revs, e.Revision)
	}
	if fmt.Sprint(revs) != fmt.Sprint([]int64{r + 1, r + 2, r + 3, r + 4}) {
		t.Errorf("events at revisions %v, want %d–%d", revs, r+1, r+4)
	}
}

type panicky struct{ on netip.Addr }

func (panicky) Reset(store.Snapshot) {}
func (p panicky) Apply(e store.Event) {
	if e.Address.Addr == p.on {
		panic("watcher fails")
	}
}

// A watcher that panics while a group is delivered reaches the goroutine
// that committed it; no other write of the group waits for ever or is
// told it was made when it was not, and the store goes on.
func TestGroupCommitWatcherPanicLeavesNoWriteWaiting(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s, _ := openGroupTest(t)
	if err := s.Watch(ctx, panicky{on: netip.MustParseAddr("10.0.0.1")}); err != nil {
		t.Fatal(err)
	}
	errs, panics := queuedTogether(t, s,
		create(s, "10.0.0.1", "a"),
		create(s, "10.0.0.1", "b"), // fails: a's is committed first, delivered, and panics
		create(s, "10.0.0.2", "c"), // not run
	)
	if panics[0] == nil || errs[0] != nil {
		t.Errorf("committing write: %v, panic %v; want the watcher's panic", errs[0], panics[0])
	}
	for i := 1; i < 3; i++ {
		if !errors.Is(errs[i], errNotRun) || panics[i] != nil {
			t.Errorf("write %d: %v, panic %v; want %v", i, errs[i], panics[i], errNotRun)
		}
	}
	if _, err := s.GetAddress(ctx, netip.MustParseAddr("10.0.0.2")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("write reported not made is there: %v", err)
	}
	cancel() // the panicking watcher goes
	if err := create(s, "10.0.0.3", "d")(); err != nil {
		t.Errorf("write after the panic: %v", err)
	}
}

// Writes queued when the store is closed either are made before it closes
// or fail with ErrClosed; none waits for ever, and the file holds exactly
// those reported made.
func TestGroupCommitQueuedWritesMeetClose(t *testing.T) {
	for round := range 20 {
		path := filepath.Join(t.TempDir(), "close.db")
		s, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if _, err := s.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err != nil {
			t.Fatal(err)
		}
		const n = 8
		errs := make([]error, n)
		closed := make(chan error, 1)
		closeStore := func() { go func() { closed <- s.Close() }() }
		s.mu.Lock()
		if round%2 == 0 {
			// Close waits for the mutex before the writes do, most times.
			closeStore()
			time.Sleep(time.Millisecond)
		}
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { errs[i] = create(s, fmt.Sprintf("10.0.0.%d", i+1), "x")() })
			waitQueued(t, s, i+1)
		}
		if round%2 == 1 {
			closeStore()
		}
		s.mu.Unlock() // the committing write and Close race for the mutex
		wg.Wait()
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		made := 0
		for i, err := range errs {
			switch {
			case err == nil:
				made++
			case !errors.Is(err, store.ErrClosed):
				t.Fatalf("round %d: write %d: %v, want nil or ErrClosed", round, i, err)
			}
		}
		s, err = Open(path)
		if err != nil {
			t.Fatal(err)
		}
		all, err := s.ListAddresses(ctx)
		_ = s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != made {
			t.Fatalf("round %d: %d writes reported made, the file holds %d", round, made, len(all))
		}
		for _, r := range all {
			if i := int(r.Addr.As4()[3]) - 1; errs[i] != nil {
				t.Fatalf("round %d: %s is stored, its write failed: %v", round, r.Addr, errs[i])
			}
		}
	}
}
