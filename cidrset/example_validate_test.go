package cidrset_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
)

func ExampleParsePrefix() {
	for _, s := range []string{"10.96.0.0/28", "fd00:10::/108", "010.0.0.0/8", "10.0.0.0/08", "10.0.0.1/24", "::ffff:10.0.0.0/104", "2001:DB8::/64", "10.0.0.0"} {
		p, err := cidrset.ParsePrefix(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println("ok", p)
	}
	// Output:
	// ok 10.96.0.0/28
	// ok fd00:10::/108
	// spec.cidrs: Invalid value: "010.0.0.0/8": must not have leading 0s in IP or prefix length
	// spec.cidrs: Invalid value: "10.0.0.0/08": must not have leading 0s in IP or prefix length
	// spec.cidrs: Invalid value: "10.0.0.1/24": must not have bits set beyond the prefix length
	// spec.cidrs: Invalid value: "::ffff:10.0.0.0/104": must not have an IPv4-mapped IPv6 address
	// spec.cidrs: Invalid value: "2001:DB8::/64": must be in canonical form ("2001:db8::/64")
	// spec.cidrs: Invalid value: "10.0.0.0": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)
}

func ExampleCIDR_Validate() {
	ok := cidrset.CIDR{Name: "dual", Prefixes: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00:10::/108"),
	}}
	fmt.Println(ok.Validate())

	bad := cidrset.CIDR{Name: "newcidr1", Prefixes: []netip.Prefix{
		netip.MustParsePrefix("192.96.0.1/24"), netip.MustParsePrefix("10.0.0.0/8"),
	}}
	err := bad.Validate()
	fmt.Println(errors.Is(err, ipaddress.ErrInvalid))
	fmt.Println(err)
	// Output:
	// <nil>
	// true
	// spec.cidrs[0]: Invalid value: "192.96.0.1/24": must not have bits set beyond the prefix length
	// spec.cidrs: Invalid value: "192.96.0.1/24, 10.0.0.0/8": may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64
}

func ExampleValidateUpdate() {
	old := cidrset.CIDR{Name: "kubernetes", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/28")}}

	dual := old.Clone()
	dual.Prefixes = append(dual.Prefixes, netip.MustParsePrefix("fd00:10::/108"))
	fmt.Println(cidrset.ValidateUpdate(old, dual))

	moved := old.Clone()
	moved.Prefixes[0] = netip.MustParsePrefix("192.168.7.0/24")
	fmt.Println(cidrset.ValidateUpdate(old, moved))
	// Output:
	// <nil>
	// spec.cidrs[0]: Invalid value: "192.168.7.0/24": field is immutable
}

func ExampleValidateName() {
	fmt.Println(cidrset.ValidateName("newcidr1"))
	fmt.Println(cidrset.ValidateName("New_CIDR"))
	// Output:
	// <nil>
	// metadata.name: Invalid value: "New_CIDR": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')
}
