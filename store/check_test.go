package store_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"pgregory.net/rapid"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// storeOnly reports whether c is one of the CIDRs a store takes on
// purpose though cidrset.Validate refuses it, by the list in CheckCIDR's
// doc comment, written out here apart from both functions.
func storeOnly(c cidrset.CIDR) bool {
	if ipaddress.ValidateDNS1123Subdomain("metadata.name", c.Name) != nil {
		return true
	}
	n := len(c.Prefixes)
	if n == 0 || n > 2 {
		return true
	}
	for _, p := range c.Prefixes {
		if p != p.Masked() || p.Addr().Is4In6() {
			return true
		}
	}
	return n == 2 && c.Prefixes[0].Addr().Is4() == c.Prefixes[1].Addr().Is4()
}

// storable reports whether a store can keep c, by the rules of CheckCIDR's
// doc comment, written out here apart from it.
func storable(c cidrset.CIDR) bool {
	if c.Name == "" || len(c.Name) > store.MaxCIDRNameLen || strings.Contains(c.Name, "/") || len(c.Prefixes) > store.MaxCIDRPrefixes {
		return false
	}
	for _, p := range c.Prefixes {
		if !p.IsValid() {
			return false
		}
	}
	return true
}

// checkAgreement fails unless CheckCIDR takes exactly the storable CIDRs
// and cidrset.Validate exactly the storable ones that are not storeOnly:
// what the allocator creates, a store keeps, and the two differ by the
// documented list alone.
func checkAgreement(t interface {
	Helper()
	Fatalf(string, ...any)
}, c cidrset.CIDR) {
	t.Helper()
	stored, valid := store.CheckCIDR(c), c.Validate()
	for _, err := range []error{stored, valid} {
		if err != nil && !errors.Is(err, ipaddress.ErrInvalid) {
			t.Fatalf("%.200v: %v does not match ipaddress.ErrInvalid", c, err)
		}
	}
	if want := storable(c); (stored == nil) != want {
		t.Fatalf("%.200v: CheckCIDR says %v, want storable=%v", c, stored, want)
	}
	if want := storable(c) && !storeOnly(c); (valid == nil) != want {
		t.Fatalf("%.200v: Validate says %v, want it to take it: %v (storeOnly %v)", c, valid, want, storeOnly(c))
	}
}

func prefixes(n int) []netip.Prefix {
	ps := make([]netip.Prefix, n)
	for i := range ps {
		ps[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
	}
	return ps
}

// Every kind of input one function takes and the other refuses, and some
// both take or refuse.
func TestCheckCIDRTakesWhatValidateTakesAndTheDocumentedRest(t *testing.T) {
	v4, v6 := netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("fd00::/64")
	for _, tc := range []struct {
		c      cidrset.CIDR
		stored bool // CheckCIDR takes it
		valid  bool // cidrset.Validate takes it
	}{
		{cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{v4}}, true, true},
		{cidrset.CIDR{Name: "a.b-c", Prefixes: []netip.Prefix{v6, v4}}, true, true},
		{cidrset.CIDR{Name: strings.Repeat("a", 253), Prefixes: []netip.Prefix{v4}}, true, true},
		// Taken by a store only.
		{cidrset.CIDR{Name: "Upper", Prefixes: []netip.Prefix{v4}}, true, false},
		{cidrset.CIDR{Name: "a_b", Prefixes: []netip.Prefix{v4}}, true, false},
		{cidrset.CIDR{Name: "é", Prefixes: []netip.Prefix{v4}}, true, false},
		{cidrset.CIDR{Name: strings.Repeat("a", 254), Prefixes: []netip.Prefix{v4}}, true, false},
		{cidrset.CIDR{Name: strings.Repeat("a", store.MaxCIDRNameLen), Prefixes: []netip.Prefix{v4}}, true, false},
		{cidrset.CIDR{Name: "a"}, true, false},
		{cidrset.CIDR{Name: "a", Prefixes: prefixes(3)}, true, false},
		{cidrset.CIDR{Name: "a", Prefixes: prefixes(store.MaxCIDRPrefixes)}, true, false},
		{cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{v4, netip.MustParsePrefix("10.1.0.0/24")}}, true, false},
		{cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 24)}}, true, false},
		{cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/120")}}, true, false},
		// Refused by both.
		{cidrset.CIDR{Prefixes: []netip.Prefix{v4}}, false, false},
		{cidrset.CIDR{Name: "a/b", Prefixes: []netip.Prefix{v4}}, false, false},
		{cidrset.CIDR{Name: strings.Repeat("a", store.MaxCIDRNameLen+1), Prefixes: []netip.Prefix{v4}}, false, false},
		{cidrset.CIDR{Name: "a", Prefixes: prefixes(store.MaxCIDRPrefixes + 1)}, false, false},
		{cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{{}}}, false, false},
		{cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{v4, {}}}, false, false},
		{cidrset.CIDR{Name: "a", Prefixes: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("10.0.0.0"), 33)}}, false, false},
	} {
		if got := store.CheckCIDR(tc.c) == nil; got != tc.stored {
			t.Errorf("CheckCIDR(%.80v) takes it: %v, want %v", tc.c, got, tc.stored)
		}
		if got := tc.c.Validate() == nil; got != tc.valid {
			t.Errorf("Validate(%.80v) takes it: %v, want %v", tc.c, got, tc.valid)
		}
		checkAgreement(t, tc.c)
	}
}

// The same over generated CIDRs: names valid and not, any count of
// prefixes of any address (zero, IPv4, IPv6, IPv4-mapped) and length
// (out of range too), with host bits or without.
func TestCheckCIDRAndValidateDifferOnlyAsDocumented(t *testing.T) {
	// Half valid, so that a prefix is often the only thing wrong.
	validNames := []string{"a", "kubernetes", "a.b", "a-b", strings.Repeat("a", 63), strings.Repeat("a", 253)}
	oddNames := []string{
		"", "A", "a_b", "-a", "a.", "a/b", "é", "a\x00", strings.Repeat("a", 254),
		strings.Repeat("a", store.MaxCIDRNameLen), strings.Repeat("a", store.MaxCIDRNameLen+1),
	}
	prefix := rapid.Custom(func(t *rapid.T) netip.Prefix {
		var a netip.Addr
		switch rapid.SampledFrom([]int{1, 2, 1, 2, 3, 0}).Draw(t, "kind") {
		case 0:
			return netip.Prefix{}
		case 1:
			a = netip.AddrFrom4([4]byte(rapid.SliceOfN(rapid.Byte(), 4, 4).Draw(t, "v4")))
		case 2:
			a = netip.AddrFrom16([16]byte(rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "v6")))
		case 3:
			a = netip.AddrFrom16(netip.AddrFrom4([4]byte(rapid.SliceOfN(rapid.Byte(), 4, 4).Draw(t, "mapped"))).As16())
		}
		low := -1
		if a.Is4In6() {
			low = 90 // shorter, a mask clears the mapping: ::/n
		}
		p := netip.PrefixFrom(a, rapid.IntRange(low, a.BitLen()+1).Draw(t, "bits"))
		if rapid.IntRange(0, 3).Draw(t, "masked") > 0 {
			p = p.Masked()
		}
		return p
	})
	rapid.Check(t, func(t *rapid.T) {
		var c cidrset.CIDR
		if rapid.Bool().Draw(t, "valid name") {
			c.Name = rapid.SampledFrom(validNames).Draw(t, "name")
		} else {
			c.Name = rapid.SampledFrom(oddNames).Draw(t, "name")
		}
		switch n := rapid.SampledFrom([]int{2, 1, 2, 0, 2, 3, 1, 4, -1}).Draw(t, "count"); n {
		case -1: // around the count a store keeps
			c.Prefixes = prefixes(rapid.SampledFrom([]int{store.MaxCIDRPrefixes - 1, store.MaxCIDRPrefixes, store.MaxCIDRPrefixes + 1}).Draw(t, "many"))
		default:
			c.Prefixes = rapid.SliceOfN(prefix, n, n).Draw(t, "prefixes")
		}
		checkAgreement(t, c)
	})
}

// ownerStorable reports whether a store can keep p, by the rules of
// CheckOwner's doc comment, written out here apart from it.
func ownerStorable(p ipaddress.ParentRef) bool {
	fields := []string{p.Group, p.Resource, p.Namespace, p.Name}
	n := 0
	for _, f := range fields {
		n += len(f)
		for i := 0; i < len(f); {
			r, size := utf8.DecodeRuneInString(f[i:])
			if r == utf8.RuneError && size == 1 {
				return false
			}
			i += size
		}
	}
	return n <= store.MaxOwnerLen
}

// checkOwnerAgreement fails unless CheckOwner takes exactly the storable
// owners, with an *ipaddress.FieldError on one of them otherwise, and
// takes every owner ParentRef.Validate takes.
func checkOwnerAgreement(t interface {
	Helper()
	Fatalf(string, ...any)
}, p ipaddress.ParentRef) {
	t.Helper()
	err := store.CheckOwner(p)
	if want := ownerStorable(p); (err == nil) != want {
		t.Fatalf("%.200q: CheckOwner says %v, want storable=%v", p, err, want)
	}
	// Every ValidParentRef meets CheckOwner: store.Locked's
	// CreateAddressLocked takes one unchecked.
	if v, verr := ipaddress.CheckParentRef(p); verr == nil && store.CheckOwner(v.ParentRef()) != nil {
		t.Fatalf("%.200q: Validate takes it, CheckOwner refuses it: %v", p, err)
	}
	if err == nil {
		return
	}
	var fe *ipaddress.FieldError
	if !errors.Is(err, ipaddress.ErrInvalid) || !errors.As(err, &fe) {
		t.Fatalf("%.200q: %v is not an *ipaddress.FieldError matching ErrInvalid", p, err)
	}
	fields := map[string]string{"spec.parentRef.group": p.Group, "spec.parentRef.resource": p.Resource, "spec.parentRef.namespace": p.Namespace, "spec.parentRef.name": p.Name}
	if v, ok := fields[fe.Field]; ok && (v != fe.Value || utf8.ValidString(v)) {
		t.Fatalf("%.200q: %v names %s, which holds %.200q", p, err, fe.Field, v)
	} else if !ok && fe.Field != "spec.parentRef" {
		t.Fatalf("%.200q: %v names field %q", p, err, fe.Field)
	}
}

// The limits exactly, however the bytes are split among the fields, and
// bytes that are text but no name (NUL, controls, "/", non-ASCII).
func TestCheckOwnerAtItsLimits(t *testing.T) {
	n := func(k int) string { return strings.Repeat("n", k) }
	for _, tc := range []struct {
		p      ipaddress.ParentRef
		stored bool
	}{
		{ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"}, true},
		{ipaddress.ParentRef{}, true},
		{ipaddress.ParentRef{Group: "\x00", Resource: "\x1b[2J", Namespace: "a/b", Name: "é\u2028\U0001F600"}, true},
		{ipaddress.ParentRef{Name: n(store.MaxOwnerLen)}, true},
		{ipaddress.ParentRef{Group: n(store.MaxOwnerLen)}, true},
		{ipaddress.ParentRef{Group: n(128), Resource: n(128), Namespace: n(128), Name: n(store.MaxOwnerLen - 384)}, true},
		{ipaddress.ParentRef{Name: n(store.MaxOwnerLen + 1)}, false},
		{ipaddress.ParentRef{Namespace: n(store.MaxOwnerLen + 1)}, false},
		{ipaddress.ParentRef{Group: "g", Name: n(store.MaxOwnerLen)}, false},
		{ipaddress.ParentRef{Group: n(128), Resource: n(128), Namespace: n(128), Name: n(store.MaxOwnerLen - 383)}, false},
		{ipaddress.ParentRef{Group: "\xff", Resource: "services", Name: "a"}, false},
		{ipaddress.ParentRef{Resource: "services", Name: "\xc3"}, false},                         // cut short
		{ipaddress.ParentRef{Resource: "services", Namespace: "\xed\xa0\x80", Name: "a"}, false}, // a surrogate
		{ipaddress.ParentRef{Resource: "\xc0\x80", Name: "a"}, false},                            // NUL, overlong
		// Past the first eight bytes, which a fast path reads at once.
		{ipaddress.ParentRef{Resource: "services", Name: "abcdefghijklmn\xff"}, false},
		{ipaddress.ParentRef{Resource: "services", Namespace: "abcdefg\x80", Name: "a"}, false},
		{ipaddress.ParentRef{Resource: "services", Name: "abcdefghijklmné"}, true},
	} {
		if got := store.CheckOwner(tc.p) == nil; got != tc.stored {
			t.Errorf("CheckOwner(%.80q) takes it: %v, want %v", tc.p, got, tc.stored)
		}
		checkOwnerAgreement(t, tc.p)
	}
	// What store.Locked takes unchecked: the longest owner Validate takes,
	// and the zero ValidParentRef.
	longest, err := ipaddress.CheckParentRef(ipaddress.ParentRef{Group: n(253), Resource: n(63), Namespace: n(63), Name: n(253)})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []ipaddress.ValidParentRef{longest, {}} {
		if err := store.CheckOwner(v.ParentRef()); err != nil {
			t.Errorf("CheckOwner refuses the ValidParentRef %.80q: %v", v.ParentRef(), err)
		}
	}
	err = store.CheckOwner(ipaddress.ParentRef{Resource: "services", Namespace: "\xff", Name: "\xff"})
	if fe := ipaddress.FieldErrors(err); len(fe) != 1 || fe[0].Field != "spec.parentRef.namespace" {
		t.Errorf("two fields not UTF-8: %v, want the first named", err)
	}
}

// The same over generated owners: valid names, bytes of any kind, and
// lengths around the limit.
func TestCheckOwnerTakesWhatValidateTakesAndAllStorableText(t *testing.T) {
	field := rapid.Custom(func(t *rapid.T) string {
		switch rapid.IntRange(0, 5).Draw(t, "kind") {
		case 0:
			return ""
		case 1:
			return rapid.StringMatching(`[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?`).Draw(t, "name")
		case 2:
			return rapid.String().Draw(t, "text")
		case 3:
			return string(rapid.SliceOf(rapid.Byte()).Draw(t, "bytes"))
		case 4:
			return strings.Repeat("x", rapid.IntRange(store.MaxOwnerLen-600, store.MaxOwnerLen+1).Draw(t, "long"))
		}
		return rapid.SampledFrom([]string{"\xff", "a\xc3", "\xed\xa0\x80", "\x00", "/", "é"}).Draw(t, "odd")
	})
	rapid.Check(t, func(t *rapid.T) {
		p := ipaddress.ParentRef{Group: field.Draw(t, "group"), Resource: field.Draw(t, "resource"), Namespace: field.Draw(t, "namespace"), Name: field.Draw(t, "name")}
		checkOwnerAgreement(t, p)
	})
}
