package allocator_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/memory"
)

func Example() {
	ctx := context.Background()
	a, err := allocator.New(ctx, memory.New(), allocator.WithStrategy(allocator.Sequential()))
	if err != nil {
		panic(err)
	}
	defer a.Close()

	a.EnsureDefault(ctx, netip.MustParsePrefix("10.96.0.0/28"))
	kube := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"}
	r, _ := a.Allocate(ctx, netip.MustParseAddr("10.96.0.1"), kube)
	fmt.Println(r.Addr, r.Parent)

	web := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "web"}
	r, _ = a.AllocateNext(ctx, ipaddress.IPv4, web)
	fmt.Println(r.Addr, r.Parent)

	_, err = a.Allocate(ctx, netip.MustParseAddr("10.96.0.2"), kube)
	fmt.Println(err)
	// Output:
	// 10.96.0.1 services/default/kubernetes
	// 10.96.0.2 services/default/web
	// provided IP is already allocated
}

func ExampleAllocator_AllocateDualStack() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New(), allocator.WithStrategy(allocator.Sequential()))
	defer a.Close()
	a.CreateCIDR(ctx, "dual", netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00:10::/108"))

	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "dual"}
	v4, v6, err := a.AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{})
	fmt.Println(v4.Addr, v6.Addr, err)
	// The dynamic lower band (KEP-3070) is skipped: .1-.256 are kept for static requests.
	// Output: 10.0.1.1 fd00:10::101 <nil>
}

func ExampleAllocator_DeleteCIDR() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New())
	defer a.Close()
	a.CreateCIDR(ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/28"))
	a.CreateCIDR(ctx, "newcidr1", netip.MustParsePrefix("192.96.0.0/24"))
	a.Allocate(ctx, netip.MustParseAddr("192.96.0.7"), ipaddress.ParentRef{Resource: "services", Name: "x"})

	err := a.DeleteCIDR(ctx, "newcidr1")
	fmt.Println(errors.Is(err, allocator.ErrDeletionBlocked))
	c, _ := a.GetCIDR("newcidr1")
	fmt.Println(c.Terminating, c.Ready().Reason)

	a.Release(ctx, netip.MustParseAddr("192.96.0.7"))
	_, err = a.GetCIDR("newcidr1")
	fmt.Println(errors.Is(err, allocator.ErrNotFound))
	// Output:
	// true
	// true Terminating
	// true
}

func ExampleAllocator_Usage() {
	ctx := context.Background()
	a, _ := allocator.New(ctx, memory.New())
	defer a.Close()
	a.CreateCIDR(ctx, "big", netip.MustParsePrefix("2001:db8::/48"))
	a.AllocateNext(ctx, ipaddress.IPv6, ipaddress.ParentRef{Resource: "services", Name: "x"})
	u, _ := a.Usage("big")
	p := u.Prefixes[0]
	fmt.Println(p.Prefix, p.Size, p.Used, p.Free)
	// Output: 2001:db8::/48 1208925819614629174706175 1 1208925819614629174706174
}
