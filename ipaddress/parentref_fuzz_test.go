package ipaddress

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// FuzzParentRefFields is FuzzParseParentRef from the struct side: for any
// four fields, Validate reports exactly the field errors parentRefErrors
// derives from the rules on its own, in the documented order; a valid
// reference prints to the text that parses back to it; an invalid one
// prints to text that parses to nothing, or to another reference, valid by
// those rules, that prints as the same text (a '/' or '.' in a field moves
// the split).
func FuzzParentRefFields(f *testing.F) {
	f.Add("", "services", "default", "kubernetes")
	f.Add("gateway.networking.k8s.io", "gateways", "", "gw")
	f.Add("", "services", "a.b", "x")
	f.Add("a/b", "c", "d", "e")
	f.Add("", "", "", "")
	f.Add("x", "Services", "-", strings.Repeat("n", 254))
	f.Add("", "services.x", "default", "a")
	f.Add("Example.com", "services", "default", "web")
	f.Add("Apps", "deployments", "default", "web")
	f.Add("", "services-", "default", "web")
	f.Add("", "services", "kube-system-", "web.")
	f.Add("", "services", "default", "a-.b")
	f.Add("", strings.Repeat("r", 63), strings.Repeat("n", 64), strings.Repeat("x", 253))
	f.Add("", "services", "", "default/web")
	f.Add("", " services", "default", "web")
	f.Fuzz(func(t *testing.T, group, resource, namespace, name string) {
		p := ParentRef{Group: group, Resource: resource, Namespace: namespace, Name: name}
		err := p.Validate()
		var got []FieldError
		for _, fe := range FieldErrors(err) {
			got = append(got, *fe)
		}
		want := parentRefErrors(p)
		if (err == nil) != (want == nil) || !slices.Equal(got, want) {
			t.Fatalf("%#v: Validate = %v\nfield errors %+v\nwant         %+v", p, err, got, want)
		}
		s := p.String()
		q, perr := ParseParentRef(s)
		switch {
		case err == nil && (perr != nil || q != p):
			t.Fatalf("valid %#v prints %q, which parses to %#v, %v", p, s, q, perr)
		case err != nil && perr == nil && (q.String() != s || parentRefErrors(q) != nil):
			t.Fatalf("invalid %#v prints %q, which parses to %#v, printed %q, with field errors %+v", p, s, q, q.String(), parentRefErrors(q))
		}
	})
}

// The DNS-1123 grammar as the reference writes it.
var (
	dns1123Label     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// parentRefErrors is what ParentRef.Validate must report for p, worked out
// slowly from the rules (SPEC §1: Resource and Name required, Group and
// Namespace optional; Validate's documentation: Resource and Namespace
// DNS-1123 labels of at most 63 characters, Group and Name subdomains of
// at most 253) with the reference's messages, field by field in the order
// group, resource, namespace, name. For each field: a missing required
// value is Required; a value too long says so; a malformed one then gets
// the grammar's message, or for a label that is a subdomain "must not
// contain dots". nil when p is valid.
func parentRefErrors(p ParentRef) []FieldError {
	var out []FieldError
	check := func(field, value string, required, label bool) {
		field = "spec.parentRef." + field
		if value == "" {
			if required {
				out = append(out, FieldError{Field: field, Required: true})
			}
			return
		}
		maxLen, grammar, msg := 253, dns1123Subdomain, msgSubdomain
		if label {
			maxLen, grammar, msg = 63, dns1123Label, msgLabel
		}
		if len(value) > maxLen {
			out = append(out, FieldError{Field: field, Value: value, Detail: fmt.Sprintf("must be no more than %d characters", maxLen)})
		}
		switch {
		case grammar.MatchString(value):
		case label && dns1123Subdomain.MatchString(value):
			out = append(out, FieldError{Field: field, Value: value, Detail: msgNoDots})
		default:
			out = append(out, FieldError{Field: field, Value: value, Detail: msg})
		}
	}
	check("group", p.Group, false, false)
	check("resource", p.Resource, true, true)
	check("namespace", p.Namespace, false, true)
	check("name", p.Name, true, false)
	return out
}
