package memory_test

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
)

type printer struct{}

func (printer) Reset(s store.Snapshot) { fmt.Println("reset at revision", s.Revision) }
func (printer) Apply(e store.Event) {
	fmt.Println("event", e.Kind, "revision", e.Revision, e.Address.Addr)
}

func Example() {
	ctx := context.Background()
	st := memory.New()
	c, _ := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}})
	st.Watch(ctx, printer{})

	rec := ipaddress.IPAddress{Addr: netip.MustParseAddr("10.0.0.5"), Parent: ipaddress.ParentRef{Resource: "services", Name: "x"}}
	_, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{rec}, store.Fence{CIDR: "c", Revision: c.Revision})
	fmt.Println(err)
	_, err = st.CreateAddresses(ctx, []ipaddress.IPAddress{rec})
	fmt.Println(err)
	// Output:
	// reset at revision 1
	// event AddressPut revision 2 10.0.0.5
	// <nil>
	// address 10.0.0.5: already exists
}
