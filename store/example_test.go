package store_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

// A fenced create fails once the CIDR it was decided against has changed:
// this is how a CIDR marked Terminating stops every allocation in flight.
func ExampleFence() {
	ctx := context.Background()
	var st store.Store = memory.New()
	c, _ := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	fence := store.Fence{CIDR: c.Name, Revision: c.Revision}

	c.Terminating = true
	st.UpdateCIDR(ctx, c)

	rec := ipaddress.IPAddress{Addr: netip.MustParseAddr("10.0.0.9"), Parent: ipaddress.ParentRef{Resource: "services", Name: "x"}}
	_, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{rec}, fence)
	var fe *store.FencedError
	fmt.Println(errors.Is(err, store.ErrFenced), errors.As(err, &fe) && fe.Fence.CIDR == "c")
	// Output: true true
}
