package etcd

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// Value versions, written as "v" in every value. A decoder meeting a version
// it does not know reports the value as corrupt rather than guess.
const (
	// cidrVersion is the version of CIDR values.
	cidrVersion = 1
	// recordVersion is the version of the address records this package
	// writes: 2, a record with no owner key (layout 2).
	recordVersion = 2
	// legacyRecordVersion is that of records written under layout 1, each
	// with an owner key. They are read as they are; DeleteAddress deletes
	// their owner key with them.
	legacyRecordVersion = 1
	// replacedRecordVersion is that of a record ReplaceAddressAt gave to
	// its owner: a layout-2 record whose key was rewritten, so that its
	// revision (the key's ModRevision) is no longer the key's
	// CreateRevision, which releases before ReplaceAddressAt took for a
	// record's revision. They do not know this version and report the
	// record as corrupt, rather than delete it on a revision read before
	// the replacement.
	replacedRecordVersion = 3
)

// CorruptError reports a key whose key or value this store cannot decode.
// It matches store.ErrCorrupt.
type CorruptError struct {
	Key string
	Err error
}

// Error names the key and what could not be decoded.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("etcd key %q: %v: %v", e.Key, store.ErrCorrupt, e.Err)
}

// Is makes errors.Is(err, store.ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == store.ErrCorrupt }

// Unwrap returns the decoding error.
func (e *CorruptError) Unwrap() error { return e.Err }

func corrupt(key string, err error) error { return &CorruptError{Key: key, Err: err} }

// cidrValue is the stored form of a CIDR. The name is the key; the revision
// is the key's ModRevision.
type cidrValue struct {
	V           int      `json:"v"`
	Prefixes    []string `json:"prefixes"`
	Terminating bool     `json:"terminating,omitempty"`
	Created     int64    `json:"created"` // Unix nanoseconds
}

// recordValue is the stored form of an address record (and, under layout 1,
// of its owner key too). The address is the key; the revision is the key's
// ModRevision: its creation's, or that of the ReplaceAddressAt that gave it
// to its owner.
type recordValue struct {
	V         int    `json:"v"`
	Group     string `json:"group,omitempty"`
	Resource  string `json:"resource"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Created   int64  `json:"created"` // Unix nanoseconds
}

// encodeCIDR returns the value stored for c.
func encodeCIDR(c cidrset.CIDR) []byte {
	v := cidrValue{V: cidrVersion, Prefixes: make([]string, len(c.Prefixes)), Terminating: c.Terminating, Created: c.Created.UnixNano()}
	for i, p := range c.Prefixes {
		v.Prefixes[i] = p.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // strings, bools and integers always marshal
	}
	return b
}

// decodeCIDR decodes a CIDR value. It sets neither Name nor Revision.
//
// It takes only what encodeCIDR writes, byte for byte: anything else was
// written by no version of this store (edited by hand, tampered with),
// and reading it as something close would serve prefixes nobody stored.
// The prefixes are read as they are, never masked: this store takes any
// valid prefix (store.CheckCIDR), so one with host bits, an IPv4-mapped
// one, several of a family, or none at all, is read back as it was
// written; refusing those is cidrset.Validate's part, before a store.
func decodeCIDR(b []byte) (cidrset.CIDR, error) {
	var v cidrValue
	if err := unmarshal(b, &v); err != nil {
		return cidrset.CIDR{}, err
	}
	if v.V != cidrVersion {
		return cidrset.CIDR{}, fmt.Errorf("value version %d, want %d", v.V, cidrVersion)
	}
	c := cidrset.CIDR{Terminating: v.Terminating, Created: time.Unix(0, v.Created)}
	for _, s := range v.Prefixes {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return cidrset.CIDR{}, err
		}
		// netip parses forms it never prints ("2001:DB8::/32"); reading
		// one would store another prefix text at the next write.
		if p.String() != s {
			return cidrset.CIDR{}, fmt.Errorf("prefix %q is not in the form this store writes, %q", s, p)
		}
		c.Prefixes = append(c.Prefixes, p)
	}
	// encoding/json reads much that json.Marshal never writes: unknown,
	// repeated or differently cased keys, null, "terminating":false,
	// escapes, spaces.
	if err := asWritten(b, encodeCIDR(c)); err != nil {
		return cidrset.CIDR{}, err
	}
	return c, nil
}

// asWritten returns nil if b is want, the value this store writes for
// what b decoded to, and otherwise an error showing where they part.
func asWritten(b, want []byte) error {
	if bytes.Equal(b, want) {
		return nil
	}
	i := 0
	for i < len(b) && i < len(want) && b[i] == want[i] {
		i++
	}
	excerpt := func(b []byte) string {
		if len(b) > 24 {
			return string(b[:24]) + "..."
		}
		return string(b)
	}
	return fmt.Errorf("value is not as this store writes it: from byte %d, %q where it writes %q", i, excerpt(b[i:]), excerpt(want[i:]))
}

// encodeRecord returns the value stored for r: what encoding/json writes for
// its recordValue, byte for byte. When no owner field needs escaping (the
// usual case) it is built directly, which costs a fraction of
// json.Marshal's reflection on every allocation.
func encodeRecord(r ipaddress.IPAddress) []byte { return encodeRecordVersion(r, recordVersion) }

// encodeRecordVersion is encodeRecord with version v (a single digit).
func encodeRecordVersion(r ipaddress.IPAddress, v int) []byte {
	p := r.Parent
	if !plainJSON(p.Group) || !plainJSON(p.Resource) || !plainJSON(p.Namespace) || !plainJSON(p.Name) {
		b, err := json.Marshal(recordValue{
			V:         v,
			Group:     p.Group,
			Resource:  p.Resource,
			Namespace: p.Namespace,
			Name:      p.Name,
			Created:   r.Created.UnixNano(),
		})
		if err != nil {
			panic(err) // strings and integers always marshal
		}
		return b
	}
	b := make([]byte, 0, 64+len(p.Group)+len(p.Resource)+len(p.Namespace)+len(p.Name))
	b = append(b, `{"v":`...)
	b = strconv.AppendInt(b, int64(v), 10)
	if p.Group != "" {
		b = append(append(append(b, `,"group":"`...), p.Group...), '"')
	}
	b = append(append(append(b, `,"resource":"`...), p.Resource...), '"')
	if p.Namespace != "" {
		b = append(append(append(b, `,"namespace":"`...), p.Namespace...), '"')
	}
	b = append(append(append(b, `,"name":"`...), p.Name...), '"')
	b = strconv.AppendInt(append(b, `,"created":`...), r.Created.UnixNano(), 10)
	return append(b, '}')
}

// plainJSON reports whether encoding/json writes s as it is between quotes:
// printable ASCII but for '"', '\\' and the HTML-escaped '<', '>' and '&'.
func plainJSON(s string) bool {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// decodePlainRecord decodes a record value in exactly the form encodeRecord
// builds directly: those fields in that order, group and namespace only
// when not empty, strings of the bytes plainJSON passes, the creation time
// in its shortest form, no spaces. ok is false for anything else, which
// encoding/json decodes instead; for what it accepts, the result is
// json.Unmarshal's, and encodeRecordVersion writes it back as it was.
func decodePlainRecord(b []byte) (v recordValue, ok bool) {
	lit := func(l string) bool {
		if len(b) < len(l) || string(b[:len(l)]) != l {
			return false
		}
		b = b[len(l):]
		return true
	}
	str := func() (string, bool) { // after the opening quote
		for i, c := range b {
			if c == '"' {
				s := string(b[:i])
				b = b[i+1:]
				return s, true
			}
			// json.Marshal escapes '<', '>' and '&': left to the
			// check that the value is as the store writes it.
			if c < 0x20 || c > 0x7e || c == '\\' || c == '<' || c == '>' || c == '&' {
				return "", false
			}
		}
		return "", false
	}
	if !lit(`{"v":`) || len(b) < 2 || b[1] != ',' || b[0] < '1' || b[0] > '3' {
		return v, false
	}
	v.V, b = int(b[0]-'0'), b[1:]
	// An empty group or namespace is left out, never written as "".
	if lit(`,"group":"`) {
		if v.Group, ok = str(); !ok || v.Group == "" {
			return v, false
		}
	}
	if !lit(`,"resource":"`) {
		return v, false
	}
	if v.Resource, ok = str(); !ok {
		return v, false
	}
	if lit(`,"namespace":"`) {
		if v.Namespace, ok = str(); !ok || v.Namespace == "" {
			return v, false
		}
	}
	if !lit(`,"name":"`) {
		return v, false
	}
	if v.Name, ok = str(); !ok || !lit(`,"created":`) || len(b) < 2 || b[len(b)-1] != '}' {
		return v, false
	}
	num := b[:len(b)-1]
	digits := num
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || (digits[0] == '0' && len(num) > 1) {
		return v, false // not a JSON number, or not the shortest form ("-0")
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return v, false
		}
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil {
		return v, false
	}
	v.Created = n
	return v, true
}

// decodeRecord decodes a record value of any version and returns the
// version too. It sets neither Addr nor Revision. Like decodeCIDR, it takes
// only what this store writes (encodeRecordVersion, byte for byte): in
// particular encoding/json would read bytes that are not UTF-8 as U+FFFD,
// an owner no record was created for.
func decodeRecord(b []byte) (ipaddress.IPAddress, int, error) {
	v, plain := decodePlainRecord(b)
	if !plain {
		v = recordValue{}
		if err := unmarshal(b, &v); err != nil {
			return ipaddress.IPAddress{}, 0, err
		}
	}
	if v.V != recordVersion && v.V != legacyRecordVersion && v.V != replacedRecordVersion {
		return ipaddress.IPAddress{}, 0, fmt.Errorf("value version %d, want %d, %d or %d", v.V, legacyRecordVersion, recordVersion, replacedRecordVersion)
	}
	r := ipaddress.IPAddress{
		Parent:  ipaddress.ParentRef{Group: v.Group, Resource: v.Resource, Namespace: v.Namespace, Name: v.Name},
		Created: time.Unix(0, v.Created),
	}
	// decodePlainRecord takes only values as this store writes them; the
	// others pay an encoding to be checked, which the plain ones (nearly
	// every record, read on every watch event) do not.
	if !plain {
		if err := asWritten(b, encodeRecordVersion(r, v.V)); err != nil {
			return ipaddress.IPAddress{}, 0, err
		}
	}
	return r, v.V, nil
}

// unmarshal decodes one JSON object and nothing after it.
func unmarshal(b []byte, v any) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return errors.New("not a JSON object")
	}
	return json.Unmarshal(b, v)
}

// addrSuffix returns the key suffix of a: "4/" and 8 hex digits, or "6/"
// and 32, lower case, so that numeric order is key order.
func addrSuffix(a netip.Addr) string {
	var buf [34]byte
	return string(appendAddrSuffix(buf[:0], a))
}

// appendAddrSuffix appends addrSuffix(a) to b.
func appendAddrSuffix(b []byte, a netip.Addr) []byte {
	if a.Is4() {
		v := a.As4()
		return hex.AppendEncode(append(b, '4', '/'), v[:])
	}
	v := a.As16()
	return hex.AppendEncode(append(b, '6', '/'), v[:])
}

// decodeAddrSuffix is the inverse of addrSuffix; it accepts only what
// addrSuffix produces.
func decodeAddrSuffix(s string) (netip.Addr, error) {
	fam, digits, ok := strings.Cut(s, "/")
	var n int
	switch {
	case !ok:
		return netip.Addr{}, errors.New("address key has no family")
	case fam == "4":
		n = 4
	case fam == "6":
		n = 16
	default:
		return netip.Addr{}, fmt.Errorf("address key family %q", fam)
	}
	if len(digits) != 2*n {
		return netip.Addr{}, fmt.Errorf("address key %q is not %d hex digits", digits, 2*n)
	}
	var buf [16]byte
	for i := range 2 * n {
		c := digits[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		default:
			return netip.Addr{}, fmt.Errorf("address key %q is not lower-case hex", digits)
		}
		buf[i/2] = buf[i/2]<<4 | d
	}
	if n == 4 {
		return netip.AddrFrom4([4]byte(buf[:4])), nil
	}
	a := netip.AddrFrom16(buf)
	if a.Is4In6() {
		return netip.Addr{}, fmt.Errorf("address key %q holds an IPv4-mapped address, which is never stored", digits)
	}
	return a, nil
}

// escape makes an owner field one key segment: bytes outside
// [A-Za-z0-9._~-] (so '/', '%' and every non-ASCII byte) become %XX. It is
// injective, so distinct owners never share a key prefix.
func escape(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := range len(s) {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '~' || c == '-' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// cidrFromKV decodes the CIDR stored under key with the given ModRevision;
// name is the key's last part. Errors are *CorruptError naming key.
func cidrFromKV(key, name string, value []byte, modRev int64) (cidrset.CIDR, error) {
	c, err := decodeCIDR(value)
	if err != nil {
		return cidrset.CIDR{}, corrupt(key, err)
	}
	c.Name, c.Revision = name, modRev
	return c, nil
}

// recordFromKV decodes the record of a stored under key with the given
// ModRevision. Errors are *CorruptError naming key.
func recordFromKV(key string, a netip.Addr, value []byte, rev int64) (ipaddress.IPAddress, error) {
	r, _, err := recordVersionFromKV(key, a, value, rev)
	return r, err
}

// recordVersionFromKV is recordFromKV that returns the value's version too.
func recordVersionFromKV(key string, a netip.Addr, value []byte, rev int64) (ipaddress.IPAddress, int, error) {
	r, version, err := decodeRecord(value)
	if err != nil {
		return ipaddress.IPAddress{}, 0, corrupt(key, err)
	}
	r.Addr, r.Revision = a, rev
	return r, version, nil
}

// addrFromKey decodes the address of an address or owner key whose part
// before the address suffix is pfx. Errors are *CorruptError naming key.
func addrFromKey(key, pfx string) (netip.Addr, error) {
	if !strings.HasPrefix(key, pfx) {
		return netip.Addr{}, corrupt(key, fmt.Errorf("not under %q", pfx))
	}
	a, err := decodeAddrSuffix(key[len(pfx):])
	if err != nil {
		return netip.Addr{}, corrupt(key, err)
	}
	return a, nil
}
