package ipaddress

import (
	"errors"
	"testing"
)

// checkInvalid fails the fuzz run unless err is a validation error that
// prints without panicking.
func checkInvalid(t *testing.T, in string, err error) {
	t.Helper()
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("%q: error %v does not match ErrInvalid", in, err)
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("%q: error %v is not a *FieldError", in, err)
	}
	_ = err.Error()
}

func FuzzParseAddr(f *testing.F) {
	for _, s := range []string{
		"10.9.8.7", "0.0.0.0", "255.255.255.255", "010.0.0.1", "10.0.0.01", "1.2.3.0400",
		"2001:db8::ffff", "::", "::1", "2001:db8:0:0::1", "2001:DB8::1", "::ffff:10.0.0.1",
		"::ffff:010.0.0.1", "::1.2.3.4", "fe80::1%eth0", "", "foo", "1.2.3", "1:2:3:4:5:6:7:8:9",
		"2001:db8::00001", "00000fd00::5", "fd00::10000",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddr(s)
		legacy, ok := ParseAddrLegacy(s)
		if ok && ValidateAddr(legacy) != nil {
			t.Fatalf("ParseAddrLegacy(%q) = %v, which ValidateAddr rejects", s, legacy)
		}
		if err == nil && (!ok || legacy != a) {
			t.Fatalf("ParseAddr(%q) = %v but ParseAddrLegacy reads %v, %v", s, a, legacy, ok)
		}
		if err != nil {
			checkInvalid(t, s, err)
			if a.IsValid() {
				t.Fatalf("ParseAddr(%q) = %v with error %v", s, a, err)
			}
			return
		}
		if got := a.String(); got != s {
			t.Fatalf("ParseAddr(%q).String() = %q", s, got)
		}
		if err := ValidateAddr(a); err != nil {
			t.Fatalf("ParseAddr(%q) accepted an address ValidateAddr rejects: %v", s, err)
		}
	})
}

func FuzzParseParentRef(f *testing.F) {
	for _, s := range []string{
		"services/default/kubernetes", "services/kubernetes", "gateways.gateway.networking.k8s.io/ns/gw",
		"nodes/node-1.example", "services//x", "services./x", "/", "", "a/b/c/d", "Services/Default/X",
		"services/default/" + string(make([]byte, 300)),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseParentRef(s)
		if err != nil {
			checkInvalid(t, s, err)
			if p != (ParentRef{}) {
				t.Fatalf("ParseParentRef(%q) = %+v with error %v", s, p, err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("ParseParentRef(%q) = %+v, which does not validate: %v", s, p, err)
		}
		printed := p.String()
		if printed != s {
			t.Fatalf("ParseParentRef(%q).String() = %q", s, printed)
		}
		q, err := ParseParentRef(printed)
		if err != nil || q != p {
			t.Fatalf("ParseParentRef(%q) = %+v, %v; want %+v", printed, q, err, p)
		}
	})
}
