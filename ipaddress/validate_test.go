package ipaddress

import (
	"errors"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

const (
	msgInvalidIP    = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
	msgLeadingZeros = "must not have leading 0s"
	msgIPv4Mapped   = "must not be an IPv4-mapped IPv6 address"
	msgNoDots       = "must not contain dots"
	msgLabel        = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')"
	msgSubdomain    = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
	msgForm         = "must be of the form resource[.group]/[namespace/]name"
)

// fieldErrors returns every field error in err, in order, checking that
// err matches ErrInvalid and that nothing but field errors is in it.
func fieldErrors(t *testing.T, err error) []FieldError {
	t.Helper()
	if err == nil {
		return nil
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
	}
	var out []FieldError
	for _, e := range FieldErrors(err) {
		out = append(out, *e)
	}
	if len(out) == 0 {
		t.Errorf("no field error in %v", err)
	}
	return out
}

// wantErrors compares the field errors of err with want.
func wantErrors(t *testing.T, what string, err error, want ...FieldError) {
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

func TestFieldErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		err  FieldError
		want string
	}{
		{FieldError{"metadata.name", "010.0.0.1", msgLeadingZeros, false}, `metadata.name: Invalid value: "010.0.0.1": must not have leading 0s`},
		{FieldError{"metadata.name", "a\"b\n", "x", false}, `metadata.name: Invalid value: "a\"b\n": x`},
		{FieldError{"spec.parentRef.name", "", "", true}, `spec.parentRef.name: Required value`},
		{FieldError{"spec.cidrs", "", "at least one CIDR required", true}, `spec.cidrs: Required value: at least one CIDR required`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %s, want %s", got, tc.want)
		}
	}
}

// A value longer than any valid name is printed cut, with its length:
// the message of a megabyte of input stays short. One as long as the
// longest valid name is printed whole, and a cut never splits a character.
func TestFieldErrorMessageOfAHugeValueIsCut(t *testing.T) {
	whole := strings.Repeat("a", 253)
	if got, want := (&FieldError{Field: "f", Value: whole, Detail: "d"}).Error(), `f: Invalid value: "`+whole+`": d`; got != want {
		t.Errorf("a 253-byte value: %s, want it whole", got)
	}
	huge := strings.Repeat("x", 1<<20)
	got := (&FieldError{Field: "f", Value: huge, Detail: "d"}).Error()
	if want := `f: Invalid value: "` + huge[:256] + `"... (1048576 bytes): d`; got != want {
		t.Errorf("a 1 MiB value: %.120s..., want %.120s...", got, want)
	}
	// 'é' is two bytes: at 255 and 256 of this value, across the cut.
	split := strings.Repeat("a", 255) + "é" + strings.Repeat("b", 100)
	got = (&FieldError{Field: "f", Value: split, Detail: "d"}).Error()
	if want := `f: Invalid value: "` + strings.Repeat("a", 255) + `"... (357 bytes): d`; got != want {
		t.Errorf("a cut inside a character: %s, want %s", got, want)
	}
	// Through validation: a parent name of a megabyte.
	err := ParentRef{Resource: "services", Namespace: "default", Name: huge}.Validate()
	if err == nil || len(err.Error()) > 1024 || !strings.Contains(err.Error(), "(1048576 bytes)") {
		t.Errorf("Validate of a 1 MiB name: %d bytes of message: %.200s", len(fmt.Sprint(err)), fmt.Sprint(err))
	}
}

func TestFieldErrorIsErrInvalid(t *testing.T) {
	var err error = &FieldError{Field: "f", Value: "v", Detail: "d"}
	if !errors.Is(err, ErrInvalid) {
		t.Error("FieldError does not match ErrInvalid")
	}
	if errors.Is(err, errors.New("invalid")) {
		t.Error("FieldError matches an unrelated error")
	}
	joined := errors.Join(err, &FieldError{Field: "g"})
	if !errors.Is(joined, ErrInvalid) {
		t.Error("joined FieldErrors do not match ErrInvalid")
	}
	var fe *FieldError
	if !errors.As(joined, &fe) || fe.Field != "f" {
		t.Errorf("errors.As on joined errors = %v", fe)
	}
}

func TestParseAddrAcceptsCanonicalAddresses(t *testing.T) {
	for _, s := range []string{
		"10.9.8.7", "0.0.0.0", "255.255.255.255", "10.96.0.1", "100.0.0.1",
		"2001:db8::ffff", "::", "::1", "fd00:10::1", "2001:db8:0:1:1:1:1:1",
		"2001:db8::1:0:0:1", "fe80::1", "::102:304",
	} {
		a, err := ParseAddr(s)
		if err != nil {
			t.Errorf("ParseAddr(%q): %v", s, err)
			continue
		}
		if a.String() != s || a != netip.MustParseAddr(s) {
			t.Errorf("ParseAddr(%q) = %v", s, a)
		}
	}
}

func TestAddrMustBeAValidIPAddress(t *testing.T) {
	for _, s := range []string{
		"", "foo", "10.0.0", "10.0.0.256", "10.0.0.1.1", "1.2.3.4/32", " 10.0.0.1",
		"10.0.0.1 ", "2001:db8:::1", "2001:db8::g", "0x0a.0.0.1", "1.2.3.-4",
		"fe80::1%eth0", "fe80::1%", "10.0.0.1%eth0", "1.2.3.0400",
	} {
		a, err := ParseAddr(s)
		wantErrors(t, s, err, FieldError{"metadata.name", s, msgInvalidIP, s == ""})
		if a.IsValid() {
			t.Errorf("ParseAddr(%q) returned %v with an error", s, a)
		}
	}
}

func TestAddrMustNotHaveLeadingZeros(t *testing.T) {
	for _, s := range []string{
		"010.0.0.1", "10.00.0.1", "10.0.0.01", "000.0.0.0", "10.0.0.0001",
		"192.168.001.001", "::ffff:010.0.0.1", "2001:db8::1.2.3.04",
		// An IPv6 group padded past four digits: the legacy parsers read
		// any number of leading zeros there too.
		"2001:db8::00001", "00000fd00::5", "fd00:0:0:0:0:0:0:0000a",
	} {
		_, err := ParseAddr(s)
		wantErrors(t, s, err, FieldError{"metadata.name", s, msgLeadingZeros, s == ""})
	}
}

func TestAddrMustNotBeIPv4Mapped(t *testing.T) {
	for _, s := range []string{"::ffff:10.0.0.1", "::ffff:a00:1", "::FFFF:10.0.0.1", "0::ffff:1.2.3.4"} {
		_, err := ParseAddr(s)
		wantErrors(t, s, err, FieldError{"metadata.name", s, msgIPv4Mapped, s == ""})
	}
}

func TestAddrMustBeInCanonicalForm(t *testing.T) {
	for _, tc := range []struct{ in, canonical string }{
		{"2001:db8:0:0::1", "2001:db8::1"},
		{"2001:DB8::1", "2001:db8::1"},
		{"2001:0db8::1", "2001:db8::1"},
		{"2001:db8:0:0:0:0:0:1", "2001:db8::1"},
		{"0:0:0:0:0:0:0:0", "::"},
		{"2001:db8::0:1", "2001:db8::1"},
		{"2001:db8:0:1:0:0:0:1", "2001:db8:0:1::1"},
		{"::1.2.3.4", "::102:304"},
		{"FD00::", "fd00::"},
	} {
		_, err := ParseAddr(tc.in)
		wantErrors(t, tc.in, err, FieldError{"metadata.name", tc.in, `must be in canonical form ("` + tc.canonical + `")`, tc.in == ""})
	}
}

func TestValidateAddrRejectsInvalidZonedAndMapped(t *testing.T) {
	if err := ValidateAddr(netip.MustParseAddr("10.0.0.1")); err != nil {
		t.Errorf("ValidateAddr(10.0.0.1): %v", err)
	}
	if err := ValidateAddr(netip.MustParseAddr("2001:db8::1")); err != nil {
		t.Errorf("ValidateAddr(2001:db8::1): %v", err)
	}
	wantErrors(t, "zero", ValidateAddr(netip.Addr{}), FieldError{"metadata.name", "", msgInvalidIP, true})
	wantErrors(t, "zone", ValidateAddr(netip.MustParseAddr("fe80::1%eth0")), FieldError{"metadata.name", "fe80::1%eth0", msgInvalidIP, false})
	wantErrors(t, "mapped", ValidateAddr(netip.MustParseAddr("::ffff:10.0.0.1")), FieldError{"metadata.name", "::ffff:10.0.0.1", msgIPv4Mapped, false})
}

func TestParentRefStringForms(t *testing.T) {
	for _, tc := range []struct {
		p    ParentRef
		want string
	}{
		{ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"}, "services/default/kubernetes"},
		{ParentRef{Group: "gateway.networking.k8s.io", Resource: "gateways", Namespace: "ns", Name: "gw"}, "gateways.gateway.networking.k8s.io/ns/gw"},
		{ParentRef{Resource: "nodes", Name: "node-1.example"}, "nodes/node-1.example"},
		{ParentRef{Group: "example.com", Resource: "widgets", Name: "w"}, "widgets.example.com/w"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.p, got, tc.want)
		}
		p, err := ParseParentRef(tc.want)
		if err != nil || p != tc.p {
			t.Errorf("ParseParentRef(%q) = %+v, %v; want %+v", tc.want, p, err, tc.p)
		}
	}
}

func TestParseParentRefRejectsMalformedForms(t *testing.T) {
	for _, s := range []string{
		"", "services", "/", "services/", "/name", "services//name", "services/ns/",
		"/ns/name", "a/b/c/d", ".group/name", "services./name", "services./ns/name",
	} {
		p, err := ParseParentRef(s)
		wantErrors(t, s, err, FieldError{"spec.parentRef", s, msgForm, s == ""})
		if p != (ParentRef{}) {
			t.Errorf("ParseParentRef(%q) returned %+v with an error", s, p)
		}
	}
}

func TestParseParentRefValidatesTheParts(t *testing.T) {
	_, err := ParseParentRef("Services.Example_Group/Default/kubernetes-")
	wantErrors(t, "all parts", err,
		FieldError{"spec.parentRef.group", "Example_Group", msgSubdomain, false},
		FieldError{"spec.parentRef.resource", "Services", msgLabel, false},
		FieldError{"spec.parentRef.namespace", "Default", msgLabel, false},
		FieldError{"spec.parentRef.name", "kubernetes-", msgSubdomain, false},
	)
}

func TestParentRefResourceIsRequiredLabel(t *testing.T) {
	p := ParentRef{Namespace: "default", Name: "kubernetes"}
	wantErrors(t, "empty", p.Validate(), FieldError{"spec.parentRef.resource", "", "", true})
	for _, r := range []string{"Services", "-services", "services-", "serv ices", "services/x", "sérvices"} {
		p.Resource = r
		wantErrors(t, r, p.Validate(), FieldError{"spec.parentRef.resource", r, msgLabel, r == ""})
	}
	// A subdomain that is no label has dots, and the reference says so.
	p.Resource = "services.v1"
	wantErrors(t, p.Resource, p.Validate(), FieldError{"spec.parentRef.resource", p.Resource, msgNoDots, false})
	p.Resource = strings.Repeat("a", 64)
	wantErrors(t, "64 chars", p.Validate(), FieldError{"spec.parentRef.resource", p.Resource, "must be no more than 63 characters", p.Resource == ""})
	p.Resource = strings.Repeat("a", 63)
	if err := p.Validate(); err != nil {
		t.Errorf("63 chars: %v", err)
	}
	p.Resource = strings.Repeat("A", 64)
	wantErrors(t, "64 chars upper", p.Validate(),
		FieldError{"spec.parentRef.resource", p.Resource, "must be no more than 63 characters", p.Resource == ""},
		FieldError{"spec.parentRef.resource", p.Resource, msgLabel, p.Resource == ""})
}

func TestParentRefNameIsRequiredSubdomain(t *testing.T) {
	p := ParentRef{Resource: "services", Namespace: "default"}
	wantErrors(t, "empty", p.Validate(), FieldError{"spec.parentRef.name", "", "", true})
	for _, n := range []string{"Kubernetes", "-a", "a-", "a..b", "a.-b", "a_b", ".a", "a.", "a/b"} {
		p.Name = n
		wantErrors(t, n, p.Validate(), FieldError{"spec.parentRef.name", n, msgSubdomain, n == ""})
	}
	for _, n := range []string{"kubernetes", "a", "0", "kube-dns", "a.b.c", "1-2.3-4", strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 61)} {
		p.Name = n
		if err := p.Validate(); err != nil {
			t.Errorf("name %q: %v", n, err)
		}
	}
	p.Name = strings.Repeat("a", 254)
	wantErrors(t, "254 chars", p.Validate(), FieldError{"spec.parentRef.name", p.Name, "must be no more than 253 characters", p.Name == ""})
}

func TestParentRefNamespaceIsOptionalLabel(t *testing.T) {
	p := ParentRef{Resource: "nodes", Name: "node-1"}
	if err := p.Validate(); err != nil {
		t.Errorf("no namespace: %v", err)
	}
	for _, ns := range []string{"Default", "-ns", "ns-", "kube..system", "kube.system-"} {
		p.Namespace = ns
		wantErrors(t, ns, p.Validate(), FieldError{"spec.parentRef.namespace", ns, msgLabel, ns == ""})
	}
	p.Namespace = "kube.system"
	wantErrors(t, p.Namespace, p.Validate(), FieldError{"spec.parentRef.namespace", p.Namespace, msgNoDots, false})
	p.Namespace = strings.Repeat("n", 64)
	wantErrors(t, "64 chars", p.Validate(), FieldError{"spec.parentRef.namespace", p.Namespace, "must be no more than 63 characters", p.Namespace == ""})
}

func TestParentRefGroupIsOptionalSubdomain(t *testing.T) {
	p := ParentRef{Resource: "gateways", Namespace: "default", Name: "gw"}
	for _, g := range []string{"", "gateway.networking.k8s.io", "example.com", "x"} {
		p.Group = g
		if err := p.Validate(); err != nil {
			t.Errorf("group %q: %v", g, err)
		}
	}
	for _, g := range []string{"Example.com", "example..com", "example.com.", "-x"} {
		p.Group = g
		wantErrors(t, g, p.Validate(), FieldError{"spec.parentRef.group", g, msgSubdomain, g == ""})
	}
}

func TestParentRefValidateReportsEveryProblem(t *testing.T) {
	wantErrors(t, "zero ParentRef", ParentRef{}.Validate(),
		FieldError{"spec.parentRef.resource", "", "", true},
		FieldError{"spec.parentRef.name", "", "", true},
	)
	err := ParentRef{}.Validate()
	want := "spec.parentRef.resource: Required value\nspec.parentRef.name: Required value"
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestIPAddressValidateChecksAddressAndParent(t *testing.T) {
	ok := IPAddress{Addr: netip.MustParseAddr("10.96.0.1"), Parent: ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"}}
	if err := ok.Validate(); err != nil {
		t.Errorf("valid record: %v", err)
	}
	bad := IPAddress{Addr: netip.MustParseAddr("::ffff:10.96.0.1"), Parent: ParentRef{Resource: "services", Namespace: "default"}}
	wantErrors(t, "bad record", bad.Validate(),
		FieldError{"metadata.name", "::ffff:10.96.0.1", msgIPv4Mapped, false},
		FieldError{"spec.parentRef.name", "", "", true},
	)
	wantErrors(t, "zero record", IPAddress{}.Validate(),
		FieldError{"metadata.name", "", msgInvalidIP, true},
		FieldError{"spec.parentRef.resource", "", "", true},
		FieldError{"spec.parentRef.name", "", "", true},
	)
}

func TestDNS1123HelpersRequireAValue(t *testing.T) {
	wantErrors(t, "label", ValidateDNS1123Label("f", ""), FieldError{"f", "", "", true})
	wantErrors(t, "subdomain", ValidateDNS1123Subdomain("f", ""), FieldError{"f", "", "", true})
	if err := ValidateDNS1123Label("f", "a-1"); err != nil {
		t.Error(err)
	}
	if err := ValidateDNS1123Subdomain("f", "a-1.b"); err != nil {
		t.Error(err)
	}
}

// The name checks agree with the DNS-1123 grammar written as regular
// expressions, on strings made of the bytes that matter, and Validate's
// quick verdict agrees with its full one.
func TestNameChecksMatchTheGrammar(t *testing.T) {
	label := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	subdomain := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// Long strings of mostly valid bytes too, for the eight-at-a-time check.
	gen := rapid.OneOf(
		rapid.StringOfN(rapid.SampledFrom([]rune("ab09-.A_ é")), 0, 12, -1),
		rapid.StringOfN(rapid.SampledFrom([]rune("abcdefghijklmnopqrstuvwxyz0123456789------.A_é~/`:{@[")), 0, 40, -1),
		rapid.StringOfN(rapid.SampledFrom([]rune("az09-")), 0, 40, -1),
		rapid.StringOfN(rapid.SampledFrom([]rune("aaaz09-.")), 0, 40, -1),
		rapid.StringOfN(rapid.SampledFrom([]rune("aaaaaaaz09-é\u0100\u00ff")), 0, 40, -1),
	)
	rapid.Check(t, func(rt *rapid.T) {
		s := gen.Draw(rt, "s")
		if got, want := isLabel(s), label.MatchString(s); got != want {
			rt.Fatalf("isLabel(%q) = %v, want %v", s, got, want)
		}
		if got, want := isSubdomain(s), subdomain.MatchString(s); got != want {
			rt.Fatalf("isSubdomain(%q) = %v, want %v", s, got, want)
		}
		// nameValid has a quick path of its own for names without a dot.
		if got, want := nameValid(s), subdomain.MatchString(s) && len(s) <= maxSubdomainLen; got != want {
			rt.Fatalf("nameValid(%q) = %v, want %v", s, got, want)
		}
		p := ParentRef{Group: gen.Draw(rt, "group"), Resource: gen.Draw(rt, "resource"), Namespace: gen.Draw(rt, "namespace"), Name: s}
		// The quick verdicts agree with the errors, and Validate is the
		// scope's and the name's checks together, errors in field order.
		if p.scopeValid() != (len(p.scopeErrs()) == 0) {
			rt.Fatalf("%#v: scopeValid() = %v, scopeErrs() = %v", p, p.scopeValid(), p.scopeErrs())
		}
		if nameValid(p.Name) != (len(p.nameErrs()) == 0) {
			rt.Fatalf("%#v: nameValid = %v, nameErrs() = %v", p, nameValid(p.Name), p.nameErrs())
		}
		want := flatten(append(p.scopeErrs(), p.nameErrs()...))
		if got := FieldErrors(p.Validate()); !slices.EqualFunc(got, want, func(a *FieldError, b error) bool { return *a == *b.(*FieldError) }) {
			rt.Fatalf("%#v: Validate() = %v, want the scope's errors, then the name's: %v", p, got, want)
		}
	})
}

// A ValidParentRef holds an owner that Validate accepts, however the
// checker's remembered scope and the owners before it line up: each owner
// is the one before with one field changed, to a valid value or not, or
// the same again.
func TestParentRefCheckerGivesExactlyWhatValidateAccepts(t *testing.T) {
	pick := func(vs ...string) *rapid.Generator[string] { return rapid.SampledFrom(vs) }
	fields := []*rapid.Generator[string]{
		pick("", "apps", "networking.k8s.io", "Apps", "-x", "a..b"),
		pick("services", "pods", "", "Services", "svc-", "a.b"),
		pick("", "default", "kube-system", "Default", "a.b", "x_y"),
		rapid.OneOf(pick("kubernetes", "a", "a.b", "a-b", "", "A", "a..b", "-a", "é", strings.Repeat("a", 253), strings.Repeat("a", 254)),
			rapid.StringOfN(rapid.SampledFrom([]rune("az09-.A\xff")), 0, 20, -1)),
	}
	// A new checker remembers no scope: not the empty one either.
	var c ParentRefChecker
	if v, ok := c.Check(ParentRef{Name: "a"}); ok {
		t.Errorf("a new checker passes %#v, which has no resource", v.ParentRef())
	}
	rapid.Check(t, func(rt *rapid.T) {
		var c ParentRefChecker
		p := ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"}
		for i := range rapid.IntRange(1, 20).Draw(rt, "owners") {
			// -1 changes nothing: the same owner again.
			if f := rapid.IntRange(-1, 3).Draw(rt, "field"); f >= 0 {
				*[]*string{&p.Group, &p.Resource, &p.Namespace, &p.Name}[f] = fields[f].Draw(rt, "value")
			}
			want := p.Validate() == nil
			v, ok := c.Check(p)
			if ok != want {
				rt.Fatalf("owner %d, %#v: Check ok = %v, Validate() = %v", i, p, ok, p.Validate())
			}
			if ok && v.ParentRef() != p || !ok && v != (ValidParentRef{}) {
				rt.Fatalf("owner %d, %#v: Check = %#v, %v", i, p, v.ParentRef(), ok)
			}
			w, err := CheckParentRef(p)
			if (err == nil) != want || w != v {
				rt.Fatalf("owner %d, %#v: CheckParentRef = %#v, %v; Check = %#v, %v", i, p, w.ParentRef(), err, v.ParentRef(), ok)
			}
		}
	})
}

func TestParseAddrLegacyReadsWhatLegacyParsersRead(t *testing.T) {
	for s, want := range map[string]string{
		"10.96.0.5":        "10.96.0.5",
		"010.096.000.005":  "10.96.0.5",
		"10.0.0.01":        "10.0.0.1",
		"FD00::5":          "fd00::5",
		"2001:db8:0:0::1":  "2001:db8::1",
		"::ffff:10.96.0.1": "10.96.0.1",
		"::ffff:010.0.0.1": "10.0.0.1",
		"fe80::1%eth0":     "fe80::1",
		"2001:db8::00001":  "2001:db8::1",
		"00000fd00::5":     "fd00::5",
		"fd00:10::0000A":   "fd00:10::a",
	} {
		if got, ok := ParseAddrLegacy(s); !ok || got != netip.MustParseAddr(want) {
			t.Errorf("ParseAddrLegacy(%q) = %v, %v; want %s", s, got, ok, want)
		}
	}
	for _, s := range []string{"", "10.96.0.300", "10.96.0", "1.2.3.0400", "10.0.0.1%eth0", "foo", "10.0.0.1/24", "fd00::10000", "fd00::0000g"} {
		if got, ok := ParseAddrLegacy(s); ok {
			t.Errorf("ParseAddrLegacy(%q) = %v, want no address", s, got)
		}
	}
}

// BenchmarkParentRefValidate checks the owner of an allocation, as every
// allocation does: a Service with a 32-byte name.
func BenchmarkParentRefValidate(b *testing.B) {
	p := ParentRef{Resource: "services", Namespace: "default", Name: "svc-0123456789abcdef-0123456789a"}
	for b.Loop() {
		if err := p.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
