package cidrset

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/netipam/netipam/ipaddress"
)

const (
	msgInvalidCIDR  = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
	msgLeadingZeros = "must not have leading 0s in IP or prefix length"
	msgIPv4Mapped   = "must not have an IPv4-mapped IPv6 address"
	msgBitsBeyond   = "must not have bits set beyond the prefix length"
	msgNoCIDR       = "at least one CIDR required"
	msgTooMany      = "may only hold up to 2 values"
	msgOnePerFamily = "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"
	msgImmutable    = "field is immutable"
	msgSubdomain    = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
)

type fe = ipaddress.FieldError

// fieldErrors returns every field error in err, in order, checking that
// err matches ipaddress.ErrInvalid and that nothing but field errors is in it.
func fieldErrors(t *testing.T, err error) []fe {
	t.Helper()
	if err == nil {
		return nil
	}
	if !errors.Is(err, ipaddress.ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
	}
	var out []fe
	for _, e := range ipaddress.FieldErrors(err) {
		out = append(out, *e)
	}
	if len(out) == 0 {
		t.Errorf("no field error in %v", err)
	}
	return out
}

func wantErrors(t *testing.T, what string, err error, want ...fe) {
	t.Helper()
	got := fieldErrors(t, err)
	if len(got) != len(want) {
		t.Errorf("%s: got %d errors %+v, want %d %+v", what, len(got), got, len(want), want)
		return
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s: error %d = %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

func pfx(ss ...string) []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range ss {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}

func TestParsePrefixAcceptsCanonicalPrefixes(t *testing.T) {
	for _, s := range []string{
		"10.96.0.0/28", "192.96.0.0/24", "10.0.0.0/8", "0.0.0.0/0", "10.0.0.1/32",
		"fd00:10::/108", "2001:db8::/64", "::/0", "2001:db8::1/128", "2001:db8:0:1::/64",
	} {
		p, err := ParsePrefix(s)
		if err != nil {
			t.Errorf("ParsePrefix(%q): %v", s, err)
			continue
		}
		if p.String() != s || p != netip.MustParsePrefix(s) {
			t.Errorf("ParsePrefix(%q) = %v", s, p)
		}
	}
}

func TestPrefixMustBeAValidCIDR(t *testing.T) {
	for _, s := range []string{
		"", "foo", "10.0.0.0", "10.0.0.0/", "10.0.0.0/33", "2001:db8::/129", "10.0.0/8",
		"10.0.0.256/32", "/8", "10.0.0.0/-1", "10.0.0.0/+8", "10.0.0.0/ 8", " 10.0.0.0/8",
		"fe80::%eth0/64", "10.0.0.0/8/8", "10.0.0.0/0x8", "2001:db8:::/64", "010.0.0.0/33",
		"10.0.0.0/0033",
	} {
		p, err := ParsePrefix(s)
		wantErrors(t, s, err, fe{Field: "spec.cidrs", Value: s, Detail: msgInvalidCIDR})
		if p.IsValid() {
			t.Errorf("ParsePrefix(%q) returned %v with an error", s, p)
		}
	}
}

func TestPrefixMustNotHaveLeadingZeros(t *testing.T) {
	for _, s := range []string{
		"010.0.0.0/8", "10.0.0.0/08", "10.000.0.0/16", "10.0.0.0/00", "2001:db8::/064",
		"::ffff:010.0.0.0/104", "10.0.0.1/024", "0010.0.0.0/8",
		"2001:db8::00001/128", "fd00:0000a::/32", "02001:db8::/032",
	} {
		_, err := ParsePrefix(s)
		wantErrors(t, s, err, fe{Field: "spec.cidrs", Value: s, Detail: msgLeadingZeros})
	}
}

func TestPrefixMustNotHaveIPv4MappedAddress(t *testing.T) {
	for _, s := range []string{"::ffff:10.0.0.0/104", "::ffff:10.0.0.1/104", "::ffff:0.0.0.0/96", "::FFFF:10.0.0.0/104"} {
		_, err := ParsePrefix(s)
		wantErrors(t, s, err, fe{Field: "spec.cidrs", Value: s, Detail: msgIPv4Mapped})
	}
	wantErrors(t, "ValidatePrefix", ValidatePrefix(netip.MustParsePrefix("::ffff:10.0.0.0/104")),
		fe{Field: "spec.cidrs", Value: "::ffff:10.0.0.0/104", Detail: msgIPv4Mapped})
}

func TestPrefixMustNotHaveBitsBeyondLength(t *testing.T) {
	for _, s := range []string{"10.0.0.1/24", "10.96.0.1/28", "192.168.1.0/16", "0.0.0.1/0", "2001:db8::1/64", "::1/0", "2001:DB8::1/64"} {
		_, err := ParsePrefix(s)
		wantErrors(t, s, err, fe{Field: "spec.cidrs", Value: s, Detail: msgBitsBeyond})
	}
	wantErrors(t, "ValidatePrefix", ValidatePrefix(netip.MustParsePrefix("10.0.0.1/24")),
		fe{Field: "spec.cidrs", Value: "10.0.0.1/24", Detail: msgBitsBeyond})
}

func TestPrefixMustBeInCanonicalForm(t *testing.T) {
	for _, tc := range []struct{ in, canonical string }{
		{"2001:DB8::/64", "2001:db8::/64"},
		{"2001:db8:0::/64", "2001:db8::/64"},
		{"2001:0db8::/64", "2001:db8::/64"},
		{"2001:db8:0:0:0:0:0:0/64", "2001:db8::/64"},
		{"FD00:10::/108", "fd00:10::/108"},
		{"0::/0", "::/0"},
	} {
		_, err := ParsePrefix(tc.in)
		wantErrors(t, tc.in, err, fe{Field: "spec.cidrs", Value: tc.in, Detail: `must be in canonical form ("` + tc.canonical + `")`})
	}
}

func TestValidatePrefixRejectsTheZeroPrefix(t *testing.T) {
	wantErrors(t, "zero", ValidatePrefix(netip.Prefix{}), fe{Field: "spec.cidrs", Detail: msgInvalidCIDR, Required: true})
	if err := ValidatePrefix(netip.MustParsePrefix("10.0.0.0/8")); err != nil {
		t.Error(err)
	}
}

func TestCIDRNameMustBeDNS1123Subdomain(t *testing.T) {
	for _, n := range []string{"kubernetes", "newcidr1", "dual", "a.b-c.d", "0", strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)} {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q): %v", n, err)
		}
	}
	wantErrors(t, "empty", ValidateName(""), fe{Field: "metadata.name", Required: true})
	for _, n := range []string{"Kubernetes", "new_cidr", "-a", "a-", ".a", "a.", "a..b", "a.-b", "a b", "a/b"} {
		wantErrors(t, n, ValidateName(n), fe{Field: "metadata.name", Value: n, Detail: msgSubdomain})
	}
	long := strings.Repeat("a", 254)
	wantErrors(t, "254 chars", ValidateName(long), fe{Field: "metadata.name", Value: long, Detail: "must be no more than 253 characters"})
}

func TestCIDRRequiresAtLeastOnePrefix(t *testing.T) {
	for _, ps := range [][]netip.Prefix{nil, {}} {
		wantErrors(t, "no prefix", CIDR{Name: "c", Prefixes: ps}.Validate(), fe{Field: "spec.cidrs", Detail: msgNoCIDR, Required: true})
	}
}

func TestCIDRMayHoldAtMostTwoPrefixes(t *testing.T) {
	c := CIDR{Name: "c", Prefixes: pfx("10.0.0.0/8", "fd00::/64", "192.168.0.0/16")}
	wantErrors(t, "three", c.Validate(), fe{Field: "spec.cidrs", Value: "10.0.0.0/8, fd00::/64, 192.168.0.0/16", Detail: msgTooMany})
}

func TestCIDRPrefixesMustEachBeValid(t *testing.T) {
	c := CIDR{Name: "c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/24"), {}}}
	wantErrors(t, "two bad", c.Validate(),
		fe{Field: "spec.cidrs[0]", Value: "10.0.0.1/24", Detail: msgBitsBeyond},
		fe{Field: "spec.cidrs[1]", Detail: msgInvalidCIDR, Required: true},
	)
	// The reference reads a mapped prefix's family as IPv4: beside an
	// IPv6 prefix it is refused only for being mapped, beside an IPv4 one
	// for the family too.
	c.Prefixes = pfx("fd00::/64", "::ffff:10.0.0.0/104")
	wantErrors(t, "mapped beside IPv6", c.Validate(),
		fe{Field: "spec.cidrs[1]", Value: "::ffff:10.0.0.0/104", Detail: msgIPv4Mapped},
	)
	c.Prefixes = pfx("10.0.0.0/8", "::ffff:10.0.0.0/104")
	wantErrors(t, "mapped beside IPv4", c.Validate(),
		fe{Field: "spec.cidrs[1]", Value: "::ffff:10.0.0.0/104", Detail: msgIPv4Mapped},
		fe{Field: "spec.cidrs", Value: "10.0.0.0/8, ::ffff:10.0.0.0/104", Detail: msgOnePerFamily},
	)
}

func TestCIDRMayHoldOnePrefixPerFamily(t *testing.T) {
	for _, ps := range [][]netip.Prefix{
		pfx("10.96.0.0/28"), pfx("fd00:10::/108"), pfx("10.0.0.0/16", "fd00:10::/108"), pfx("fd00:10::/108", "10.0.0.0/16"),
	} {
		if err := (CIDR{Name: "dual", Prefixes: ps}).Validate(); err != nil {
			t.Errorf("%v: %v", ps, err)
		}
	}
	for _, tc := range []struct {
		ps    []netip.Prefix
		value string
	}{
		{pfx("10.0.0.0/16", "192.168.0.0/24"), "10.0.0.0/16, 192.168.0.0/24"},
		{pfx("fd00::/64", "2001:db8::/64"), "fd00::/64, 2001:db8::/64"},
		{pfx("10.0.0.0/16", "10.0.0.0/16"), "10.0.0.0/16, 10.0.0.0/16"},
	} {
		wantErrors(t, tc.value, CIDR{Name: "c", Prefixes: tc.ps}.Validate(), fe{Field: "spec.cidrs", Value: tc.value, Detail: msgOnePerFamily})
	}
}

func TestCIDRValidateReportsNameAndPrefixProblemsTogether(t *testing.T) {
	err := CIDR{Name: "Bad_Name"}.Validate()
	wantErrors(t, "both", err,
		fe{Field: "metadata.name", Value: "Bad_Name", Detail: msgSubdomain},
		fe{Field: "spec.cidrs", Detail: msgNoCIDR, Required: true},
	)
	want := `metadata.name: Invalid value: "Bad_Name": ` + msgSubdomain + "\nspec.cidrs: Required value: " + msgNoCIDR
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestCIDRNameIsImmutable(t *testing.T) {
	old := CIDR{Name: "a", Prefixes: pfx("10.0.0.0/8")}
	upd := CIDR{Name: "b", Prefixes: pfx("10.0.0.0/8")}
	wantErrors(t, "rename", ValidateUpdate(old, upd), fe{Field: "metadata.name", Value: "b", Detail: msgImmutable})
	upd.Name = ""
	wantErrors(t, "rename to empty", ValidateUpdate(old, upd), fe{Field: "metadata.name", Required: true})
}

func TestCIDRPrefixesAreImmutable(t *testing.T) {
	old := CIDR{Name: "c", Prefixes: pfx("10.0.0.0/16", "fd00::/64")}
	for _, tc := range []struct {
		name string
		upd  []netip.Prefix
		want []fe
	}{
		{"unchanged", pfx("10.0.0.0/16", "fd00::/64"), nil},
		{"first changed", pfx("10.1.0.0/16", "fd00::/64"), []fe{{Field: "spec.cidrs[0]", Value: "10.1.0.0/16", Detail: msgImmutable}}},
		{"both changed", pfx("10.1.0.0/16", "fd01::/64"), []fe{
			{Field: "spec.cidrs[0]", Value: "10.1.0.0/16", Detail: msgImmutable},
			{Field: "spec.cidrs[1]", Value: "fd01::/64", Detail: msgImmutable},
		}},
		{"swapped", pfx("fd00::/64", "10.0.0.0/16"), []fe{
			{Field: "spec.cidrs[0]", Value: "fd00::/64", Detail: msgImmutable},
			{Field: "spec.cidrs[1]", Value: "10.0.0.0/16", Detail: msgImmutable},
		}},
		{"dual to single", pfx("10.0.0.0/16"), []fe{{Field: "spec.cidrs", Value: "10.0.0.0/16", Detail: msgImmutable}}},
		{"emptied", nil, []fe{{Field: "spec.cidrs", Detail: msgNoCIDR, Required: true}}},
		{"zeroed", []netip.Prefix{{}, netip.MustParsePrefix("fd00::/64")}, []fe{{Field: "spec.cidrs[0]", Detail: msgInvalidCIDR, Required: true}}},
	} {
		err := ValidateUpdate(old, CIDR{Name: "c", Prefixes: tc.upd})
		wantErrors(t, tc.name, err, tc.want...)
	}
	single := CIDR{Name: "c", Prefixes: pfx("10.0.0.0/16")}
	wantErrors(t, "single changed", ValidateUpdate(single, CIDR{Name: "c", Prefixes: pfx("10.0.0.0/15")}),
		fe{Field: "spec.cidrs[0]", Value: "10.0.0.0/15", Detail: msgImmutable})
}

func TestCIDRSingleToDualStackIsTheOnlyAllowedUpdate(t *testing.T) {
	for _, old := range []CIDR{
		{Name: "kubernetes", Prefixes: pfx("10.96.0.0/28")},
		{Name: "kubernetes", Prefixes: pfx("fd00:10::/108")},
	} {
		other := "fd00:10::/108"
		if old.Prefixes[0].Addr().Is6() {
			other = "10.96.0.0/28"
		}
		upd := CIDR{Name: old.Name, Prefixes: append(old.Clone().Prefixes, netip.MustParsePrefix(other))}
		if err := ValidateUpdate(old, upd); err != nil {
			t.Errorf("%v -> %v: %v", old.Prefixes, upd.Prefixes, err)
		}
	}
	old := CIDR{Name: "kubernetes", Prefixes: pfx("10.96.0.0/28")}
	for _, tc := range []struct {
		name string
		upd  []netip.Prefix
		want []fe
	}{
		{"added family in front", pfx("fd00:10::/108", "10.96.0.0/28"), []fe{
			{Field: "spec.cidrs[0]", Value: "fd00:10::/108", Detail: msgImmutable},
		}},
		{"added the same family", pfx("10.96.0.0/28", "192.168.0.0/24"), []fe{
			{Field: "spec.cidrs", Value: "10.96.0.0/28, 192.168.0.0/24", Detail: msgOnePerFamily},
		}},
		{"added an invalid prefix", pfx("10.96.0.0/28", "fd00::1/64"), []fe{
			{Field: "spec.cidrs[1]", Value: "fd00::1/64", Detail: msgBitsBeyond},
		}},
		{"added two", pfx("10.96.0.0/28", "fd00::/64", "fd01::/64"), []fe{
			{Field: "spec.cidrs", Value: "10.96.0.0/28, fd00::/64, fd01::/64", Detail: msgImmutable},
			{Field: "spec.cidrs", Value: "10.96.0.0/28, fd00::/64, fd01::/64", Detail: msgTooMany},
		}},
	} {
		wantErrors(t, tc.name, ValidateUpdate(old, CIDR{Name: old.Name, Prefixes: tc.upd}), tc.want...)
	}
}

func TestValidateUpdateValidatesTheUpdatedCIDR(t *testing.T) {
	old := CIDR{Name: "c", Prefixes: pfx("10.0.0.1/24")} // stored before stricter rules
	wantErrors(t, "unchanged but invalid", ValidateUpdate(old, old.Clone()),
		fe{Field: "spec.cidrs[0]", Value: "10.0.0.1/24", Detail: msgBitsBeyond})
}

// An empty CIDR string is a value given, and wrong, as the reference
// (IsValidCIDR) says; a CIDR with no prefix at all is missing one.
func TestAnEmptyPrefixIsInvalidNotMissing(t *testing.T) {
	_, err := ParsePrefix("")
	if want := `spec.cidrs: Invalid value: "": ` + msgInvalidCIDR; err == nil || err.Error() != want {
		t.Errorf("ParsePrefix(\"\") = %v, want %s", err, want)
	}
	err = CIDR{Name: "c"}.Validate()
	if want := "spec.cidrs: Required value: " + msgNoCIDR; err == nil || err.Error() != want {
		t.Errorf("a CIDR with no prefix: %v, want %s", err, want)
	}
}
