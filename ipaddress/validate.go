package ipaddress

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/netipam/netipam/internal/legacyip"
	"github.com/netipam/netipam/internal/strs"
)

// ErrInvalid is matched (errors.Is) by every validation error of this
// module: a *FieldError, or several joined together.
var ErrInvalid = errors.New("invalid")

// FieldError is one validation failure of one field.
//
// Its message follows the Kubernetes field-error style:
//
//	<field>: Invalid value: "<value>": <detail>
//
// The value is printed Go-quoted (%q), so control characters and invalid
// UTF-8 are escaped, and an empty value given is printed as "". A value
// longer than 256 bytes (longer than any valid name) is printed cut at
// 256 bytes, with its length, so that a megabyte of bad input does not
// make a megabyte of message; Value keeps it whole:
//
//	<field>: Invalid value: "<first 256 bytes>"... (<n> bytes): <detail>
//
// A FieldError marked Required reports a missing value instead:
//
//	<field>: Required value
//	<field>: Required value: <detail>
//
// Functions that find several problems return them joined with
// errors.Join; use errors.As to reach the first *FieldError, or unwrap the
// join (interface{ Unwrap() []error }) to see them all. Every FieldError
// matches ErrInvalid with errors.Is.
type FieldError struct {
	Field  string // path of the field, e.g. "spec.cidrs[0]" or "metadata.name"
	Value  string // the offending value, as given
	Detail string // what is wrong, in the reference's words
	// Required marks a value missing, rather than one given that is wrong
	// (an empty CIDR string is given: `Invalid value: ""`, as the
	// reference says).
	Required bool
}

// Error formats e as described on FieldError.
func (e *FieldError) Error() string {
	if e.Required {
		if e.Detail == "" {
			return e.Field + ": Required value"
		}
		return e.Field + ": Required value: " + e.Detail
	}
	if v := e.Value; len(v) > maxShownValue {
		cut := maxShownValue
		for cut > 0 && !utf8.RuneStart(v[cut]) { // not inside a character
			cut--
		}
		return fmt.Sprintf("%s: Invalid value: %q... (%d bytes): %s", e.Field, v[:cut], len(v), e.Detail)
	}
	return fmt.Sprintf("%s: Invalid value: %q: %s", e.Field, e.Value, e.Detail)
}

// maxShownValue is how much of a value FieldError.Error prints: a little
// more than the longest valid name (253 bytes), so that only values wrong
// for their length are cut.
const maxShownValue = 256

// Is reports whether target is ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Field names and detail messages. The details are the reference's words.
const (
	fieldName      = "metadata.name"
	fieldParentRef = "spec.parentRef"

	detailInvalidIP     = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
	detailLeadingZeros  = "must not have leading 0s"
	detailIPv4Mapped    = "must not be an IPv4-mapped IPv6 address"
	detailCanonicalForm = "must be in canonical form (%q)"

	detailParentRefForm = "must be of the form resource[.group]/[namespace/]name"

	detailNoDots    = "must not contain dots"
	detailLabel     = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name' or '123-abc')"
	detailSubdomain = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com')"
	detailMaxLen    = "must be no more than %d characters"

	maxLabelLen     = 63
	maxSubdomainLen = 253
)

// joinErrs returns nil for no error, the error itself for one, and
// errors.Join of them otherwise.
func joinErrs(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	return errors.Join(errs...)
}

// ParseAddr parses s strictly: it must be an IPv4 or IPv6 address in
// canonical form, not IPv4-mapped, without a zone.
//
// Canonical means IPv4 dotted decimal without leading zeros and IPv6 as
// RFC 5952 prints it (lower-case hex, no leading zeros in a group, the
// longest run of zero groups compressed): what netip.Addr.String returns.
// On failure the error is a *FieldError for "metadata.name" and the Addr is
// the zero Addr.
func ParseAddr(s string) (netip.Addr, error) {
	invalid := func(detail string) (netip.Addr, error) {
		return netip.Addr{}, &FieldError{Field: fieldName, Value: s, Detail: detail, Required: s == ""}
	}
	if strings.IndexByte(s, '%') >= 0 {
		// A zone is never part of an allocatable address.
		return invalid(detailInvalidIP)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		if onlyLeadingZeros(s) {
			return invalid(detailLeadingZeros)
		}
		return invalid(detailInvalidIP)
	}
	if a.Is4In6() {
		return invalid(detailIPv4Mapped)
	}
	if c := a.String(); c != s {
		return invalid(fmt.Sprintf(detailCanonicalForm, c))
	}
	return a, nil
}

// onlyLeadingZeros reports whether s, which netip.ParseAddr rejected,
// parses once leading zeros are removed, as the legacy parsers read it:
// "010.1.2.3", "::ffff:1.2.3.04", "fd00::00005".
func onlyLeadingZeros(s string) bool {
	fixed, ok := legacyip.WithoutLeadingZeros(s)
	if !ok || fixed == s {
		return false
	}
	_, err := netip.ParseAddr(fixed)
	return err == nil
}

// ParseAddrLegacy returns the address s denotes when read as the legacy
// parsers read it (Kubernetes' ParseIPSloppy among them), for data written
// before ParseAddr's rules were enforced: leading zeros in dotted decimal
// are decimal, any IPv6 spelling is accepted (zero-padded groups too), an IPv4-mapped address is its
// IPv4 address and a zone is dropped. It is for recognising what such data
// means (repair must not free an address a consumer holds under any
// spelling), never for accepting new input: use ParseAddr for that. Every
// address ParseAddr accepts, ParseAddrLegacy reads the same.
func ParseAddrLegacy(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		fixed, ok := legacyip.WithoutLeadingZeros(s)
		if !ok {
			return netip.Addr{}, false
		}
		if a, err = netip.ParseAddr(fixed); err != nil {
			return netip.Addr{}, false
		}
	}
	return a.WithZone("").Unmap(), true
}

// ValidateAddr reports whether a may be allocated: valid, not IPv4-mapped, no zone.
// The error is a *FieldError for "metadata.name".
func ValidateAddr(a netip.Addr) error {
	if a.Is4() { // valid, with no zone, not mapped: small enough to inline
		return nil
	}
	return validateAddr(a)
}

// validateAddr is ValidateAddr past its IPv4 case.
func validateAddr(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return &FieldError{Field: fieldName, Detail: detailInvalidIP, Required: true}
	case a.Zone() != "":
		return &FieldError{Field: fieldName, Value: a.String(), Detail: detailInvalidIP}
	case a.Is4In6():
		return &FieldError{Field: fieldName, Value: a.String(), Detail: detailIPv4Mapped}
	}
	return nil
}

// ParseParentRef parses the printed form "resource[.group]/namespace/name" or "resource[.group]/name".
//
// It is the exact inverse of ParentRef.String: for every valid p,
// ParseParentRef(p.String()) == p, and for every s it accepts,
// ParseParentRef(s).String() == s. The text before the first '.' of the
// first segment is the resource, the rest is the group. Empty segments are
// rejected, and the result is validated (ParentRef.Validate).
func ParseParentRef(s string) (ParentRef, error) {
	badForm := func() (ParentRef, error) {
		return ParentRef{}, &FieldError{Field: fieldParentRef, Value: s, Detail: detailParentRefForm, Required: s == ""}
	}
	parts := strings.Split(s, "/")
	var p ParentRef
	switch len(parts) {
	case 2:
		p.Name = parts[1]
	case 3:
		p.Namespace, p.Name = parts[1], parts[2]
	default:
		return badForm()
	}
	for _, part := range parts {
		if part == "" {
			return badForm()
		}
	}
	p.Resource = parts[0]
	if i := strings.IndexByte(parts[0], '.'); i >= 0 {
		p.Resource, p.Group = parts[0][:i], parts[0][i+1:]
		if p.Resource == "" || p.Group == "" {
			return badForm()
		}
	}
	if err := p.Validate(); err != nil {
		return ParentRef{}, err
	}
	return p, nil
}

// Validate reports whether p is a valid owner reference.
//
// Resource is required and must be a DNS-1123 label (lower case
// alphanumerics and '-', at most 63 characters); Name is required and must
// be a DNS-1123 subdomain (at most 253 characters); Namespace, when set,
// must be a DNS-1123 label; Group, when set, a DNS-1123 subdomain. Errors
// name the fields "spec.parentRef.group", "spec.parentRef.resource",
// "spec.parentRef.namespace" and "spec.parentRef.name", in that order.
//
// Validate is the scope's check (Group, Resource, Namespace) and the
// name's together: its errors are the scope's, then the name's.
func (p ParentRef) Validate() error {
	if p.scopeValid() && nameValid(p.Name) {
		return nil // the common case, checked without building errors
	}
	return joinErrs(flatten(append(p.scopeErrs(), p.nameErrs()...)))
}

// CheckParentRef returns p as a ValidParentRef if p.Validate accepts it,
// and Validate's error otherwise.
func CheckParentRef(p ParentRef) (ValidParentRef, error) {
	if err := p.Validate(); err != nil {
		return ValidParentRef{}, err
	}
	return ValidParentRef{p}, nil
}

// ParentRefChecker is CheckParentRef for a caller that checks many owners,
// most of one scope (the Services of one namespace): it remembers the
// scope (Group, Resource, Namespace) of the last owner that passed, and
// of an owner with that scope checks the name alone. The zero value is
// ready to use. It is not safe for concurrent use.
type ParentRefChecker struct {
	scope ParentRef // Name empty; Resource empty before the first pass
}

// Check returns p as a ValidParentRef, and true, if p.Validate accepts it;
// else false, and p.Validate gives the errors. (A bool, not an error: the
// results then fit in registers.)
func (c *ParentRefChecker) Check(p ParentRef) (ValidParentRef, bool) {
	if !c.passes(&p) {
		return ValidParentRef{}, false
	}
	return ValidParentRef{p}, true
}

// passes is Check's verdict, apart so that Check inlines: its result is
// then made where the caller keeps it, without a copy on the way.
func (c *ParentRefChecker) passes(p *ParentRef) bool {
	if s := &c.scope; !strs.Same(p.Namespace, s.Namespace) || !strs.Same(p.Resource, s.Resource) || !strs.Same(p.Group, s.Group) || s.Resource == "" {
		if !p.scopeValid() {
			return false
		}
		*s = ParentRef{Group: p.Group, Resource: p.Resource, Namespace: p.Namespace}
	}
	return nameValid(p.Name)
}

// scopeValid and nameValid are the verdicts alone: the same rules as
// scopeErrs and nameErrs, through the same predicates, without building
// errors.
func (p ParentRef) scopeValid() bool {
	return (p.Group == "" || len(p.Group) <= maxSubdomainLen && isSubdomain(p.Group)) &&
		len(p.Resource) <= maxLabelLen && isLabel(p.Resource) &&
		(p.Namespace == "" || len(p.Namespace) <= maxLabelLen && isLabel(p.Namespace))
}

// nameValid is the name's verdict. A name without a dot, the usual case,
// is settled by its classes, without a call to isSubdomain.
func nameValid(name string) bool {
	return len(name) <= maxSubdomainLen && (nameClasses(name)&^classHyphen == 0 || isSubdomain(name))
}

// scopeErrs returns the errors of p's scope, in field order.
func (p ParentRef) scopeErrs() []error {
	var errs []error
	if p.Group != "" {
		errs = appendErr(errs, ValidateDNS1123Subdomain(fieldParentRef+".group", p.Group))
	}
	errs = appendErr(errs, ValidateDNS1123Label(fieldParentRef+".resource", p.Resource))
	if p.Namespace != "" {
		errs = appendErr(errs, ValidateDNS1123Label(fieldParentRef+".namespace", p.Namespace))
	}
	return errs
}

// nameErrs returns the errors of p's name.
func (p ParentRef) nameErrs() []error {
	return appendErr(nil, ValidateDNS1123Subdomain(fieldParentRef+".name", p.Name))
}

func appendErr(errs []error, err error) []error {
	if err != nil {
		errs = append(errs, err)
	}
	return errs
}

// flatten expands joined errors one level, so that the result of
// ParentRef.Validate is a flat list of *FieldError.
func flatten(errs []error) []error {
	var out []error
	for _, err := range errs {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			out = append(out, j.Unwrap()...)
			continue
		}
		out = append(out, err)
	}
	return out
}

// String prints p as "resource/namespace/name" ("services/default/kubernetes").
// A Group is appended to the resource after a dot
// ("gateways.gateway.networking.k8s.io/default/gw"); without a Namespace
// (a cluster-scoped owner) the form is "resource/name".
func (p ParentRef) String() string {
	var b strings.Builder
	b.Grow(len(p.Resource) + len(p.Group) + len(p.Namespace) + len(p.Name) + 3)
	b.WriteString(p.Resource)
	if p.Group != "" {
		b.WriteByte('.')
		b.WriteString(p.Group)
	}
	b.WriteByte('/')
	if p.Namespace != "" {
		b.WriteString(p.Namespace)
		b.WriteByte('/')
	}
	b.WriteString(p.Name)
	return b.String()
}

// Validate reports whether the record may be stored: its address passes
// ValidateAddr and its parent ParentRef.Validate. Several problems are
// joined.
func (a IPAddress) Validate() error {
	var errs []error
	if err := ValidateAddr(a.Addr); err != nil {
		errs = append(errs, err)
	}
	if err := a.Parent.Validate(); err != nil {
		errs = append(errs, err)
	}
	return joinErrs(flatten(errs))
}

// ValidateDNS1123Label reports whether value is a DNS-1123 label: 1 to 63
// lower case alphanumerics or '-', starting and ending with an
// alphanumeric. An empty value is reported as required; a value both too
// long and malformed gets both errors, joined. Errors name field.
func ValidateDNS1123Label(field, value string) error {
	if value == "" {
		return &FieldError{Field: field, Required: true}
	}
	var errs []error
	if len(value) > maxLabelLen {
		errs = append(errs, &FieldError{Field: field, Value: value, Detail: fmt.Sprintf(detailMaxLen, maxLabelLen)})
	}
	switch {
	case isLabel(value):
	case isSubdomain(value):
		// As the reference says: a subdomain that is no label has dots.
		errs = append(errs, &FieldError{Field: field, Value: value, Detail: detailNoDots})
	default:
		errs = append(errs, &FieldError{Field: field, Value: value, Detail: detailLabel})
	}
	return joinErrs(errs)
}

// ValidateDNS1123Subdomain reports whether value is a DNS-1123 subdomain:
// at most 253 characters, one or more DNS-1123 labels (lower case
// alphanumerics or '-', each starting and ending with an alphanumeric)
// separated by '.'. An empty value is reported as required; a value both
// too long and malformed gets both errors, joined. Errors name field.
func ValidateDNS1123Subdomain(field, value string) error {
	if value == "" {
		return &FieldError{Field: field, Required: true}
	}
	var errs []error
	if len(value) > maxSubdomainLen {
		errs = append(errs, &FieldError{Field: field, Value: value, Detail: fmt.Sprintf(detailMaxLen, maxSubdomainLen)})
	}
	if !isSubdomain(value) {
		errs = append(errs, &FieldError{Field: field, Value: value, Detail: detailSubdomain})
	}
	return joinErrs(errs)
}

// nameClass sorts every byte into a bit: 0 for a lower-case letter or
// digit, classHyphen, classDot, or classOther for anything else. OR-ing the
// classes of a whole name says which kinds of bytes it holds with one load
// and one OR per byte, and no branch.
const nameClass = "\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04" +
	"\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x01\x02\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\x04\x04\x04\x04\x04" +
	"\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04" +
	"\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\x04\x04\x04\x04" +
	"\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04" +
	"\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04" +
	"\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04" +
	"\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04\x04"

const (
	classHyphen = 1 << iota
	classDot
	classOther
	// classEdge is not a byte's class: nameClasses adds it when s is
	// empty or an end of it is no letter or digit.
	classEdge
)

// nameClasses returns the OR of the classes of s's bytes, and classEdge
// if s is empty or does not start and end with a lower-case letter or
// digit: a label is exactly a string with no bit but classHyphen. Eight
// bytes at a time, as one expression, so the loop's own work is paid once
// per eight bytes; the loop's test (eight bytes left from i) proves the
// eight loads in bounds: no window to slice and check each time.
func nameClasses(s string) byte {
	if len(s) == 0 || nameClass[s[0]]|nameClass[s[len(s)-1]] != 0 {
		return classEdge
	}
	var c byte
	i := 0
	for ; i <= len(s)-8; i += 8 {
		c |= nameClass[s[i]] | nameClass[s[i+1]] | nameClass[s[i+2]] | nameClass[s[i+3]] |
			nameClass[s[i+4]] | nameClass[s[i+5]] | nameClass[s[i+6]] | nameClass[s[i+7]]
	}
	for ; i < len(s); i++ {
		c |= nameClass[s[i]]
	}
	return c
}

// isSubdomain reports whether s is one or more labels joined by '.' (any
// length; the callers check the length). That is: the ends are letters or
// digits, every byte is one or '-' or '.', and both neighbours of a dot are
// letters or digits (a label's edges are the string's ends and its dots).
// Names without a dot, the usual case, are settled by their classes.
func isSubdomain(s string) bool {
	c := nameClasses(s)
	if c&^classHyphen == 0 {
		return true
	}
	if c&(classOther|classEdge) != 0 {
		return false
	}
	// The ends are not dots, so a dot has two neighbours.
	for i := 1; i < len(s)-1; i++ {
		if s[i] == '.' && (nameClass[s[i-1]] != 0 || nameClass[s[i+1]] != 0) {
			return false
		}
	}
	return true
}

// isLabel reports whether s matches [a-z0-9]([-a-z0-9]*[a-z0-9])? (any
// length; the callers check the length): letters or digits at the ends,
// '-' also allowed between.
func isLabel(s string) bool {
	return nameClasses(s)&^classHyphen == 0
}

// FieldErrors returns the *FieldError values in err, in order, looking
// through errors joined with errors.Join or wrapped with %w; other errors in
// the tree are skipped. It is how a caller lists every problem of an input.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *FieldError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, err := range e.Unwrap() {
				walk(err)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}
