package allocator_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// readBarrierStore holds its first n AddressesOf calls, once each has
// read, until all n have: calls made at once that all read the owner's
// records before any of them allocates.
type readBarrierStore struct {
	store.Store
	n       int32
	calls   atomic.Int32
	arrived sync.WaitGroup
	all     chan struct{}
}

func newReadBarrierStore(st store.Store, n int) *readBarrierStore {
	s := &readBarrierStore{Store: st, n: int32(n), all: make(chan struct{})}
	s.arrived.Add(n)
	go func() { s.arrived.Wait(); close(s.all) }()
	return s
}

func (s *readBarrierStore) AddressesOf(ctx context.Context, owner ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	recs, err := s.Store.AddressesOf(ctx, owner)
	if s.calls.Add(1) <= s.n {
		s.arrived.Done()
		select {
		case <-s.all:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return recs, err
}

// barrierAllocator is an allocator over a readBarrierStore holding its
// first two AddressesOf calls, serving one CIDR "c" of prefixes.
func barrierAllocator(t *testing.T, ctx context.Context, prefixes ...netip.Prefix) *allocator.Allocator {
	t.Helper()
	a, err := allocator.New(ctx, newReadBarrierStore(memory.New(), 2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if _, err := a.CreateCIDR(ctx, "c", prefixes...); err != nil {
		t.Fatal(err)
	}
	return a
}

// Two calls at once for one owner when one address of the family is left:
// both find the owner holding none, one allocates the last address, and
// the other's allocation finds the family full. The owner holds an address
// of the family all the same, which both calls must return: a setup
// retried at once on a nearly full range must not fail the retry.
func TestEnsureNextCallsAtOnceForTheLastAddressBothGetIt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang bound
	defer cancel()
	a := barrierAllocator(t, ctx, pfx("10.0.0.0/30")) // .1 and .2
	// The barrier's two calls are the EnsureNext calls' first reads:
	// fill the /30 but one address past the store's AddressesOf.
	if _, err := a.Allocate(ctx, ip("10.0.0.1"), svc("fill")); err != nil {
		t.Fatal(err)
	}
	pod := svc("pod")
	var (
		wg   sync.WaitGroup
		got  [2]ipaddress.IPAddress
		errs [2]error
	)
	for i := range got {
		wg.Go(func() { got[i], errs[i] = a.EnsureNext(ctx, ipaddress.IPv4, pod) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v; the owner holds %s of the other call", i, err, got[1-i].Addr)
		}
	}
	if got[0].Addr != got[1].Addr || got[0].Addr != ip("10.0.0.2") {
		t.Errorf("calls at once returned %s and %s, want 10.0.0.2 from both", got[0].Addr, got[1].Addr)
	}
	held, err := a.AddressesOf(ctx, pod)
	if err != nil || len(held) != 1 || held[0].Addr != ip("10.0.0.2") {
		t.Errorf("the owner holds %v, %v; want 10.0.0.2 only", held, err)
	}
}

// hookStore runs before, once, ahead of its nth AddressesOf.
type hookStore struct {
	store.Store
	nth    int32
	calls  atomic.Int32
	before func(ctx context.Context)
}

func (s *hookStore) AddressesOf(ctx context.Context, owner ipaddress.ParentRef) ([]ipaddress.IPAddress, error) {
	if s.calls.Add(1) == s.nth {
		s.before(ctx)
	}
	return s.Store.AddressesOf(ctx, owner)
}

// The address a call allocated is released by someone else, and given to
// the same owner again (by another call for it, say), before the call
// reads the owner's records back: the call returns that address, and the
// record it returns is the one the owner holds, of its revision, which a
// ReleaseAt of what the call returned then frees.
func TestEnsureNextReturnsTheRecordTheOwnerHoldsNotTheOneItMade(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang bound
	defer cancel()
	mem := memory.New()
	pod := svc("pod")
	var made ipaddress.IPAddress
	st := &hookStore{Store: mem, nth: 2, before: func(ctx context.Context) {
		// The second read is the one after the allocation: the address
		// is the only one of the /30 allocated.
		all, err := mem.ListAddresses(ctx)
		if err != nil || len(all) != 1 {
			t.Errorf("before the read back: %v, %v; want one record", all, err)
			return
		}
		if _, _, err := mem.DeleteAddress(ctx, all[0].Addr); err != nil {
			t.Error(err)
			return
		}
		recs, err := mem.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: all[0].Addr, Parent: pod}})
		if err != nil {
			t.Error(err)
			return
		}
		made = recs[0]
	}}
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "c", pfx("10.0.0.0/30")); err != nil {
		t.Fatal(err)
	}
	rec, err := a.EnsureNext(ctx, ipaddress.IPv4, pod)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Addr != made.Addr || rec.Revision != made.Revision || !rec.Created.Equal(made.Created) {
		t.Errorf("EnsureNext = %s at revision %d, created %v; the owner holds it at revision %d, created %v", rec.Addr, rec.Revision, rec.Created, made.Revision, made.Created)
	}
	if err := a.ReleaseAt(ctx, rec.Addr, rec.Revision); err != nil {
		t.Errorf("ReleaseAt of what EnsureNext returned: %v", err)
	}
}

// Two dual-stack calls at once for one owner when one IPv6 address is
// left: both find the owner holding nothing, one allocates the pair, and
// the other's pair finds IPv6 full. The owner holds a pair all the same,
// which both calls must return.
func TestEnsureDualStackCallsAtOnceForTheLastAddressBothGetThePair(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang bound
	defer cancel()
	a := barrierAllocator(t, ctx, pfx("10.0.0.0/28"), pfx("fd00::/126")) // fd00::1 to ::3
	for _, addr := range []string{"fd00::1", "fd00::2"} {
		if _, err := a.Allocate(ctx, ip(addr), svc("fill")); err != nil {
			t.Fatal(err)
		}
	}
	pod := svc("pod")
	var (
		wg         sync.WaitGroup
		got4, got6 [2]ipaddress.IPAddress
		errs       [2]error
	)
	for i := range errs {
		wg.Go(func() { got4[i], got6[i], errs[i] = a.EnsureDualStack(ctx, pod) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v; the other call returned %s and %s", i, err, got4[1-i].Addr, got6[1-i].Addr)
		}
	}
	if got4[0] != got4[1] || got6[0] != got6[1] || got6[0].Addr != ip("fd00::3") {
		t.Errorf("calls at once returned %s, %s and %s, %s: want one pair, with fd00::3", got4[0].Addr, got6[0].Addr, got4[1].Addr, got6[1].Addr)
	}
	held, err := a.AddressesOf(ctx, pod)
	if err != nil || len(held) != 2 {
		t.Errorf("the owner holds %v, %v; want its pair only", held, err)
	}
}

// createHookStore runs before, once, ahead of its nth CreateAddresses.
type createHookStore struct {
	store.Store
	nth    int32
	calls  atomic.Int32
	before func(ctx context.Context)
}

func (s *createHookStore) CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...store.Fence) ([]ipaddress.IPAddress, error) {
	if s.calls.Add(1) == s.nth {
		s.before(ctx)
	}
	return s.Store.CreateAddresses(ctx, recs, fences...)
}

// otherProcess is another process's allocator over mem, which creates the
// CIDR "c" of 10.0.0.0/28 and fd00::/126 (fd00::1 to ::3) and allocates
// the addresses taken to an owner of its own.
func otherProcess(t *testing.T, ctx context.Context, mem *memory.Store, taken ...string) *allocator.Allocator {
	t.Helper()
	other, err := allocator.New(ctx, mem)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	if _, err := other.CreateCIDR(ctx, "c", pfx("10.0.0.0/28"), pfx("fd00::/126")); err != nil {
		t.Fatal(err)
	}
	for _, addr := range taken {
		if _, err := other.Allocate(ctx, ip(addr), svc("fill")); err != nil {
			t.Fatal(err)
		}
	}
	return other
}

// A dual-stack call whose pair finds IPv6 full reads the owner's records
// again, and finding none there answers ErrFull: it allocates no second
// time. A second pair allocated after that read, were it to find IPv6
// full again (an address freed meanwhile, then taken by another call for
// the owner first), would have no read after it: the call would fail
// while the owner holds the other call's pair, written before it failed.
func TestEnsureDualStackAnswersErrFullOnlyAfterReadingTheOwnerAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang bound
	defer cancel()
	mem := memory.New()
	other := otherProcess(t, ctx, mem, "fd00::1", "fd00::2", "fd00::3") // IPv6 full
	pod := svc("pod")
	var (
		theirs4, theirs6 ipaddress.IPAddress
		theirErr         error
	)
	// The call's second read is the one after its pair found IPv6 full:
	// fd00::3 is freed before it, by someone else.
	reads := &hookStore{Store: mem, nth: 2, before: func(ctx context.Context) {
		if err := other.Release(ctx, ip("fd00::3")); err != nil {
			t.Error(err)
		}
	}}
	// A create after that read: another call for pod takes fd00::3 first.
	st := &createHookStore{Store: reads, nth: 1, before: func(ctx context.Context) {
		theirs4, theirs6, theirErr = other.EnsureDualStack(ctx, pod)
	}}
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	v4, v6, err := a.EnsureDualStack(ctx, pod)
	held, herr := a.AddressesOf(ctx, pod)
	if herr != nil {
		t.Fatal(herr)
	}
	switch {
	case errors.Is(err, allocator.ErrFull):
		if len(held) != 0 {
			t.Errorf("EnsureDualStack = %v, yet the owner holds %v: the pair of a call at once (%s, %s, %v), made before it failed", err, held, theirs4.Addr, theirs6.Addr, theirErr)
		}
	case err != nil:
		t.Fatal(err)
	case v4 != theirs4 || v6 != theirs6:
		t.Errorf("EnsureDualStack = %s, %s; the other call got %s, %s", v4.Addr, v6.Addr, theirs4.Addr, theirs6.Addr)
	}
}

// An owner holding its IPv4 address only, whose last free IPv6 address
// another call takes for it between this call's read and its allocation:
// the allocation finds IPv6 full, and the read after it fails. The call
// answers that read's error, not ErrFull, which would say the owner holds
// no IPv6 address when it holds the other call's, taken before.
func TestEnsureDualStackWhoseReadAfterErrFullFailsAnswersThatRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang bound
	defer cancel()
	mem := memory.New()
	other := otherProcess(t, ctx, mem, "fd00::1", "fd00::2") // fd00::3 left
	pod := svc("pod")
	held4, err := other.Allocate(ctx, ip("10.0.0.9"), pod)
	if err != nil {
		t.Fatal(err)
	}
	callCtx, cancelCall := context.WithCancel(ctx)
	defer cancelCall()
	// The call's second read is the one after its allocation found IPv6
	// full: it fails.
	reads := &hookStore{Store: mem, nth: 2, before: func(context.Context) { cancelCall() }}
	var (
		theirs   ipaddress.IPAddress
		theirErr error
	)
	st := &createHookStore{Store: reads, nth: 1, before: func(context.Context) {
		theirs, theirErr = other.EnsureNext(ctx, ipaddress.IPv6, pod)
	}}
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	v4, v6, err := a.EnsureDualStack(callCtx, pod)
	if theirErr != nil || theirs.Addr != ip("fd00::3") {
		t.Fatalf("the other call got %s, %v; want fd00::3", theirs.Addr, theirErr)
	}
	if v4 != held4 || v6.Addr.IsValid() || err == nil {
		t.Fatalf("EnsureDualStack = %s, %s, %v; want %s and the error", v4.Addr, v6.Addr, err, held4.Addr)
	}
	if errors.Is(err, allocator.ErrFull) || !errors.Is(err, context.Canceled) {
		t.Errorf("EnsureDualStack = %v; want the failed read's error, not ErrFull: the owner holds %s, taken before the call found IPv6 full", err, theirs.Addr)
	}
}
