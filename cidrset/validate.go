package cidrset

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/netipam/netipam/internal/legacyip"
	"github.com/netipam/netipam/ipaddress"
)

// Field names and detail messages. The details are the reference's words.
const (
	fieldName  = "metadata.name"
	fieldCIDRs = "spec.cidrs"

	detailInvalidCIDR   = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"
	detailLeadingZeros  = "must not have leading 0s in IP or prefix length"
	detailIPv4Mapped    = "must not have an IPv4-mapped IPv6 address"
	detailBitsBeyond    = "must not have bits set beyond the prefix length"
	detailCanonicalForm = "must be in canonical form (%q)"
	detailNoCIDR        = "at least one CIDR required"
	detailTooMany       = "may only hold up to 2 values"
	detailOnePerFamily  = "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"
	detailImmutable     = "field is immutable"

	maxPrefixes = 2
)

// fieldCIDR returns the path of the i-th prefix, "spec.cidrs[i]".
func fieldCIDR(i int) string { return fmt.Sprintf("%s[%d]", fieldCIDRs, i) }

func invalid(field, value, detail string) error {
	return &ipaddress.FieldError{Field: field, Value: value, Detail: detail}
}

// required is a field error for a value missing.
func required(field, detail string) error {
	return &ipaddress.FieldError{Field: field, Detail: detail, Required: true}
}

// joinErrs returns nil for no error, the error itself for one, and a flat
// errors.Join of them otherwise (joined errors among errs are expanded).
func joinErrs(errs ...error) error {
	var flat []error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			flat = append(flat, j.Unwrap()...)
			continue
		}
		flat = append(flat, err)
	}
	switch len(flat) {
	case 0:
		return nil
	case 1:
		return flat[0]
	}
	return errors.Join(flat...)
}

// ParsePrefix parses s strictly: canonical, no leading zeros, no host bits,
// not IPv4-mapped.
//
// Canonical means what netip.Prefix.String returns: IPv4 dotted decimal
// without leading zeros, IPv6 per RFC 5952 (lower-case hex, longest zero
// run compressed), prefix length in decimal without leading zeros. Only the
// first problem found is reported, in this order: unparsable, leading
// zeros, IPv4-mapped, bits beyond the prefix length, not canonical. On
// failure the error is a *ipaddress.FieldError for "spec.cidrs" and the
// Prefix is the zero Prefix.
func ParsePrefix(s string) (netip.Prefix, error) {
	p, err := parsePrefix(fieldCIDRs, s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return p, nil
}

func parsePrefix(field, s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		if leadingZerosOnly(s) {
			return netip.Prefix{}, invalid(field, s, detailLeadingZeros)
		}
		return netip.Prefix{}, invalid(field, s, detailInvalidCIDR)
	}
	if err := validatePrefix(field, p); err != nil {
		// p.String() is not s here when the problem is a mapped
		// address or host bits; report the value as given.
		var fe *ipaddress.FieldError
		if errors.As(err, &fe) {
			fe.Value = s
		}
		return netip.Prefix{}, err
	}
	if c := p.String(); c != s {
		return netip.Prefix{}, invalid(field, s, fmt.Sprintf(detailCanonicalForm, c))
	}
	return p, nil
}

// leadingZerosOnly reports whether s, which netip.ParsePrefix rejected,
// would parse once leading zeros are removed from the decimal prefix
// length and from the address, as the legacy parsers accepted
// ("010.0.0.0/8", "10.0.0.0/08", "fd00:0000a::/32").
func leadingZerosOnly(s string) bool {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return false
	}
	addr, bits := s[:i], s[i+1:]
	if strings.IndexByte(addr, '%') >= 0 {
		return false
	}
	if bits == "" {
		return false
	}
	for j := 0; j < len(bits); j++ {
		if bits[j] < '0' || bits[j] > '9' {
			return false
		}
	}
	bits = strings.TrimLeft(bits, "0")
	if bits == "" {
		bits = "0"
	}
	if _, err := netip.ParseAddr(addr); err != nil {
		var ok bool
		if addr, ok = legacyip.WithoutLeadingZeros(addr); !ok {
			return false
		}
	}
	fixed := addr + "/" + bits
	if fixed == s {
		return false
	}
	_, err := netip.ParsePrefix(fixed)
	return err == nil
}

// ValidatePrefix reports whether p is an acceptable prefix value: valid
// (not the zero Prefix), not IPv4-mapped, no bits set beyond the prefix
// length. The error is a *ipaddress.FieldError for "spec.cidrs".
func ValidatePrefix(p netip.Prefix) error { return validatePrefix(fieldCIDRs, p) }

func validatePrefix(field string, p netip.Prefix) error {
	switch {
	case !p.IsValid():
		return required(field, detailInvalidCIDR) // the zero Prefix: none given
	case p.Addr().Zone() != "":
		return invalid(field, p.String(), detailInvalidCIDR)
	case p.Addr().Is4In6():
		return invalid(field, p.String(), detailIPv4Mapped)
	case p != p.Masked():
		return invalid(field, p.String(), detailBitsBeyond)
	}
	return nil
}

// ValidateName reports whether name is a DNS-1123 subdomain: at most 253
// characters, dot-separated labels of lower case alphanumerics and '-',
// each starting and ending with an alphanumeric. Errors name the field
// "metadata.name"; an empty name is reported as required.
func ValidateName(name string) error {
	return ipaddress.ValidateDNS1123Subdomain(fieldName, name)
}

// prefixesValue prints a prefix list as an error value: "a, b, c".
func prefixesValue(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		if p.IsValid() {
			s[i] = p.String()
		}
	}
	return strings.Join(s, ", ")
}

// Validate reports whether c may be created.
//
// The name must pass ValidateName. The prefixes: at least one
// ("spec.cidrs: at least one CIDR required"), at most two ("may only hold
// up to 2 values"; the prefixes are then not checked further), each valid
// by ValidatePrefix (field "spec.cidrs[i]"), and two of them must be of
// different families. All problems found are joined.
//
// Validate is the rule of what may be created (SPEC §1), which the
// allocator applies; it is stricter than what a store keeps
// (store.CheckCIDR, which takes every CIDR Validate takes). The
// difference is deliberate, and listed there: a store holds, and hands
// back unchanged, CIDRs written before a rule here tightened or by
// another writer, which must stay readable and deletable.
func (c CIDR) Validate() error {
	return joinErrs(ValidateName(c.Name), validatePrefixes(c.Prefixes))
}

func validatePrefixes(ps []netip.Prefix) error {
	switch {
	case len(ps) == 0:
		return required(fieldCIDRs, detailNoCIDR)
	case len(ps) > maxPrefixes:
		return invalid(fieldCIDRs, prefixesValue(ps), detailTooMany)
	}
	var errs []error
	for i, p := range ps {
		errs = append(errs, validatePrefix(fieldCIDR(i), p))
	}
	// The family as the reference reads it: an IPv4-mapped prefix (refused
	// above anyway) counts as IPv4.
	if len(ps) == 2 && ps[0].IsValid() && ps[1].IsValid() &&
		ps[0].Addr().Unmap().Is4() == ps[1].Addr().Unmap().Is4() {
		errs = append(errs, invalid(fieldCIDRs, prefixesValue(ps), detailOnePerFamily))
	}
	return joinErrs(errs...)
}

// ValidateUpdate reports whether old may become updated.
//
// The name must not change ("metadata.name: field is immutable"). The
// prefixes must not change either ("field is immutable", on "spec.cidrs[i]"
// for a changed entry, on "spec.cidrs" when the count changes), with one
// exception: a single-stack CIDR may become dual-stack, its one prefix
// staying first and a prefix of the other family added second. updated is
// also validated in full (CIDR.Validate). All problems found are joined.
func ValidateUpdate(old, updated CIDR) error {
	var errs []error
	if old.Name != updated.Name && updated.Name != "" { // "" is reported by updated.Validate
		errs = append(errs, invalid(fieldName, updated.Name, detailImmutable))
	}
	switch {
	case len(old.Prefixes) == len(updated.Prefixes):
		for i, p := range old.Prefixes {
			// A zero prefix is reported by updated.Validate.
			if q := updated.Prefixes[i]; q != p && q.IsValid() {
				errs = append(errs, invalid(fieldCIDR(i), q.String(), detailImmutable))
			}
		}
	case len(old.Prefixes) == 1 && len(updated.Prefixes) == 2:
		// Single to dual stack; that the added prefix is of the other
		// family is checked by updated.Validate below.
		if q := updated.Prefixes[0]; q != old.Prefixes[0] && q.IsValid() {
			errs = append(errs, invalid(fieldCIDR(0), q.String(), detailImmutable))
		}
	case len(updated.Prefixes) > 0: // none is reported by updated.Validate
		errs = append(errs, invalid(fieldCIDRs, prefixesValue(updated.Prefixes), detailImmutable))
	}
	errs = append(errs, updated.Validate())
	return joinErrs(errs...)
}
