package cidrset

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/ipaddress"
)

func checkInvalid(t *testing.T, in any, err error) {
	t.Helper()
	if !errors.Is(err, ipaddress.ErrInvalid) {
		t.Fatalf("%v: error %v does not match ErrInvalid", in, err)
	}
	var fe *ipaddress.FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("%v: error %v is not a *FieldError", in, err)
	}
	_ = err.Error()
}

func FuzzParsePrefix(f *testing.F) {
	for _, s := range []string{
		"10.96.0.0/28", "fd00:10::/108", "::/0", "0.0.0.0/0", "010.0.0.0/8", "10.0.0.0/08",
		"10.0.0.1/24", "::ffff:10.0.0.0/104", "::ffff:010.0.0.0/104", "2001:DB8::/64",
		"2001:db8:0::/64", "fe80::%eth0/64", "", "/", "10.0.0.0/33", "10.0.0.0/00",
		"2001:db8::00001/128", "fd00:0000a::/32",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePrefix(s)
		if err != nil {
			checkInvalid(t, s, err)
			if p.IsValid() {
				t.Fatalf("ParsePrefix(%q) = %v with error %v", s, p, err)
			}
			return
		}
		if got := p.String(); got != s {
			t.Fatalf("ParsePrefix(%q).String() = %q", s, got)
		}
		if err := ValidatePrefix(p); err != nil {
			t.Fatalf("ParsePrefix(%q) accepted a prefix ValidatePrefix rejects: %v", s, err)
		}
	})
}

// FuzzValidateCIDR builds a CIDR from a name and up to three prefixes given
// as text (parsed leniently by net/netip, so invalid values reach
// Validate), and checks Validate and ValidateUpdate never panic, fail only
// with validation errors, and agree with the rules.
func FuzzValidateCIDR(f *testing.F) {
	f.Add("kubernetes", "10.96.0.0/28", "", "", "")
	f.Add("dual", "10.0.0.0/16", "fd00:10::/108", "", "")
	f.Add("same-family", "10.0.0.0/16", "192.168.0.0/24", "", "")
	f.Add("three", "10.0.0.0/16", "fd00::/64", "fd01::/64", "10.0.0.0/16")
	f.Add("Bad_Name", "10.0.0.1/24", "::ffff:10.0.0.0/104", "", "fd00::/64")
	f.Add("", "", "", "", "")
	f.Fuzz(func(t *testing.T, name, a, b, c, added string) {
		var ps []netip.Prefix
		for _, s := range []string{a, b, c} {
			if s == "" {
				continue
			}
			p, _ := netip.ParsePrefix(s) // zero on error: Validate must reject it
			ps = append(ps, p)
		}
		cidr := CIDR{Name: name, Prefixes: ps}
		err := cidr.Validate()
		if err != nil {
			checkInvalid(t, cidr, err)
		} else {
			if len(ps) == 0 || len(ps) > 2 || ValidateName(name) != nil {
				t.Fatalf("Validate accepted %+v", cidr)
			}
			for _, p := range ps {
				if ValidatePrefix(p) != nil {
					t.Fatalf("Validate accepted %+v with prefix %v", cidr, p)
				}
				if q, err := ParsePrefix(p.String()); err != nil || q != p {
					t.Fatalf("valid prefix %v does not round-trip: %v, %v", p, q, err)
				}
			}
			if len(ps) == 2 && ps[0].Addr().Is4() == ps[1].Addr().Is4() {
				t.Fatalf("Validate accepted two prefixes of one family: %v", ps)
			}
		}

		// An update that changes nothing is valid exactly when the CIDR is.
		if uerr := ValidateUpdate(cidr, cidr.Clone()); (uerr == nil) != (err == nil) {
			t.Fatalf("ValidateUpdate(c, c) = %v, Validate = %v", uerr, err)
		}
		// Adding a prefix is allowed only from one valid prefix to a
		// valid dual-stack pair.
		p, _ := netip.ParsePrefix(added)
		upd := cidr.Clone()
		upd.Prefixes = append(upd.Prefixes, p)
		uerr := ValidateUpdate(cidr, upd)
		if uerr != nil {
			checkInvalid(t, upd, uerr)
		} else if len(ps) != 1 || upd.Validate() != nil {
			t.Fatalf("ValidateUpdate(%+v, %+v) accepted", cidr, upd)
		}
		if len(ps) == 1 && (uerr == nil) != (upd.Validate() == nil) {
			t.Fatalf("single to dual %v: ValidateUpdate = %v, Validate = %v", upd.Prefixes, uerr, upd.Validate())
		}
	})
}
