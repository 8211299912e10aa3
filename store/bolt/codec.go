package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"

	"go.etcd.io/bbolt"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// Versions written by this package. formatVersion is the layout of the file
// (buckets and keys), kept in the meta bucket; valueVersion is the first
// byte of every CIDR and address value.
const (
	formatVersion = 1
	valueVersion  = 1
)

// Bucket and meta key names.
var (
	bucketMeta   = []byte("meta")
	bucketCIDRs  = []byte("cidrs")
	bucketAddrs  = []byte("addrs")
	bucketOwners = []byte("owners")

	keyVersion  = []byte("version")
	keyRevision = []byte("revision")
)

// addrKeyLen is the length of an address key: family byte and 16 bytes.
const addrKeyLen = 17

// Family bytes of keys and prefixes; the IP version numbers, so IPv4 sorts
// before IPv6.
const (
	fam4 = 4
	fam6 = 6
)

// flagTerminating is bit 0 of a CIDR value's flags byte.
const flagTerminating = 1

// The limits store.CheckCIDR puts on every store's CIDRs are this file's:
// a name is a bbolt key, and a value counts its prefixes in one byte. Each
// line fails to compile if a limit outgrows the format.
const (
	_ = uint8(store.MaxCIDRPrefixes)
	_ = uint(bbolt.MaxKeySize - store.MaxCIDRNameLen)
)

// The limit store.CheckOwner puts on every store's owners is this file's
// too: an owner-index key is the four fields, each after its length as a
// uvarint, and an address key, and a bbolt key holds at most
// bbolt.MaxKeySize bytes. In fields of store.MaxOwnerLen bytes in all, a
// length takes at most three uvarint bytes, and at most one length takes
// three (two would count 2<<14 bytes), so the longest key fits: each line
// fails to compile if one of these stops being so.
const (
	_ = uint(1<<21 - 1 - store.MaxOwnerLen)
	_ = uint(2<<14 - 1 - store.MaxOwnerLen)
	_ = uint(bbolt.MaxKeySize - (store.MaxOwnerLen + 3 + 2 + 2 + 2 + addrKeyLen))
)

// corrupt returns an error wrapping store.ErrCorrupt for a decoder.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), store.ErrCorrupt)
}

var errTruncated = corrupt("truncated")

// appendAddrKey appends the 17-byte key of a: the family byte, then the
// address as a 128-bit big-endian number (IPv4 in the last four bytes).
// a must be valid and zoneless (checkAddr).
func appendAddrKey(dst []byte, a netip.Addr) []byte {
	if a.Is4() {
		b := a.As4()
		dst = append(dst, fam4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
		return append(dst, b[:]...)
	}
	b := a.As16()
	dst = append(dst, fam6)
	return append(dst, b[:]...)
}

// decodeAddrKey is the inverse of appendAddrKey.
func decodeAddrKey(k []byte) (netip.Addr, error) {
	if len(k) != addrKeyLen {
		return netip.Addr{}, corrupt("address key of %d bytes, want %d", len(k), addrKeyLen)
	}
	switch k[0] {
	case fam4:
		for _, b := range k[1:13] {
			if b != 0 {
				return netip.Addr{}, corrupt("IPv4 address key with bits set above the address")
			}
		}
		return netip.AddrFrom4([4]byte(k[13:])), nil
	case fam6:
		a := netip.AddrFrom16([16]byte(k[1:]))
		if a.Is4In6() { // CreateAddresses refuses these: never written
			return netip.Addr{}, corrupt("IPv6 address key holding the IPv4-mapped %s", a)
		}
		return a, nil
	}
	return netip.Addr{}, corrupt("address key of unknown family %d", k[0])
}

// checkAddr reports whether a can be stored: valid and without a zone.
func checkAddr(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return errors.New("bolt: the zero address cannot be stored")
	case a.Zone() != "":
		return fmt.Errorf("bolt: address %s has a zone and cannot be stored", a)
	}
	return nil
}

// appendOwner appends the owner encoding: Group, Resource, Namespace and
// Name, each as a uvarint length and its bytes. It is self-delimiting, so
// no owner's encoding is a prefix of another's.
func appendOwner(dst []byte, p ipaddress.ParentRef) []byte {
	for _, s := range [4]string{p.Group, p.Resource, p.Namespace, p.Name} {
		dst = binary.AppendUvarint(dst, uint64(len(s)))
		dst = append(dst, s...)
	}
	return dst
}

// readOwner decodes an owner encoding at the start of b.
func readOwner(b []byte) (ipaddress.ParentRef, []byte, error) {
	var f [4]string
	for i := range f {
		n, rest, err := readUvarint(b)
		if err != nil {
			return ipaddress.ParentRef{}, nil, err
		}
		if n > uint64(len(rest)) {
			return ipaddress.ParentRef{}, nil, corrupt("owner field of %d bytes, %d left", n, len(rest))
		}
		f[i], b = string(rest[:n]), rest[n:]
	}
	return ipaddress.ParentRef{Group: f[0], Resource: f[1], Namespace: f[2], Name: f[3]}, b, nil
}

// appendOwnerKey appends the owner-index key of (p, a): the owner encoding,
// then the address key. p must pass store.CheckOwner, which holds the key
// to bbolt's limit (see the constants below).
func appendOwnerKey(dst []byte, p ipaddress.ParentRef, a netip.Addr) []byte {
	return appendAddrKey(appendOwner(dst, p), a)
}

// decodeOwnerKey is the inverse of appendOwnerKey.
func decodeOwnerKey(k []byte) (ipaddress.ParentRef, netip.Addr, error) {
	p, rest, err := readOwner(k)
	if err != nil {
		return p, netip.Addr{}, err
	}
	a, err := decodeAddrKey(rest)
	return p, a, err
}

// readUvarint reads a uvarint in its shortest form; longer encodings of the
// same number are corrupt, so every decoded value has one encoding.
func readUvarint(b []byte) (uint64, []byte, error) {
	x, n := binary.Uvarint(b)
	switch {
	case n == 0:
		return 0, nil, errTruncated
	case n < 0:
		return 0, nil, corrupt("varint overflows 64 bits")
	case n > 1 && b[n-1] == 0:
		return 0, nil, corrupt("varint not in its shortest form")
	}
	return x, b[n:], nil
}

// appendVarint appends a zig-zag encoded signed varint.
func appendVarint(dst []byte, x int64) []byte { return binary.AppendVarint(dst, x) }

func readVarint(b []byte) (int64, []byte, error) {
	ux, rest, err := readUvarint(b)
	if err != nil {
		return 0, nil, err
	}
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x, rest, nil
}

// readRevision reads a record's revision: a uvarint in [1, MaxInt64].
func readRevision(b []byte) (int64, []byte, error) {
	r, rest, err := readUvarint(b)
	if err != nil {
		return 0, nil, err
	}
	if r == 0 || r > math.MaxInt64 {
		return 0, nil, corrupt("revision %d out of range", r)
	}
	return int64(r), rest, nil
}

// readVersion checks and strips a value's version byte.
func readVersion(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, corrupt("empty value")
	}
	if b[0] != valueVersion {
		return nil, corrupt("value version %d, want %d", b[0], valueVersion)
	}
	return b[1:], nil
}

// addrValue is an address record without its address (the key).
type addrValue struct {
	parent  ipaddress.ParentRef
	created int64 // Unix nanoseconds
	rev     int64
}

func (v addrValue) record(a netip.Addr) ipaddress.IPAddress {
	return ipaddress.IPAddress{Addr: a, Parent: v.parent, Created: unixTime(v.created), Revision: v.rev}
}

// appendAddrValue appends the value of an address record:
// version ‖ varint created ‖ uvarint revision ‖ owner.
func appendAddrValue(dst []byte, v addrValue) []byte {
	dst = append(dst, valueVersion)
	dst = appendVarint(dst, v.created)
	dst = binary.AppendUvarint(dst, uint64(v.rev))
	return appendOwner(dst, v.parent)
}

// decodeAddrValue is the inverse of appendAddrValue.
func decodeAddrValue(b []byte) (addrValue, error) {
	var v addrValue
	b, err := readVersion(b)
	if err != nil {
		return v, err
	}
	if v.created, b, err = readVarint(b); err != nil {
		return v, err
	}
	if v.rev, b, err = readRevision(b); err != nil {
		return v, err
	}
	if v.parent, b, err = readOwner(b); err != nil {
		return v, err
	}
	if len(b) != 0 {
		return v, corrupt("%d trailing bytes", len(b))
	}
	return v, nil
}

// appendCIDRValue appends the value of a CIDR (its name is the key):
// version ‖ flags ‖ varint created ‖ uvarint revision ‖ count ‖
// count × (family ‖ 4 or 16 address bytes ‖ prefix length).
// c must pass store.CheckCIDR.
func appendCIDRValue(dst []byte, c cidrset.CIDR) []byte {
	var flags byte
	if c.Terminating {
		flags |= flagTerminating
	}
	dst = append(dst, valueVersion, flags)
	dst = appendVarint(dst, c.Created.UnixNano())
	dst = binary.AppendUvarint(dst, uint64(c.Revision))
	dst = append(dst, byte(len(c.Prefixes)))
	for _, p := range c.Prefixes {
		a := p.Addr()
		if a.Is4() {
			b := a.As4()
			dst = append(dst, fam4)
			dst = append(dst, b[:]...)
		} else {
			b := a.As16()
			dst = append(dst, fam6)
			dst = append(dst, b[:]...)
		}
		dst = append(dst, byte(p.Bits()))
	}
	return dst
}

// decodeCIDRValue is the inverse of appendCIDRValue; name is the key.
func decodeCIDRValue(name string, b []byte) (cidrset.CIDR, error) {
	c := cidrset.CIDR{Name: name}
	b, err := readVersion(b)
	if err != nil {
		return c, err
	}
	if len(b) == 0 {
		return c, errTruncated
	}
	flags := b[0]
	if flags&^flagTerminating != 0 {
		return c, corrupt("unknown CIDR flags %#x", flags)
	}
	c.Terminating = flags&flagTerminating != 0
	var created int64
	if created, b, err = readVarint(b[1:]); err != nil {
		return c, err
	}
	c.Created = unixTime(created)
	if c.Revision, b, err = readRevision(b); err != nil {
		return c, err
	}
	if len(b) == 0 {
		return c, errTruncated
	}
	n := int(b[0])
	b = b[1:]
	if n > 0 {
		c.Prefixes = make([]netip.Prefix, 0, min(n, len(b)/6))
	}
	for range n {
		if len(b) == 0 {
			return c, errTruncated
		}
		var a netip.Addr
		switch b[0] {
		case fam4:
			if len(b) < 6 {
				return c, errTruncated
			}
			a, b = netip.AddrFrom4([4]byte(b[1:5])), b[5:]
		case fam6:
			if len(b) < 18 {
				return c, errTruncated
			}
			a, b = netip.AddrFrom16([16]byte(b[1:17])), b[17:]
		default:
			return c, corrupt("prefix of unknown family %d", b[0])
		}
		bits := int(b[0])
		b = b[1:]
		if bits > a.BitLen() {
			return c, corrupt("prefix length %d longer than the address", bits)
		}
		c.Prefixes = append(c.Prefixes, netip.PrefixFrom(a, bits))
	}
	if len(b) != 0 {
		return c, corrupt("%d trailing bytes", len(b))
	}
	return c, nil
}

// encodeRevision is the meta revision value: 8 bytes big-endian.
func encodeRevision(rev int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(rev)) }

// decodeRevision is the inverse of encodeRevision.
func decodeRevision(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, corrupt("revision of %d bytes, want 8", len(b))
	}
	r := binary.BigEndian.Uint64(b)
	if r > math.MaxInt64 {
		return 0, corrupt("revision %d out of range", r)
	}
	return int64(r), nil
}

// decodeFormatVersion reads the meta format version: one byte.
func decodeFormatVersion(b []byte) (byte, error) {
	if len(b) != 1 {
		return 0, corrupt("format version of %d bytes, want 1", len(b))
	}
	return b[0], nil
}

// unixTime is the inverse of time.Time.UnixNano as this package stores it.
func unixTime(ns int64) time.Time { return time.Unix(0, ns) }
