package ipaddress

import (
	"strings"
	"testing"
)

// FuzzParentRefFields is FuzzParseParentRef from the struct side: for any
// four fields, Validate (whose fast path valid() decides alone when it
// passes) agrees with the field checks it documents, naming the fields in
// its documented order; a valid reference prints to the text that parses
// back to it; an invalid one prints to text that parses to nothing or to
// another, valid, reference.
func FuzzParentRefFields(f *testing.F) {
	f.Add("", "services", "default", "kubernetes")
	f.Add("gateway.networking.k8s.io", "gateways", "", "gw")
	f.Add("", "services", "a.b", "x")
	f.Add("a/b", "c", "d", "e")
	f.Add("", "", "", "")
	f.Add("x", "Services", "-", strings.Repeat("n", 254))
	f.Add("", "services.x", "default", "a")
	f.Fuzz(func(t *testing.T, group, resource, namespace, name string) {
		p := ParentRef{Group: group, Resource: resource, Namespace: namespace, Name: name}
		err := p.Validate()
		var want []string
		if group != "" && ValidateDNS1123Subdomain("g", group) != nil {
			want = append(want, fieldParentRef+".group")
		}
		if ValidateDNS1123Label("r", resource) != nil {
			want = append(want, fieldParentRef+".resource")
		}
		if namespace != "" && ValidateDNS1123Label("n", namespace) != nil {
			want = append(want, fieldParentRef+".namespace")
		}
		if ValidateDNS1123Subdomain("n", name) != nil {
			want = append(want, fieldParentRef+".name")
		}
		var got []string
		for _, fe := range FieldErrors(err) {
			if len(got) == 0 || got[len(got)-1] != fe.Field {
				got = append(got, fe.Field)
			}
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("%+v: Validate = %v (fields %v); the field checks fail %v", p, err, got, want)
		}
		q, perr := ParseParentRef(p.String())
		switch {
		case err == nil && (perr != nil || q != p):
			t.Fatalf("valid %+v prints %q, which parses to %+v, %v", p, p.String(), q, perr)
		case err != nil && perr == nil && (q == p || q.Validate() != nil):
			t.Fatalf("invalid %+v prints %q, which parses to %+v", p, p.String(), q)
		}
	})
}
