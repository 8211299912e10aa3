package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// unreachable is a store whose CIDR reads fail while down is set, as
// reads do during an etcd leader election. It hides memory's Locked
// methods, so the allocator takes the path of a remote store.
type unreachable struct {
	store.Store
	down   atomic.Bool
	failed atomic.Int64
}

func (u *unreachable) GetCIDR(ctx context.Context, name string) (cidrset.CIDR, error) {
	if u.down.Load() {
		u.failed.Add(1)
		return cidrset.CIDR{}, errors.New("etcdserver: leader changed")
	}
	return u.Store.GetCIDR(ctx, name)
}

// waitUntil polls cond; the deadline only bounds a test that fails.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// SPEC §4: a Terminating CIDR is removed once its addresses are released.
// If the store fails the check that follows the last release, nothing else
// may ever happen to the CIDR: the check must be retried on its own.
func TestABlockedDeletionIsRetriedAfterTheStoreFailedItsCheck(t *testing.T) {
	ctx := context.Background()
	mem := memory.New()
	st := &unreachable{Store: mem}
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "x", pfx("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	mustStatic(t, a, "10.0.0.5", "a")
	if err := a.DeleteCIDR(ctx, "x"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR(x) holding 10.0.0.5: %v, want blocked", err)
	}
	st.down.Store(true)
	if err := a.Release(ctx, ip("10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	// The check after the release and the reconciler's own have failed.
	waitUntil(t, "the store failed both checks", func() bool { return st.failed.Load() >= 2 })
	st.down.Store(false)
	waitUntil(t, "x is removed", func() bool {
		_, err := mem.GetCIDR(ctx, "x")
		return errors.Is(err, store.ErrNotFound)
	})
}

// Close ends what waits for the index, which stops following the store,
// and refuses later calls with ErrClosed rather than let them hang.
func TestCloseEndsWaitsAndRefusesLaterCalls(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"x=10.0.0.0/24"})
	mustStatic(t, a, "10.0.0.5", "a")
	waited := make(chan error, 1)
	go func() { waited <- a.WaitRevision(ctx, 1<<62) }()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, allocator.ErrClosed) {
			t.Errorf("a wait in flight at Close: %v, want ErrClosed", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a wait in flight at Close did not end")
	}
	calls := contextCalls(ctx, a, svc("late"))
	for name, call := range calls {
		if err := call(); !errors.Is(err, allocator.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if got, err := a.Get(ctx, ip("10.0.0.5")); err == nil {
		t.Errorf("Get after Close returned %+v", got)
	}
	if _, err := a.GetCIDR("x"); err != nil {
		t.Errorf("GetCIDR after Close: %v, want the index's copy", err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// contextCalls are the calls of a that take a context, each with input it
// would serve if open (x=10.0.0.0/24 holding 10.0.0.5 for services/a),
// by name: a new one is added here, for every test of them.
func contextCalls(ctx context.Context, a *allocator.Allocator, owner ipaddress.ParentRef) map[string]func() error {
	return map[string]func() error{
		"AllocateNext": func() error { _, err := a.AllocateNext(ctx, ipaddress.IPv4, owner); return err },
		"Allocate":     func() error { _, err := a.Allocate(ctx, ip("10.0.0.6"), owner); return err },
		"AllocateDualStack": func() error {
			_, _, err := a.AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{})
			return err
		},
		"Release":      func() error { return a.Release(ctx, ip("10.0.0.5")) },
		"ReleaseAt":    func() error { return a.ReleaseAt(ctx, ip("10.0.0.5"), 1) },
		"ReleaseOwner": func() error { _, err := a.ReleaseOwner(ctx, svc("a")); return err },
		"ReleaseRecords": func() error {
			return a.ReleaseRecords(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.5"), Parent: svc("a"), Revision: 1}})[0]
		},
		"ReplaceRecords": func() error {
			return a.ReplaceRecords(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.5"), Parent: svc("a"), Revision: 1}}, []ipaddress.ParentRef{owner})[0]
		},
		"RestoreRecords": func() error {
			return a.RestoreRecords(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.7"), Parent: owner}})[0]
		},
		"Get":         func() error { _, err := a.Get(ctx, ip("10.0.0.5")); return err },
		"AddressesOf": func() error { _, err := a.AddressesOf(ctx, svc("a")); return err },
		"CreateCIDR":  func() error { _, err := a.CreateCIDR(ctx, "y", pfx("10.1.0.0/24")); return err },
		"UpdateCIDR": func() error {
			_, err := a.UpdateCIDR(ctx, "x", pfx("10.0.0.0/24"), pfx("fd00::/64"))
			return err
		},
		"DeleteCIDR": func() error { return a.DeleteCIDR(ctx, "x") },
		"Restore":    func() error { _, err := a.Restore(ctx, ip("10.0.0.7"), owner); return err },
		// A revision an open index has reached.
		"WaitRevision":  func() error { return a.WaitRevision(ctx, 1) },
		"EnsureDefault": func() error { _, err := a.EnsureDefault(ctx, pfx("10.96.0.0/24")); return err },
		"DryRun().AllocateNext": func() error {
			_, err := a.DryRun().AllocateNext(ctx, ipaddress.IPv4, owner)
			return err
		},
		"DryRun().Allocate":   func() error { return a.DryRun().Allocate(ctx, ip("10.0.0.6"), owner) },
		"DryRun().CreateCIDR": func() error { return a.DryRun().CreateCIDR(ctx, "y", pfx("10.1.0.0/24")) },
		"DryRun().DeleteCIDR": func() error { _, err := a.DryRun().DeleteCIDR(ctx, "x"); return err },
		"DryRun().AllocateDualStack": func() error {
			_, _, err := a.DryRun().AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{})
			return err
		},
		"DryRun().EnsureDualStack": func() error {
			_, _, err := a.DryRun().EnsureDualStack(ctx, owner)
			return err
		},
	}
}

// afterCIDRUpdate is a store on which another writer acts right after the
// next successful UpdateCIDR.
type afterCIDRUpdate struct {
	store.Store
	then func(cidrset.CIDR)
}

func (s *afterCIDRUpdate) UpdateCIDR(ctx context.Context, c cidrset.CIDR) (cidrset.CIDR, error) {
	got, err := s.Store.UpdateCIDR(ctx, c)
	if f := s.then; f != nil && err == nil {
		s.then = nil
		f(got)
	}
	return got, err
}

// DeleteCIDR marks a CIDR Terminating, then decides. If meanwhile the
// marked CIDR is removed and another of the same name created, live, the
// deletion asked for is done: not "Terminating, blocked" by no address.
func TestDeleteCIDRRacedByARecreatedCIDRIsDone(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	shared := &afterCIDRUpdate{Store: st}
	a, err := allocator.New(ctx, shared)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "a", netip.MustParsePrefix("10.0.0.0/24")); err != nil {
		t.Fatal(err)
	}
	shared.then = func(marked cidrset.CIDR) {
		// The allocator's own reconciler, told of the mark by its watch,
		// may have removed the empty CIDR already (seen once, in a -race
		// run of every module): either way, it is gone.
		if err := st.DeleteCIDR(ctx, "a", marked.Revision); err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Error(err)
		}
		if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.1.0/24")}}); err != nil {
			t.Error(err)
		}
	}
	if err := a.DeleteCIDR(ctx, "a"); err != nil {
		t.Fatalf("DeleteCIDR(a), re-created live meanwhile: %v, want nil", err)
	}
	if c, err := st.GetCIDR(ctx, "a"); err != nil || c.Terminating {
		t.Fatalf("the new a: %+v, %v; want it live", c, err)
	}
}

// readOnlyStore refuses every CIDR removal, as a bolt file opened
// read-only does, and counts the tries.
type readOnlyStore struct {
	store.Store
	deletes atomic.Int32
}

func (s *readOnlyStore) DeleteCIDR(context.Context, string, int64, ...store.Fence) error {
	s.deletes.Add(1)
	return fmt.Errorf("bolt: ipam.db: %w", store.ErrReadOnly)
}

// An allocator over a read-only store (ipamctl's reads) finds a Terminating
// CIDR nothing holds, left by a writer that stopped: it tries the removal,
// which no retry can make, once, rather than every 10 s until closed.
func TestARemovalAReadOnlyStoreRefusesIsNotRetried(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	c, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "old", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	if err != nil {
		t.Fatal(err)
	}
	c.Terminating = true
	if _, err := st.UpdateCIDR(ctx, c); err != nil {
		t.Fatal(err)
	}
	ro := &readOnlyStore{Store: st}
	a, err := allocator.New(ctx, ro)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// Retried, the backoff (100 ms, doubling) would try four times here.
	time.Sleep(time.Second)
	if n := ro.deletes.Load(); n != 1 {
		t.Fatalf("the removal was tried %d times, want once", n)
	}
	if got, err := a.GetCIDR("old"); err != nil || !got.Terminating {
		t.Fatalf("old: %+v, %v; want it still there, Terminating", got, err)
	}
}

// SPEC §4: a Terminating CIDR is removed when no address would be
// orphaned. One left Terminating with nothing in it (its removal decided
// by a process that stopped before writing it) is removed by the next
// allocator to start, before New returns, so that a short-lived one
// (ipamctl) does not exit first; one an address still holds stays. Over
// a store.Locked store and over one without it.
func TestSpec4NewRemovesATerminatingCIDRNothingHolds(t *testing.T) {
	for _, remote := range []bool{false, true} {
		t.Run(fmt.Sprintf("remote=%v", remote), func(t *testing.T) {
			ctx := context.Background()
			mem := memory.New()
			for _, c := range []cidrset.CIDR{
				{Name: "empty", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}},
				{Name: "held", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/24")}},
			} {
				c, err := mem.CreateCIDR(ctx, c)
				if err != nil {
					t.Fatal(err)
				}
				if c.Name == "held" {
					if _, err := mem.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.1.0.7"), Parent: svc("x")}}); err != nil {
						t.Fatal(err)
					}
				}
				c.Terminating = true
				if _, err := mem.UpdateCIDR(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			var st store.Store = mem
			if remote {
				st = unlockedStore{mem}
			}
			a, err := allocator.New(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if c, err := mem.GetCIDR(ctx, "empty"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("the Terminating CIDR nothing holds, once New returned: %+v, %v; want it removed", c, err)
			}
			if c, err := mem.GetCIDR(ctx, "held"); err != nil || !c.Terminating {
				t.Errorf("the Terminating CIDR an address holds: %+v, %v; want it kept, Terminating", c, err)
			}
		})
	}
}

// hookedDelete is a store whose first DeleteCIDR of the CIDR named name
// runs then before it is carried out, as if every write of then had come
// between the removal's decision and its write. Later callers wait for
// then. It hides a memory store's store.Locked methods (the allocator
// then takes the path of a remote store) unless they are put back beside
// it (lockedHooked).
type hookedDelete struct {
	store.Store
	name string
	mu   sync.Mutex
	then func()
}

func (s *hookedDelete) DeleteCIDR(ctx context.Context, name string, rev int64, fences ...store.Fence) error {
	if name == s.name {
		s.mu.Lock()
		if f := s.then; f != nil {
			s.then = nil
			f()
		}
		s.mu.Unlock()
	}
	return s.Store.DeleteCIDR(ctx, name, rev, fences...)
}

// lockedHooked is hookedDelete with the memory store's store.Locked
// methods: the allocator takes the embedded path.
type lockedHooked struct {
	*hookedDelete
	lockedOnly
}

// lockedOnly is store.Locked without store.Store, whose methods
// hookedDelete has.
type lockedOnly interface {
	Mutex() *sync.Mutex
	CreateAddressesLocked(recs []ipaddress.IPAddress, fences []store.Fence) ([]ipaddress.IPAddress, error)
	CreateAddressLocked(addr netip.Addr, owner *ipaddress.ValidParentRef, fence store.Fence, self store.Watcher) (int64, time.Time, error)
	DeleteAddressLocked(addr netip.Addr, self store.Watcher) (int64, error)
}

// Deletion safety, beyond the reference: a Terminating CIDR goes only when
// every address inside it is covered by a live CIDR. Its removal was
// decided while it held no address; before the removal is written, another
// CIDR is created over it, serves an address inside it, and is marked
// Terminating too. The allocation touched the first CIDR (store.Fence's
// Touch), so the stale removal fails its fence, and the decision made
// again keeps the CIDR until the address is released: no address is left
// covered only by Terminating CIDRs. Over a store.Locked store and over
// one without it.
func TestAnAddressInsideATerminatingCIDRKeepsItUntilReleased(t *testing.T) {
	for _, locked := range []bool{true, false} {
		t.Run(fmt.Sprint("locked=", locked), func(t *testing.T) { anAddressInsideATerminatingCIDR(t, locked) })
	}
}

func anAddressInsideATerminatingCIDR(t *testing.T, locked bool) {
	ctx := context.Background()
	mem := memory.New()
	st := &hookedDelete{Store: mem, name: "inner"}
	var over store.Store = st
	if locked {
		over = lockedHooked{st, mem}
	}
	a, err := allocator.New(ctx, over)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "inner", netip.MustParsePrefix("10.0.0.0/25")); err != nil {
		t.Fatal(err)
	}
	inside := netip.MustParseAddr("10.0.0.29")
	st.then = func() {
		// Into the store: the allocator's CreateCIDR would decide about
		// inner again, and this runs inside a decision about it.
		c, err := mem.CreateCIDR(ctx, cidrset.CIDR{Name: "outer", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
		if err != nil {
			t.Error(err)
			return
		}
		if err := a.WaitRevision(ctx, c.Revision); err != nil {
			t.Error(err)
			return
		}
		if _, err := a.Allocate(ctx, inside, ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "late"}); err != nil {
			t.Error(err)
			return
		}
		// Marked by hand, for the same reason.
		c, err = mem.GetCIDR(ctx, "outer")
		if err != nil {
			t.Error(err)
			return
		}
		c.Terminating = true
		if _, err := mem.UpdateCIDR(ctx, c); err != nil {
			t.Error(err)
		}
	}
	err = a.DeleteCIDR(ctx, "inner")
	if !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Errorf("DeleteCIDR(inner) with %s allocated inside it meanwhile = %v, want it blocked", inside, err)
	}
	for _, name := range []string{"inner", "outer"} {
		if c, err := mem.GetCIDR(ctx, name); err != nil || !c.Terminating {
			t.Fatalf("%s while %s is held: %+v, %v; want it Terminating", name, inside, c, err)
		}
	}
	if err := a.Release(ctx, inside); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "both CIDRs removed once the address is released", func() bool {
		_, errInner := mem.GetCIDR(ctx, "inner")
		_, errOuter := mem.GetCIDR(ctx, "outer")
		return errors.Is(errInner, store.ErrNotFound) && errors.Is(errOuter, store.ErrNotFound)
	})
}

// An Allocator that New did not make, the zero value, is a closed one:
// calls that take a context fail with ErrClosed and the others answer as
// over an empty index, never a panic. Close of it, and of a nil
// *Allocator (a "defer a.Close()" written before New's error is checked),
// does nothing.
func TestAZeroAllocatorIsClosed(t *testing.T) {
	ctx := context.Background()
	var nilA *allocator.Allocator
	if err := nilA.Close(); err != nil {
		t.Errorf("Close of a nil *Allocator: %v", err)
	}
	var a allocator.Allocator
	for name, call := range contextCalls(ctx, &a, svc("x")) {
		if err := call(); !errors.Is(err, allocator.ErrClosed) {
			t.Errorf("%s of a zero Allocator: %v, want ErrClosed", name, err)
		}
	}
	if cs := a.CIDRs(); len(cs) != 0 {
		t.Errorf("CIDRs of a zero Allocator: %v", cs)
	}
	if _, err := a.GetCIDR("x"); !errors.Is(err, allocator.ErrNotFound) {
		t.Errorf("GetCIDR of a zero Allocator: %v, want ErrNotFound", err)
	}
	if _, err := a.Usage("x"); !errors.Is(err, allocator.ErrNotFound) {
		t.Errorf("Usage of a zero Allocator: %v, want ErrNotFound", err)
	}
	if u := a.FamilyUsage(ipaddress.IPv4); u != (allocator.Usage{}) {
		t.Errorf("FamilyUsage of a zero Allocator: %+v", u)
	}
	if err := a.Close(); err != nil {
		t.Errorf("Close of a zero Allocator: %v", err)
	}
}
