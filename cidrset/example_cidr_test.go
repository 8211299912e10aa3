package cidrset_test

import (
	"fmt"
	"net/netip"

	"github.com/netipam/netipam/cidrset"
)

func ExampleCIDR_String() {
	c := cidrset.CIDR{Name: "dual", Prefixes: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/16"),
		netip.MustParsePrefix("fd00:10::/108"),
	}, Revision: 7}
	fmt.Println(c)
	c.Terminating = true
	fmt.Printf("deleting %v: %s\n", c, c.Ready().Message)
	// Output:
	// dual [10.0.0.0/16 fd00:10::/108]
	// deleting dual [10.0.0.0/16 fd00:10::/108] (Terminating): There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR
}
