package etcd

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// valueVersion is the version of the value encoding, written as "v" in every
// value. A decoder meeting another version reports the value as corrupt
// rather than guess.
const valueVersion = 1

// CorruptError reports a key whose key or value this store cannot decode.
// It matches store.ErrCorrupt.
type CorruptError struct {
	Key string
	Err error
}

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

// recordValue is the stored form of an address record, under the address
// key and the owner key alike. The address is the key; the revision is the
// key's CreateRevision (records are never updated).
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
	v := cidrValue{V: valueVersion, Prefixes: make([]string, len(c.Prefixes)), Terminating: c.Terminating, Created: c.Created.UnixNano()}
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
func decodeCIDR(b []byte) (cidrset.CIDR, error) {
	var v cidrValue
	if err := unmarshal(b, &v); err != nil {
		return cidrset.CIDR{}, err
	}
	if v.V != valueVersion {
		return cidrset.CIDR{}, fmt.Errorf("value version %d, want %d", v.V, valueVersion)
	}
	c := cidrset.CIDR{Terminating: v.Terminating, Created: time.Unix(0, v.Created)}
	for _, s := range v.Prefixes {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return cidrset.CIDR{}, err
		}
		c.Prefixes = append(c.Prefixes, p)
	}
	return c, nil
}

// encodeRecord returns the value stored for r.
func encodeRecord(r ipaddress.IPAddress) []byte {
	b, err := json.Marshal(recordValue{
		V:         valueVersion,
		Group:     r.Parent.Group,
		Resource:  r.Parent.Resource,
		Namespace: r.Parent.Namespace,
		Name:      r.Parent.Name,
		Created:   r.Created.UnixNano(),
	})
	if err != nil {
		panic(err)
	}
	return b
}

// decodeRecord decodes a record value. It sets neither Addr nor Revision.
func decodeRecord(b []byte) (ipaddress.IPAddress, error) {
	var v recordValue
	if err := unmarshal(b, &v); err != nil {
		return ipaddress.IPAddress{}, err
	}
	if v.V != valueVersion {
		return ipaddress.IPAddress{}, fmt.Errorf("value version %d, want %d", v.V, valueVersion)
	}
	return ipaddress.IPAddress{
		Parent:  ipaddress.ParentRef{Group: v.Group, Resource: v.Resource, Namespace: v.Namespace, Name: v.Name},
		Created: time.Unix(0, v.Created),
	}, nil
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
	if a.Is4() {
		b := a.As4()
		return "4/" + hex.EncodeToString(b[:])
	}
	b := a.As16()
	return "6/" + hex.EncodeToString(b[:])
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
// CreateRevision. Errors are *CorruptError naming key.
func recordFromKV(key string, a netip.Addr, value []byte, createRev int64) (ipaddress.IPAddress, error) {
	r, err := decodeRecord(value)
	if err != nil {
		return ipaddress.IPAddress{}, corrupt(key, err)
	}
	r.Addr, r.Revision = a, createRev
	return r, nil
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
