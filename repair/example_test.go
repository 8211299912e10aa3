package repair_test

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store/memory"
)

// A repair pass over a store where a Service was deleted without releasing
// its address, and another lost its record.
func Example() {
	ctx := context.Background()
	now := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	a, err := allocator.New(ctx, memory.New(memory.WithClock(clock)))
	if err != nil {
		panic(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/28")); err != nil {
		panic(err)
	}
	svc := func(name string) ipaddress.ParentRef {
		return ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: name}
	}
	_, _ = a.Allocate(ctx, netip.MustParseAddr("10.96.0.1"), svc("kubernetes"))
	_, _ = a.Allocate(ctx, netip.MustParseAddr("10.96.0.7"), svc("deleted"))
	now = now.Add(2 * time.Minute)

	r := &repair.Repairer{
		Allocator: a,
		Consumers: repair.NewStatic(
			repair.Consumer{Ref: svc("kubernetes"), Addrs: []string{"10.96.0.1"}},
			repair.Consumer{Ref: svc("dns"), Addrs: []string{"10.96.0.10"}},
		),
		Now: clock,
	}
	rep, err := r.Run(ctx)
	if err != nil {
		panic(err)
	}
	for _, e := range rep.Events {
		fmt.Printf("%s (%s): %s\n", e.Kind, e.ErrorType(), e.Message)
	}
	// Output:
	// Repaired (repair): [IPv4] 10.96.0.10 of services/default/dns is not allocated; repairing
	// Leak (leak): 10.96.0.7 of services/default/deleted appears to have leaked: cleaning up
}
