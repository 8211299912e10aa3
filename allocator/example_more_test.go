package allocator_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"go4.org/netipx"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/memory"
)

// A full family refuses dynamic allocations until a CIDR with room is
// created; the next allocation comes from it, with no restart.
func ExampleAllocator_AllocateNext_exhaustion() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New(), allocator.WithStrategy(allocator.Sequential()))
	defer a.Close()
	a.CreateCIDR(ctx, "small", netip.MustParsePrefix("10.0.0.0/30")) // offers .1 and .2

	for _, name := range []string{"a", "b", "c"} {
		r, err := a.AllocateNext(ctx, ipaddress.IPv4, svc(name))
		if err != nil {
			fmt.Println(name, err, errors.Is(err, allocator.ErrFull))
			continue
		}
		fmt.Println(name, r.Addr)
	}

	a.CreateCIDR(ctx, "more", netip.MustParsePrefix("10.0.1.0/29"))
	r, err := a.AllocateNext(ctx, ipaddress.IPv4, svc("c"))
	fmt.Println("c", r.Addr, err)
	// Output:
	// a 10.0.0.1
	// b 10.0.0.2
	// c range is full true
	// c 10.0.1.1 <nil>
}

// Every refusal is typed: match it with errors.Is, and take its details
// with errors.As.
func ExampleAllocator_Allocate_errors() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New())
	defer a.Close()
	a.CreateCIDR(ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/28"))

	_, err := a.Allocate(ctx, netip.MustParseAddr("10.97.0.1"), svc("web"))
	var rangeErr *allocator.RangeError
	if errors.As(err, &rangeErr) {
		fmt.Println(errors.Is(err, allocator.ErrNotInRange), rangeErr.Valid)
	}

	a.Allocate(ctx, netip.MustParseAddr("10.96.0.5"), svc("web"))
	_, err = a.Allocate(ctx, netip.MustParseAddr("10.96.0.5"), svc("api"))
	fmt.Println(errors.Is(err, allocator.ErrAllocated), err)

	_, err = a.Allocate(ctx, netip.MustParseAddr("10.96.0.6"), svc("Not_A_DNS_Label"))
	var fieldErr *ipaddress.FieldError
	if errors.As(err, &fieldErr) {
		fmt.Println(errors.Is(err, allocator.ErrInvalid), fieldErr.Field)
	}
	// Output:
	// true [10.96.0.0/28]
	// true provided IP is already allocated
	// true spec.parentRef.name
}

// Excluded ranges are never handed out, by dynamic allocation or to a
// static request: here the addresses a router and two appliances use.
func ExampleWithExcluded() {
	ctx := context.Background()
	reserved := netipx.IPRangeFrom(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.3"))
	a, _ := allocator.New(ctx, memory.New(),
		allocator.WithStrategy(allocator.Sequential()),
		allocator.WithExcluded(reserved))
	defer a.Close()
	a.CreateCIDR(ctx, "c", netip.MustParsePrefix("10.0.0.0/29"))

	r, _ := a.AllocateNext(ctx, ipaddress.IPv4, svc("web"))
	fmt.Println(r.Addr)
	_, err := a.Allocate(ctx, netip.MustParseAddr("10.0.0.2"), svc("api"))
	fmt.Println(errors.Is(err, allocator.ErrExcluded))
	u, _ := a.Usage("c")
	fmt.Println(u.Prefixes[0].Used, u.Prefixes[0].Free)
	// Output:
	// 10.0.0.4
	// true
	// 1 2
}

// Two allocators over one store, as two apiservers over one etcd: an
// address is held by one owner across both, and each sees the other's
// writes.
func ExampleNew_sharedStore() {
	ctx := context.Background()
	st := memory.New()
	first, _ := allocator.New(ctx, st)
	defer first.Close()
	second, _ := allocator.New(ctx, st)
	defer second.Close()

	first.CreateCIDR(ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/24"))
	addr := netip.MustParseAddr("10.96.0.10")
	first.Allocate(ctx, addr, svc("web"))

	_, err := second.Allocate(ctx, addr, svc("api"))
	fmt.Println(errors.Is(err, allocator.ErrAllocated))
	rec, _ := second.Get(ctx, addr)
	fmt.Println(rec.Parent)

	second.Release(ctx, addr)
	_, err = first.Allocate(ctx, addr, svc("api"))
	fmt.Println(err)
	// Output:
	// true
	// services/default/web
	// <nil>
}

// An owner's addresses, of both families, found and released together, as
// when a Service is deleted.
func ExampleAllocator_ReleaseOwner() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New(), allocator.WithStrategy(allocator.Sequential()))
	defer a.Close()
	a.CreateCIDR(ctx, "dual", netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/120"))
	a.AllocateDualStack(ctx, svc("web"), netip.Addr{}, netip.Addr{})
	a.AllocateNext(ctx, ipaddress.IPv4, svc("api"))

	recs, _ := a.AddressesOf(ctx, svc("web"))
	fmt.Println(len(recs))
	released, err := a.ReleaseOwner(ctx, svc("web"))
	fmt.Println(released, err)
	fmt.Println(a.FamilyUsage(ipaddress.IPv4).Used, a.FamilyUsage(ipaddress.IPv6).Used)
	// Output:
	// 2
	// [10.0.0.17 fd00::11] <nil>
	// 1 0
}

// A network plugin's setup, retried for one container, gets the address
// the first attempt got; the teardown releases everything the container
// holds.
func ExampleAllocator_EnsureNext() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New(), allocator.WithStrategy(allocator.Sequential()))
	defer a.Close()
	a.CreateCIDR(ctx, "pods", netip.MustParsePrefix("10.244.0.0/24"))
	pod := ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: "web-0"}

	first, _ := a.EnsureNext(ctx, ipaddress.IPv4, pod)
	retried, _ := a.EnsureNext(ctx, ipaddress.IPv4, pod) // the ADD, again
	fmt.Println(first.Addr, retried.Addr, a.FamilyUsage(ipaddress.IPv4).Used)
	released, _ := a.ReleaseOwner(ctx, pod) // the DEL
	fmt.Println(released)
	// Output:
	// 10.244.0.17 10.244.0.17 1
	// [10.244.0.17]
}

// A dual-stack pod's setup, retried: the pair is allocated once, both or
// neither, and a retry gets the same pair. A pod whose earlier setup got
// only its IPv4 address (before the IPv6 CIDR existed) keeps it and gets
// an IPv6 address to go with it.
func ExampleAllocator_EnsureDualStack() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New(), allocator.WithStrategy(allocator.Sequential()))
	defer a.Close()
	a.CreateCIDR(ctx, "pods-v4", netip.MustParsePrefix("10.244.0.0/24"))
	early := ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: "early"}
	a.EnsureNext(ctx, ipaddress.IPv4, early)
	a.CreateCIDR(ctx, "pods-v6", netip.MustParsePrefix("fd00:10:244::/112"))
	pod := ipaddress.ParentRef{Resource: "pods", Namespace: "default", Name: "web-0"}

	v4, v6, _ := a.EnsureDualStack(ctx, pod)
	again4, again6, _ := a.EnsureDualStack(ctx, pod) // the ADD, again
	fmt.Println(v4.Addr, v6.Addr, again4.Addr == v4.Addr && again6.Addr == v6.Addr)
	v4, v6, _ = a.EnsureDualStack(ctx, early)
	fmt.Println(v4.Addr, v6.Addr)
	// Output:
	// 10.244.0.18 fd00:10:244::101 true
	// 10.244.0.17 fd00:10:244::102
}

// A policy of one's own: here the longest prefix serves first, so that
// small CIDRs fill before a large one is touched.
func ExamplePolicyFunc() {
	ctx := context.Background()
	smallestFirst := allocator.PolicyFunc(func(cands []allocator.Candidate) {
		slices.SortStableFunc(cands, func(x, y allocator.Candidate) int {
			return cmp.Compare(y.Prefix.Bits(), x.Prefix.Bits())
		})
	})
	a, _ := allocator.New(ctx, memory.New(),
		allocator.WithPolicy(smallestFirst),
		allocator.WithStrategy(allocator.Sequential()))
	defer a.Close()
	a.CreateCIDR(ctx, "large", netip.MustParsePrefix("10.0.0.0/16"))
	a.CreateCIDR(ctx, "small", netip.MustParsePrefix("192.168.0.0/30"))

	for _, name := range []string{"a", "b", "c"} {
		r, _ := a.AllocateNext(ctx, ipaddress.IPv4, svc(name))
		fmt.Println(name, r.Addr)
	}
	// The /16's first 256 addresses are its static band (KEP-3070), so its
	// first dynamic address is 10.0.1.1.

	// Output:
	// a 192.168.0.1
	// b 192.168.0.2
	// c 10.0.1.1
}

// A dry run answers what a deletion would do, and writes nothing.
func ExampleDryRun_DeleteCIDR() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New())
	defer a.Close()
	a.CreateCIDR(ctx, "old", netip.MustParsePrefix("10.0.0.0/24"))
	a.CreateCIDR(ctx, "new", netip.MustParsePrefix("10.0.0.0/25"))
	a.Allocate(ctx, netip.MustParseAddr("10.0.0.7"), svc("web"))   // inside both
	a.Allocate(ctx, netip.MustParseAddr("10.0.0.200"), svc("api")) // only in old

	d, _ := a.DryRun().DeleteCIDR(ctx, "old")
	fmt.Println(d.Remove, d.Blocking)
	d, _ = a.DryRun().DeleteCIDR(ctx, "new")
	fmt.Println(d.Remove, d.Blocking)
	fmt.Println(len(a.CIDRs()))
	// Output:
	// false [10.0.0.200]
	// true []
	// 2
}

// A dry run answers which pair a dual-stack allocation would take, or why
// it would fail, and writes nothing: the real call then takes that pair.
func ExampleDryRun_AllocateDualStack() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New(), allocator.WithStrategy(allocator.Sequential()))
	defer a.Close()
	a.CreateCIDR(ctx, "dual", netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00:10::/120"))
	a.Allocate(ctx, netip.MustParseAddr("10.0.0.7"), svc("web"))

	v4, v6, err := a.DryRun().AllocateDualStack(ctx, svc("api"), netip.Addr{}, netip.Addr{})
	fmt.Println(v4, v6, err)
	v4, v6, err = a.DryRun().AllocateDualStack(ctx, svc("api"), netip.MustParseAddr("10.0.0.7"), netip.Addr{})
	fmt.Println(v4.IsValid(), v6.IsValid(), err)
	fmt.Println(a.FamilyUsage(ipaddress.IPv4).Used, a.FamilyUsage(ipaddress.IPv6).Used)

	r4, r6, err := a.AllocateDualStack(ctx, svc("api"), netip.Addr{}, netip.Addr{})
	fmt.Println(r4.Addr, r6.Addr, err)
	// The first 16 addresses of each prefix (of 256) are its static band
	// (KEP-3070), so the first dynamic ones are .17 and ::11.

	// Output:
	// 10.0.0.17 fd00:10::11 <nil>
	// false false provided IP is already allocated
	// 1 0
	// 10.0.0.17 fd00:10::11 <nil>
}

// Records listed a moment ago (by a reconciler deciding they are leaks)
// are released only as they were listed: one released and allocated to
// another owner since stays that owner's.
func ExampleAllocator_ReleaseRecords() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New(), allocator.WithStrategy(allocator.Sequential()))
	defer a.Close()
	a.CreateCIDR(ctx, "pods", netip.MustParsePrefix("10.0.0.0/24"))
	a.AllocateNext(ctx, ipaddress.IPv4, svc("gone-a"))
	a.AllocateNext(ctx, ipaddress.IPv4, svc("gone-b"))
	leaks, _ := a.Store().ListAddresses(ctx)
	slices.SortFunc(leaks, func(x, y ipaddress.IPAddress) int { return x.Addr.Compare(y.Addr) })

	// Meanwhile the first address changes hands.
	a.Release(ctx, leaks[0].Addr)
	a.Allocate(ctx, leaks[0].Addr, svc("web"))

	for i, err := range a.ReleaseRecords(ctx, leaks) {
		fmt.Println(leaks[i].Addr, leaks[i].Parent.Name, err == nil, errors.Is(err, allocator.ErrConflict))
	}
	now, _ := a.Get(ctx, leaks[0].Addr)
	fmt.Println(now.Addr, now.Parent.Name)
	// Output:
	// 10.0.0.17 gone-a false true
	// 10.0.0.18 gone-b true false
	// 10.0.0.17 web
}

// A store restored from an old backup lacks records of addresses its
// consumers hold: they are written back, each as Restore would write it,
// and each record gets its own outcome.
func ExampleAllocator_RestoreRecords() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New())
	defer a.Close()
	a.CreateCIDR(ctx, "services", netip.MustParsePrefix("10.96.0.0/24"))
	a.Allocate(ctx, netip.MustParseAddr("10.96.0.10"), svc("dns")) // in the backup

	lost := []ipaddress.IPAddress{
		{Addr: netip.MustParseAddr("10.96.0.1"), Parent: svc("kubernetes")},
		{Addr: netip.MustParseAddr("10.96.0.10"), Parent: svc("other")},
		{Addr: netip.MustParseAddr("10.97.0.1"), Parent: svc("elsewhere")},
	}
	for i, err := range a.RestoreRecords(ctx, lost) {
		fmt.Println(lost[i].Addr, lost[i].Parent.Name, err)
	}
	// Output:
	// 10.96.0.1 kubernetes <nil>
	// 10.96.0.10 other provided IP is already allocated
	// 10.97.0.1 elsewhere the provided IP (10.97.0.1) is not in the valid range. The range of valid IPs is 10.96.0.0/24
}

// A record whose owner is gone is given to the consumer that holds its
// address, in one write: no other allocation can take the address in
// between, as it could between a release and an allocation.
func ExampleAllocator_ReplaceRecords() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New())
	defer a.Close()
	a.CreateCIDR(ctx, "services", netip.MustParsePrefix("10.96.0.0/24"))
	a.Allocate(ctx, netip.MustParseAddr("10.96.0.10"), svc("dns-old"))

	recs, _ := a.AddressesOf(ctx, svc("dns-old"))
	errs := a.ReplaceRecords(ctx, recs, []ipaddress.ParentRef{svc("dns")})
	now, _ := a.Get(ctx, recs[0].Addr)
	fmt.Println(errs[0], now.Addr, now.Parent.Name)

	// The record as listed is gone: a second hand-over of it is refused.
	errs = a.ReplaceRecords(ctx, recs, []ipaddress.ParentRef{svc("other")})
	fmt.Println(errors.Is(errs[0], allocator.ErrConflict))
	// Output:
	// <nil> 10.96.0.10 dns
	// true
}
