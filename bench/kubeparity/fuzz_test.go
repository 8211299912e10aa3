// Package kubeparity checks netipam's validation against the Kubernetes
// code it follows (SPEC §1): k8s.io/apimachinery's IsValidIP, IsValidCIDR
// and DNS-1123 checks, and k8s.io/utils' ParseIPSloppy for legacy
// spellings. It lives in the bench module, which already depends on them.
package kubeparity

import (
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	netutils "k8s.io/utils/net"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
)

// addrSeeds and prefixSeeds are edge cases of both parsers: leading zeros
// in every position, IPv4-mapped and -compatible forms, zones, upper case,
// uncompressed or wrongly compressed IPv6, out-of-range values, empty.
var addrSeeds = []string{
	"", "10.9.8.7", "0.0.0.0", "255.255.255.255", "010.0.0.1", "10.0.0.01", "1.2.3.0400",
	"0000000010.0.0.1", "256.0.0.1", "1.2.3", "1.2.3.4.5", "1.2.3.4 ", " 1.2.3.4",
	"2001:db8::ffff", "::", "::1", "2001:db8:0:0::1", "2001:DB8::1", "2001:db8::0001",
	"2001:db8::00001", "00000fd00::5", "fd00::10000", "::ffff:10.0.0.1", "::FFFF:10.0.0.1",
	"::ffff:010.0.0.1", "0:0:0:0:0:ffff:a00:1", "::1.2.3.4", "::1.2.3.04", "fe80::1%eth0",
	"fe80::1%", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7::", "1:2:3:4:5:6:7:8:9", "::1:2:3:4:5:6:7",
	"1:2:3:4:5:6:1.2.3.4", "1:2:3:4:5:1.2.3.4", ":::", "1::2::3", "[::1]", "0x1.2.3.4",
}

var prefixSeeds = []string{
	"", "/", "10.96.0.0/28", "10.96.0.0/028", "010.96.0.0/28", "10.0.0.1/24", "10.0.0.0/33",
	"10.0.0.0/00", "0.0.0.0/0", "10.0.0.0/8/8", "10.0.0.0/-8", "10.0.0.0/+8", "10.0.0.0",
	"::/0", "fd00:10::/108", "2001:DB8::/64", "2001:db8:0::/64", "2001:db8::/0064",
	"fd00:0000a::/32", "2001:db8::00001/128", "::ffff:10.0.0.0/104", "::ffff:010.0.0.0/104",
	"::ffff:10.0.0.0/8", "::1.2.3.0/120", "fe80::%eth0/64", "2001:db8::/129", "2001:db8::1/64",
	"0000000010.0.0.0/8", "10.0.0.0/0000000000000000000008",
}

// refDetail returns the detail of the first error of a reference check.
func refDetail(errs field.ErrorList) string {
	if len(errs) == 0 {
		return ""
	}
	return errs[0].Detail
}

// oneFieldError fails unless err is exactly one *ipaddress.FieldError
// matching ipaddress.ErrInvalid, and returns it.
func oneFieldError(t *testing.T, in string, err error) *ipaddress.FieldError {
	t.Helper()
	if !errors.Is(err, ipaddress.ErrInvalid) {
		t.Fatalf("%q: error %v does not match ErrInvalid", in, err)
	}
	fes := ipaddress.FieldErrors(err)
	if len(fes) != 1 {
		t.Fatalf("%q: %d field errors (%v), the reference reports one", in, len(fes), err)
	}
	return fes[0]
}

// FuzzParseAddrAgreesWithKubernetes: ParseAddr accepts exactly what
// validation.IsValidIP accepts (the IPAddress name rule of SPEC §1), with
// the reference's detail text when it refuses, and the address it returns
// is the one ParseIPSloppy reads. ParseAddrLegacy reads what ParseIPSloppy
// reads (both without a zone, which ParseAddrLegacy documents dropping).
func FuzzParseAddrAgreesWithKubernetes(f *testing.F) {
	for _, s := range addrSeeds {
		f.Add(s)
	}
	path := field.NewPath("metadata", "name")
	f.Fuzz(func(t *testing.T, s string) {
		ref := validation.IsValidIP(path, s)
		a, err := ParseAddrNoPanic(s)
		switch {
		case len(ref) == 0 && err != nil:
			t.Fatalf("ParseAddr(%q) refuses it (%v); IsValidIP accepts it", s, err)
		case len(ref) != 0 && err == nil:
			t.Fatalf("ParseAddr(%q) = %v; IsValidIP refuses it: %v", s, a, ref.ToAggregate())
		case err != nil:
			fe := oneFieldError(t, s, err)
			if fe.Detail != refDetail(ref) {
				t.Fatalf("ParseAddr(%q): detail %q; IsValidIP says %q", s, fe.Detail, refDetail(ref))
			}
			if fe.Value != s && !(s == "" && fe.Required) {
				t.Fatalf("ParseAddr(%q): the error names the value %q", s, fe.Value)
			}
		default:
			ip := netutils.ParseIPSloppy(s)
			if got, ok := netip.AddrFromSlice(ip); !ok || got.Unmap() != a {
				t.Fatalf("ParseAddr(%q) = %v; ParseIPSloppy reads %v", s, a, ip)
			}
		}

		if strings.Contains(s, "%") {
			return // ParseAddrLegacy drops a zone; the legacy parser refused one
		}
		legacy, ok := ipaddress.ParseAddrLegacy(s)
		ip := netutils.ParseIPSloppy(s)
		if ok != (ip != nil) {
			t.Fatalf("ParseAddrLegacy(%q) = %v, %v; ParseIPSloppy reads %v", s, legacy, ok, ip)
		}
		if ok {
			want, _ := netip.AddrFromSlice(ip)
			if legacy != want.Unmap() {
				t.Fatalf("ParseAddrLegacy(%q) = %v; ParseIPSloppy reads %v", s, legacy, want)
			}
		}
	})
}

// ParseAddrNoPanic is ipaddress.ParseAddr, named so that a panic in it is
// reported as the library's, not the reference's.
func ParseAddrNoPanic(s string) (netip.Addr, error) { return ipaddress.ParseAddr(s) }

// FuzzParsePrefixAgreesWithKubernetes: cidrset.ParsePrefix accepts exactly
// what validation.IsValidCIDR accepts (the ServiceCIDR rule of SPEC §1),
// with the reference's detail text, and the prefix it returns is the one
// ParseCIDRSloppy reads.
func FuzzParsePrefixAgreesWithKubernetes(f *testing.F) {
	for _, s := range prefixSeeds {
		f.Add(s)
	}
	path := field.NewPath("spec", "cidrs")
	f.Fuzz(func(t *testing.T, s string) {
		ref := validation.IsValidCIDR(path, s)
		p, err := cidrset.ParsePrefix(s)
		switch {
		case len(ref) == 0 && err != nil:
			t.Fatalf("ParsePrefix(%q) refuses it (%v); IsValidCIDR accepts it", s, err)
		case len(ref) != 0 && err == nil:
			t.Fatalf("ParsePrefix(%q) = %v; IsValidCIDR refuses it: %v", s, p, ref.ToAggregate())
		case err != nil:
			fe := oneFieldError(t, s, err)
			if fe.Detail != refDetail(ref) {
				t.Fatalf("ParsePrefix(%q): detail %q; IsValidCIDR says %q", s, fe.Detail, refDetail(ref))
			}
			if fe.Value != s || fe.Required {
				t.Fatalf("ParsePrefix(%q): the error names the value %q (required %v)", s, fe.Value, fe.Required)
			}
		default:
			_, ipnet, rerr := netutils.ParseCIDRSloppy(s)
			if rerr != nil {
				t.Fatalf("ParseCIDRSloppy(%q): %v, after IsValidCIDR accepted it", s, rerr)
			}
			ones, _ := ipnet.Mask.Size()
			a, _ := netip.AddrFromSlice(ipnet.IP)
			if a.Unmap() != p.Addr() || ones != p.Bits() {
				t.Fatalf("ParsePrefix(%q) = %v; ParseCIDRSloppy reads %v", s, p, ipnet)
			}
		}
	})
}

// FuzzDNS1123AgreesWithKubernetes: the name checks of metadata.name and of
// a ParentRef's fields accept exactly what IsDNS1123Label and
// IsDNS1123Subdomain accept, and report as many problems (too long, wrong
// characters), with the reference's text before its regex suffix.
func FuzzDNS1123AgreesWithKubernetes(f *testing.F) {
	for _, s := range []string{
		"", "a", "kubernetes", "my-name", "123-abc", "-a", "a-", "a.b", "a..b", "a.-b", "a-.b", ".a", "a.",
		"A", "a_b", "é", "a\x00", strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 253),
		strings.Repeat("a", 254), strings.Repeat("a.", 126) + "a", strings.Repeat("-", 254),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		compare := func(kind string, ref []string, err error) {
			t.Helper()
			if (len(ref) == 0) != (err == nil) {
				t.Fatalf("%s %q: netipam %v; reference %q", kind, s, err, ref)
			}
			if err == nil || s == "" {
				return // an empty value is "Required" here, as metadata.name is in the reference
			}
			fes := ipaddress.FieldErrors(err)
			if len(fes) != len(ref) {
				t.Fatalf("%s %q: %d errors (%v); reference %d: %q", kind, s, len(fes), err, len(ref), ref)
			}
			for i, fe := range fes {
				want, _, _ := strings.Cut(ref[i], " (e.g. ")
				if !strings.HasPrefix(fe.Detail, want) {
					t.Fatalf("%s %q: error %d is %q; reference %q", kind, s, i, fe.Detail, ref[i])
				}
			}
		}
		compare("label", validation.IsDNS1123Label(s), ipaddress.ValidateDNS1123Label("f", s))
		compare("subdomain", validation.IsDNS1123Subdomain(s), ipaddress.ValidateDNS1123Subdomain("f", s))
		if err := cidrset.ValidateName(s); (err == nil) != (len(validation.IsDNS1123Subdomain(s)) == 0) {
			t.Fatalf("cidrset.ValidateName(%q) = %v; IsDNS1123Subdomain %q", s, err, validation.IsDNS1123Subdomain(s))
		}
	})
}

// TestLabelWithDotsMessage: a label that is a valid subdomain gets the
// reference's "must not contain dots".
func TestLabelWithDotsMessage(t *testing.T) {
	err := ipaddress.ValidateDNS1123Label("spec.parentRef.namespace", "a.b")
	fes := ipaddress.FieldErrors(err)
	if len(fes) != 1 || fes[0].Detail != "must not contain dots" {
		t.Errorf("ValidateDNS1123Label(%q) = %v; the reference says %q", "a.b", err, validation.IsDNS1123Label("a.b"))
	}
}

// refServiceCIDRErrors is the spec.cidrs part of Kubernetes'
// ValidateServiceCIDR (pkg/apis/networking/validation, v1.34), which the
// bench module cannot import: the count checks, IsValidCIDR on each entry,
// and the one-per-family check on the families utils/net gives the
// strings (an IPv4-mapped prefix counts as IPv4 there).
func refServiceCIDRErrors(cidrs []string) []string {
	path := field.NewPath("spec", "cidrs")
	switch {
	case len(cidrs) == 0:
		return []string{"spec.cidrs: at least one CIDR required"}
	case len(cidrs) > 2:
		return []string{"spec.cidrs: may only hold up to 2 values"}
	}
	var out []string
	for i, s := range cidrs {
		for _, e := range validation.IsValidCIDR(path.Index(i), s) {
			out = append(out, e.Field+": "+e.Detail)
		}
	}
	if len(cidrs) == 2 {
		f0, f1 := netutils.IPFamilyOfCIDRString(cidrs[0]), netutils.IPFamilyOfCIDRString(cidrs[1])
		if f0 == f1 && f0 != netutils.IPFamilyUnknown {
			out = append(out, "spec.cidrs: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64")
		}
	}
	return out
}

// cidrErrors lists the spec.cidrs errors of CIDR.Validate as
// "field: detail".
func cidrErrors(c cidrset.CIDR) []string {
	var out []string
	for _, fe := range ipaddress.FieldErrors(c.Validate()) {
		if strings.HasPrefix(fe.Field, "spec.cidrs") {
			out = append(out, fe.Field+": "+fe.Detail)
		}
	}
	return out
}

// FuzzValidateCIDRAgreesWithKubernetes: for prefixes given in the form
// netip prints (so that the text is what the CIDR holds), CIDR.Validate
// reports on spec.cidrs exactly the errors ValidateServiceCIDR reports.
func FuzzValidateCIDRAgreesWithKubernetes(f *testing.F) {
	f.Add("10.0.0.0/8", "fd00::/64", "")
	f.Add("10.0.0.0/8", "11.0.0.0/8", "")
	f.Add("10.0.0.0/8", "::ffff:10.0.0.0/104", "")
	f.Add("::ffff:10.0.0.0/104", "fd00::/64", "")
	f.Add("10.0.0.1/8", "fd00::1/64", "fd01::/64")
	f.Add("", "", "")
	f.Fuzz(func(t *testing.T, a, b, c string) {
		var strs []string
		var ps []netip.Prefix
		for _, s := range []string{a, b, c} {
			if s == "" {
				continue
			}
			p, err := netip.ParsePrefix(s)
			if err != nil || p.String() != s {
				return
			}
			strs, ps = append(strs, s), append(ps, p)
		}
		got := cidrErrors(cidrset.CIDR{Name: "x", Prefixes: ps})
		want := refServiceCIDRErrors(strs)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("prefixes %q:\nnetipam:   %q\nreference: %q", strs, got, want)
		}
	})
}

// TestMappedPrefixFamily: with an IPv4-mapped prefix, the one-per-family
// error is the reference's, which counts such a prefix as IPv4.
func TestMappedPrefixFamily(t *testing.T) {
	for _, strs := range [][]string{{"10.0.0.0/8", "::ffff:10.0.0.0/104"}, {"::ffff:10.0.0.0/104", "fd00::/64"}} {
		var ps []netip.Prefix
		for _, s := range strs {
			ps = append(ps, netip.MustParsePrefix(s))
		}
		got, want := cidrErrors(cidrset.CIDR{Name: "x", Prefixes: ps}), refServiceCIDRErrors(strs)
		if !slices.Equal(got, want) {
			t.Errorf("prefixes %q:\nnetipam:   %q\nreference: %q", strs, got, want)
		}
	}
}
