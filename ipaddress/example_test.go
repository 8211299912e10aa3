package ipaddress_test

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/netipam/netipam/ipaddress"
)

func ExampleParseAddr() {
	for _, s := range []string{"10.96.0.1", "2001:db8::1", "010.96.0.1", "2001:db8:0:0::1", "::ffff:10.96.0.1", "fe80::1%eth0"} {
		a, err := ipaddress.ParseAddr(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println("ok", a)
	}
	// Output:
	// ok 10.96.0.1
	// ok 2001:db8::1
	// metadata.name: Invalid value: "010.96.0.1": must not have leading 0s
	// metadata.name: Invalid value: "2001:db8:0:0::1": must be in canonical form ("2001:db8::1")
	// metadata.name: Invalid value: "::ffff:10.96.0.1": must not be an IPv4-mapped IPv6 address
	// metadata.name: Invalid value: "fe80::1%eth0": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)
}

func ExampleValidateAddr() {
	fmt.Println(ipaddress.ValidateAddr(netip.MustParseAddr("10.96.0.1")))
	fmt.Println(ipaddress.ValidateAddr(netip.Addr{}))
	// Output:
	// <nil>
	// metadata.name: Required value: must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)
}

func ExampleParentRef_String() {
	fmt.Println(ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"})
	fmt.Println(ipaddress.ParentRef{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "infra", Name: "gw"})
	fmt.Println(ipaddress.ParentRef{Resource: "nodes", Name: "node-1"})
	// Output:
	// services/default/kubernetes
	// gateways.gateway.networking.k8s.io/infra/gw
	// nodes/node-1
}

func ExampleParseParentRef() {
	p, err := ipaddress.ParseParentRef("gateways.gateway.networking.k8s.io/infra/gw")
	fmt.Printf("group=%q resource=%q namespace=%q name=%q %v\n", p.Group, p.Resource, p.Namespace, p.Name, err)
	p, err = ipaddress.ParseParentRef("nodes/node-1")
	fmt.Printf("group=%q resource=%q namespace=%q name=%q %v\n", p.Group, p.Resource, p.Namespace, p.Name, err)
	_, err = ipaddress.ParseParentRef("services//kubernetes")
	fmt.Println(err)
	_, err = ipaddress.ParseParentRef("services/default/kube_dns")
	fmt.Println(err)
	// Output:
	// group="gateway.networking.k8s.io" resource="gateways" namespace="infra" name="gw" <nil>
	// group="" resource="nodes" namespace="" name="node-1" <nil>
	// spec.parentRef: Invalid value: "services//kubernetes": must be of the form resource[.group]/[namespace/]name
	// spec.parentRef.name: Invalid value: "kube_dns": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')
}

func ExampleIPAddress_Validate() {
	rec := ipaddress.IPAddress{
		Addr:   netip.MustParseAddr("::ffff:10.96.0.10"),
		Parent: ipaddress.ParentRef{Resource: "Services", Namespace: "kube-system"},
	}
	err := rec.Validate()
	fmt.Println(errors.Is(err, ipaddress.ErrInvalid))
	var fe *ipaddress.FieldError
	if errors.As(err, &fe) {
		fmt.Println("first:", fe.Field)
	}
	fmt.Println(err)
	// Output:
	// true
	// first: metadata.name
	// metadata.name: Invalid value: "::ffff:10.96.0.10": must not be an IPv4-mapped IPv6 address
	// spec.parentRef.resource: Invalid value: "Services": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')
	// spec.parentRef.name: Required value
}

func ExampleFieldErrors() {
	err := ipaddress.ParentRef{Resource: "Services"}.Validate()
	for _, fe := range ipaddress.FieldErrors(err) {
		fmt.Println(fe.Field)
	}
	// Output:
	// spec.parentRef.resource
	// spec.parentRef.name
}

func ExampleIPAddress_String() {
	rec := ipaddress.IPAddress{
		Addr:     netip.MustParseAddr("10.96.0.1"),
		Parent:   ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"},
		Revision: 4,
	}
	fmt.Println(rec)
	fmt.Printf("%v is %s, family %s\n", rec, rec.Name(), rec.Family())
	// Output:
	// 10.96.0.1 services/default/kubernetes
	// 10.96.0.1 services/default/kubernetes is 10.96.0.1, family IPv4
}

// An allocator checks each owner once: the ValidParentRef it gets is its
// store's proof that the owner needs no checking again.
func ExampleParentRefChecker() {
	var c ipaddress.ParentRefChecker
	for _, p := range []ipaddress.ParentRef{
		{Resource: "services", Namespace: "default", Name: "kubernetes"},
		{Resource: "services", Namespace: "default", Name: "Web"},
	} {
		if v, ok := c.Check(p); ok {
			fmt.Println("valid:", v.ParentRef())
			continue
		}
		fmt.Println(p.Validate())
	}
	// Output:
	// valid: services/default/kubernetes
	// spec.parentRef.name: Invalid value: "Web": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')
}
