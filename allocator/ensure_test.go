package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/internal/stress"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// A setup retried for one owner (a network plugin's ADD for one container)
// gets the address the first call gave, per family; an owner that holds
// several gets its oldest; nothing more is allocated.
func TestEnsureNextGivesARetriedSetupItsAddressNotASecond(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"c=10.0.0.0/29,fd00::/125"})
	pod := svc("pod")
	first, err := a.EnsureNext(ctx, ipaddress.IPv4, pod)
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.EnsureNext(ctx, ipaddress.IPv4, pod)
	if err != nil || again != first {
		t.Fatalf("EnsureNext again = %+v, %v; want %+v", again, err, first)
	}
	v6, err := a.EnsureNext(ctx, ipaddress.IPv6, pod)
	if err != nil || !v6.Addr.Is6() {
		t.Fatalf("EnsureNext(IPv6) for an owner holding IPv4 only = %+v, %v; want a new IPv6 address", v6, err)
	}
	if got, err := a.DryRun().EnsureNext(ctx, ipaddress.IPv4, pod); err != nil || got != first.Addr {
		t.Fatalf("DryRun().EnsureNext for an owner holding %s = %s, %v", first.Addr, got, err)
	}
	if got, err := a.DryRun().EnsureNext(ctx, ipaddress.IPv4, svc("other")); err != nil || !got.IsValid() || got == first.Addr {
		t.Fatalf("DryRun().EnsureNext for an owner holding none = %s, %v; want a free address", got, err)
	}
	if recs, err := a.AddressesOf(ctx, svc("other")); err != nil || len(recs) != 0 {
		t.Fatalf("the dry run allocated %v, %v", recs, err)
	}
	second := mustNext(t, a, ipaddress.IPv4, "pod")
	if got, err := a.EnsureNext(ctx, ipaddress.IPv4, pod); err != nil || got != first {
		t.Fatalf("EnsureNext for an owner holding %s and %s = %+v, %v; want the oldest, %+v", first.Addr, second, got, err, first)
	}
	if u := a.FamilyUsage(ipaddress.IPv4); u.Used.String() != "2" {
		t.Fatalf("IPv4 used = %v after one EnsureNext, its retries and one AllocateNext: want 2", u.Used)
	}
	// A full family still gives an owner the address it holds.
	for i := range 4 {
		mustNext(t, a, ipaddress.IPv4, fmt.Sprintf("fill-%d", i))
	}
	if _, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("late")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("the /29 should be full: %v", err)
	}
	if got, err := a.EnsureNext(ctx, ipaddress.IPv4, pod); err != nil || got != first {
		t.Fatalf("EnsureNext on a full family for an owner holding %s = %+v, %v", first.Addr, got, err)
	}
	if _, err := a.EnsureNext(ctx, ipaddress.IPv4, svc("late")); !errors.Is(err, allocator.ErrFull) {
		t.Fatalf("EnsureNext on a full family for an owner holding none = %v, want ErrFull", err)
	}
}

func TestEnsureNextRefusesWhatAllocateNextRefuses(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"c=10.0.0.0/30"})
	mustNext(t, a, ipaddress.IPv4, "fill-1")
	mustNext(t, a, ipaddress.IPv4, "fill-2") // full
	var fe *ipaddress.FieldError
	for _, f := range []ipaddress.Family{0, 5} {
		if _, err := a.EnsureNext(ctx, f, svc("pod")); !errors.As(err, &fe) || fe.Field != "family" {
			t.Errorf("EnsureNext(family %d) = %v, want a FieldError for family", f, err)
		}
		if _, err := a.DryRun().EnsureNext(ctx, f, svc("pod")); !errors.As(err, &fe) || fe.Field != "family" {
			t.Errorf("DryRun().EnsureNext(family %d) = %v, want a FieldError for family", f, err)
		}
	}
	if _, err := a.EnsureNext(ctx, ipaddress.IPv4, ipaddress.ParentRef{Name: "no-resource"}); !errors.Is(err, allocator.ErrInvalid) {
		t.Errorf("EnsureNext for an invalid owner on a full family = %v, want ErrInvalid", err)
	}
	if _, err := a.EnsureNext(ctx, ipaddress.IPv6, svc("pod")); !errors.Is(err, allocator.ErrMismatch) {
		t.Errorf("EnsureNext of a family no CIDR serves = %v, want ErrMismatch", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.EnsureNext(ctx, ipaddress.IPv4, svc("fill-1")); !errors.Is(err, allocator.ErrClosed) {
		t.Errorf("EnsureNext after Close = %v, want ErrClosed", err)
	}
	if _, err := new(allocator.Allocator).EnsureNext(ctx, ipaddress.IPv4, svc("pod")); !errors.Is(err, allocator.ErrClosed) {
		t.Errorf("EnsureNext on the zero Allocator = %v, want ErrClosed", err)
	}
}

// Calls at once for one owner, through two allocators sharing a store,
// agree on one address; over the memory store's lock, and with one
// allocator on the path of a remote store (its own lock, creates in
// flight).
func TestEnsureNextCallsAtOnceForOneOwnerAgreeOnOneAddress(t *testing.T) {
	for _, remote := range []bool{false, true} {
		t.Run(fmt.Sprintf("remote=%v", remote), func(t *testing.T) {
			stress.EnsureNextAgrees(t, 30, 4, func(int) (store.Store, store.Store, func()) {
				st := memory.New()
				var second store.Store = st
				if remote {
					second = unlockedStore{st}
				}
				return st, second, func() {}
			})
		})
	}
}

// A static setup retried for one owner gets the record the first call
// made, even once the address's CIDR is Terminating; another owner's
// address is still ErrAllocated.
func TestEnsureAllocatedGivesARetriedStaticSetupItsRecord(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"c=10.0.0.0/29"})
	pod, addr := svc("pod"), ip("10.0.0.3")
	first, err := a.EnsureAllocated(ctx, addr, pod)
	if err != nil || first.Addr != addr || first.Parent != pod {
		t.Fatalf("EnsureAllocated = %+v, %v", first, err)
	}
	if again, err := a.EnsureAllocated(ctx, addr, pod); err != nil || again != first {
		t.Fatalf("EnsureAllocated again = %+v, %v; want %+v", again, err, first)
	}
	if _, err := a.EnsureAllocated(ctx, addr, svc("other")); !errors.Is(err, allocator.ErrAllocated) {
		t.Fatalf("EnsureAllocated of %s for another owner = %v, want ErrAllocated", addr, err)
	}
	if err := a.DeleteCIDR(ctx, "c"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatalf("DeleteCIDR holding %s = %v, want it blocked", addr, err)
	}
	if again, err := a.EnsureAllocated(ctx, addr, pod); err != nil || again != first {
		t.Fatalf("EnsureAllocated in a Terminating CIDR, held = %+v, %v; want %+v", again, err, first)
	}
	if _, err := a.EnsureAllocated(ctx, ip("10.0.0.4"), pod); !errors.Is(err, allocator.ErrTerminating) {
		t.Fatalf("EnsureAllocated of a free address in a Terminating CIDR = %v, want ErrTerminating", err)
	}
	for _, bad := range []struct {
		addr  netip.Addr
		owner ipaddress.ParentRef
	}{{netip.Addr{}, pod}, {addr, ipaddress.ParentRef{Name: "no-resource"}}} {
		if _, err := a.EnsureAllocated(ctx, bad.addr, bad.owner); !errors.Is(err, allocator.ErrInvalid) {
			t.Errorf("EnsureAllocated(%v, %+v) = %v, want ErrInvalid", bad.addr, bad.owner, err)
		}
	}
}

// Calls at once for one owner and address, through two allocators sharing
// a store (one on the remote path), all return the one record.
func TestEnsureAllocatedCallsAtOnceAgreeOnOneRecord(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	var as []*allocator.Allocator
	for _, s := range []store.Store{st, unlockedStore{st}} {
		a, err := allocator.New(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		as = append(as, a)
	}
	c, err := as[0].CreateCIDR(ctx, "c", pfx("10.0.0.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	if err := as[1].WaitRevision(ctx, c.Revision); err != nil {
		t.Fatal(err)
	}
	for trial := range 50 {
		addr, pod := netip.AddrFrom4([4]byte{10, 0, 0, byte(trial + 1)}), svc(fmt.Sprintf("pod-%d", trial))
		var wg sync.WaitGroup
		got := make([]ipaddress.IPAddress, 6)
		errs := make([]error, len(got))
		start := make(chan struct{})
		for i := range got {
			wg.Go(func() {
				<-start
				got[i], errs[i] = as[i%2].EnsureAllocated(ctx, addr, pod)
			})
		}
		close(start)
		wg.Wait()
		for i := range got {
			if errs[i] != nil || got[i] != got[0] {
				t.Fatalf("trial %d: call %d = %+v, %v; call 0 = %+v, %v", trial, i, got[i], errs[i], got[0], errs[0])
			}
		}
	}
}

// A dual-stack setup retried for one owner gets the pair the first call
// gave; an owner holding one family's address gets it and a new one of
// the other; an owner holding both, more than one of a family among them,
// gets its oldest of each and nothing more is allocated.
func TestEnsureDualStackGivesARetriedSetupItsPair(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"c=10.0.0.0/28,fd00::/124"})
	pod := svc("pod")
	v4, v6, err := a.EnsureDualStack(ctx, pod)
	if err != nil || !v4.Addr.Is4() || !v6.Addr.Is6() || v4.Parent != pod || v6.Parent != pod {
		t.Fatalf("EnsureDualStack = %+v, %+v, %v", v4, v6, err)
	}
	if again4, again6, err := a.EnsureDualStack(ctx, pod); err != nil || again4 != v4 || again6 != v6 {
		t.Fatalf("EnsureDualStack again = %+v, %+v, %v; want %+v, %+v", again4, again6, err, v4, v6)
	}
	if recs, err := a.AddressesOf(ctx, pod); err != nil || len(recs) != 2 {
		t.Fatalf("the owner holds %v, %v after a call and its retry: want its pair only", recs, err)
	}
	for i, f := range []ipaddress.Family{ipaddress.IPv4, ipaddress.IPv6} {
		half := svc(fmt.Sprintf("half-%d", i))
		held, err := a.EnsureNext(ctx, f, half)
		if err != nil {
			t.Fatal(err)
		}
		g4, g6, err := a.EnsureDualStack(ctx, half)
		if err != nil {
			t.Fatalf("EnsureDualStack for an owner holding %s only: %v", held.Addr, err)
		}
		kept, other := g4, g6
		if f == ipaddress.IPv6 {
			kept, other = g6, g4
		}
		if kept != held || !other.Addr.IsValid() || ipaddress.FamilyOf(other.Addr) == f {
			t.Errorf("EnsureDualStack for an owner holding %s only = %s, %s; want it and one of the other family", held.Addr, g4.Addr, g6.Addr)
		}
	}
	extra := mustNext(t, a, ipaddress.IPv4, "pod")
	if got4, got6, err := a.EnsureDualStack(ctx, pod); err != nil || got4 != v4 || got6 != v6 {
		t.Fatalf("EnsureDualStack for an owner holding %s, %s and %s = %+v, %+v, %v; want the oldest of each", v4.Addr, extra, v6.Addr, got4, got6, err)
	}
	if recs, err := a.AddressesOf(ctx, pod); err != nil || len(recs) != 3 {
		t.Fatalf("the owner holds %v, %v: want the 3 addresses it had", recs, err)
	}
}

// Both or neither: an owner holding no address gets no pair when one
// family is full, and nothing of the other family is taken; an owner
// holding one family's address keeps it when the other's fails, and gets
// it back with the error.
func TestEnsureDualStackAllocatesBothOrNeither(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"c=10.0.0.0/28,fd00::/125"})
	half, err := a.EnsureNext(ctx, ipaddress.IPv4, svc("half"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if _, err := a.AllocateNext(ctx, ipaddress.IPv6, svc(fmt.Sprintf("fill-%d", i))); errors.Is(err, allocator.ErrFull) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	used4 := a.FamilyUsage(ipaddress.IPv4).Used.String()
	if v4, v6, err := a.EnsureDualStack(ctx, svc("late")); !errors.Is(err, allocator.ErrFull) || v4.Addr.IsValid() || v6.Addr.IsValid() {
		t.Errorf("EnsureDualStack with IPv6 full = %s, %s, %v; want ErrFull and nothing", v4.Addr, v6.Addr, err)
	}
	if recs, err := a.AddressesOf(ctx, svc("late")); err != nil || len(recs) != 0 {
		t.Errorf("after a failed EnsureDualStack the owner holds %v, %v; want nothing", recs, err)
	}
	if got := a.FamilyUsage(ipaddress.IPv4).Used.String(); got != used4 {
		t.Errorf("IPv4 used %s after a failed EnsureDualStack, %s before", got, used4)
	}
	v4, v6, err := a.EnsureDualStack(ctx, svc("half"))
	if !errors.Is(err, allocator.ErrFull) || v4 != half || v6.Addr.IsValid() {
		t.Errorf("EnsureDualStack with IPv6 full for an owner holding %s = %s, %s, %v; want it back, with ErrFull", half.Addr, v4.Addr, v6.Addr, err)
	}
	if recs, err := a.AddressesOf(ctx, svc("half")); err != nil || len(recs) != 1 || recs[0] != half {
		t.Errorf("the owner holds %v, %v; want %s still", recs, err, half.Addr)
	}
	if _, _, err := a.EnsureDualStack(ctx, ipaddress.ParentRef{Name: "no-resource"}); !errors.Is(err, allocator.ErrInvalid) {
		t.Errorf("EnsureDualStack for an invalid owner = %v, want ErrInvalid", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.EnsureDualStack(ctx, svc("half")); !errors.Is(err, allocator.ErrClosed) {
		t.Errorf("EnsureDualStack after Close = %v, want ErrClosed", err)
	}
	if _, _, err := new(allocator.Allocator).EnsureDualStack(ctx, svc("half")); !errors.Is(err, allocator.ErrClosed) {
		t.Errorf("EnsureDualStack on the zero Allocator = %v, want ErrClosed", err)
	}
}

// With no IPv6 CIDR, an owner holding nothing gets nothing, and the
// family's error says why.
func TestEnsureDualStackWithOneFamilyServedAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"c=10.0.0.0/28"})
	if _, _, err := a.EnsureDualStack(ctx, svc("pod")); !errors.Is(err, allocator.ErrMismatch) {
		t.Errorf("EnsureDualStack with no IPv6 CIDR = %v, want ErrMismatch", err)
	}
	if u := a.FamilyUsage(ipaddress.IPv4).Used.String(); u != "0" {
		t.Errorf("IPv4 used %s after EnsureDualStack failed on IPv6", u)
	}
}
