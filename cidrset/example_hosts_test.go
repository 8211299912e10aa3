package cidrset_test

import (
	"fmt"
	"net/netip"

	"github.com/netipam/netipam/cidrset"
)

func ExampleHostRange() {
	for _, s := range []string{"10.96.0.0/28", "2001:db8::/126", "10.0.0.0/31"} {
		r, ok := cidrset.HostRange(netip.MustParsePrefix(s))
		fmt.Println(s, r, ok, cidrset.Size(netip.MustParsePrefix(s)))
	}
	// Output:
	// 10.96.0.0/28 10.96.0.1-10.96.0.14 true 14
	// 2001:db8::/126 2001:db8::1-2001:db8::3 true 3
	// 10.0.0.0/31 zero IPRange false 0
}

func ExampleBands() {
	lower, upper, _, _ := cidrset.Bands(netip.MustParsePrefix("10.0.0.0/24"))
	fmt.Println("static first:", lower)
	fmt.Println("dynamic first:", upper)
	// Output:
	// static first: 10.0.0.1-10.0.0.16
	// dynamic first: 10.0.0.17-10.0.0.254
}

func ExampleIndex_Containing() {
	x := cidrset.NewIndex([]cidrset.CIDR{
		{Name: "kubernetes", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/28")}},
		{Name: "wide", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}},
	})
	x.Containing(netip.MustParseAddr("10.96.0.15"), func(c *cidrset.CIDR, p netip.Prefix) bool {
		fmt.Println(c.Name, p) // .15 is the /28's broadcast: only the /16 offers it
		return true
	})
	// Output: wide 10.96.0.0/16
}

func ExampleIndex_Put() {
	var x cidrset.Index // the zero value is an empty index
	x.Put(cidrset.CIDR{Name: "services", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16")}})
	x.Put(cidrset.CIDR{Name: "extra", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.8.0/24")}})
	x.Put(cidrset.CIDR{Name: "other", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.97.0.0/24")}})
	for _, c := range x.Overlapping(netip.MustParsePrefix("10.96.0.0/20")) {
		fmt.Println("overlaps 10.96.0.0/20:", c.Name)
	}
	x.Delete("extra")
	fmt.Println("after Delete:", len(x.Overlapping(netip.MustParsePrefix("10.96.0.0/20"))), "of", x.Len())
	// Output:
	// overlaps 10.96.0.0/20: extra
	// overlaps 10.96.0.0/20: services
	// after Delete: 1 of 2
}
