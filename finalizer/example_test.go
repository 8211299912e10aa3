package finalizer_test

import (
	"fmt"
	"iter"
	"net/netip"
	"slices"

	"go4.org/netipx"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/finalizer"
)

func ExampleDecide() {
	target := cidrset.CIDR{Name: "newcidr1", Terminating: true, Prefixes: []netip.Prefix{netip.MustParsePrefix("192.96.0.0/24")}}
	used := func(netipx.IPRange) iter.Seq[netipx.IPRange] {
		return slices.Values([]netipx.IPRange{netipx.MustParseIPRange("192.96.0.10-192.96.0.11")})
	}
	d := finalizer.Decide(target, nil, used)
	fmt.Println(d.Remove, d.Blocking)

	// A live CIDR covering the prefix releases it.
	cover := cidrset.CIDR{Name: "wide", Revision: 7, Prefixes: []netip.Prefix{netip.MustParsePrefix("192.96.0.0/16")}}
	d = finalizer.Decide(target, []cidrset.CIDR{cover}, used)
	fmt.Println(d.Remove, "fenced on", d.Fences[0].CIDR, "at revision", d.Fences[0].Revision)
	// Output:
	// false [192.96.0.10 192.96.0.11]
	// true fenced on wide at revision 7
}
