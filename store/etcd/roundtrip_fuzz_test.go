package etcd

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// prefixesFrom builds up to three prefixes from b, 18 bytes each: a family
// bit, 16 address bytes (the last 4 for IPv4, the first 12 then making it
// IPv4-mapped or not), a prefix length and a zone flag. Host bits, mapped
// addresses, zones and lengths out of range are all made: CheckCIDR
// decides what a store takes.
func prefixesFrom(b []byte) []netip.Prefix {
	var ps []netip.Prefix
	for len(b) >= 18 && len(ps) < 3 {
		var a netip.Addr
		if b[0]&1 == 0 {
			a = netip.AddrFrom4([4]byte(b[13:17]))
		} else {
			a = netip.AddrFrom16([16]byte(b[1:17]))
			if b[0]&2 != 0 {
				a = a.WithZone("eth0")
			}
		}
		ps = append(ps, netip.PrefixFrom(a, int(int8(b[17]))))
		b = b[18:]
	}
	return ps
}

// FuzzCIDREncodeDecode is FuzzCIDRValue's other direction: every CIDR that
// CreateCIDR or UpdateCIDR accepts (store.CheckCIDR) is read back as it
// was written, whatever its prefixes, flags and creation time.
func FuzzCIDREncodeDecode(f *testing.F) {
	pfx := func(s string) []byte {
		p := netip.MustParsePrefix(s)
		b := make([]byte, 18)
		a16 := p.Addr().As16()
		if p.Addr().Is4() {
			a4 := p.Addr().As4()
			copy(b[13:17], a4[:])
		} else {
			b[0] = 1
			copy(b[1:17], a16[:])
		}
		b[17] = byte(p.Bits())
		return b
	}
	f.Add("kubernetes", false, int64(1700000000123456789), pfx("10.96.0.0/28"))
	f.Add("dual", true, int64(-1), append(pfx("10.0.0.0/16"), pfx("fd00:10::/108")...))
	f.Add("mapped", false, int64(0), append(pfx("::ffff:10.0.0.0/104"), pfx("10.0.0.1/8")...))
	f.Add("none", false, int64(-9223372036854775808), []byte{})
	f.Fuzz(func(t *testing.T, name string, terminating bool, created int64, pb []byte) {
		c := cidrset.CIDR{Name: name, Prefixes: prefixesFrom(pb), Terminating: terminating, Created: time.Unix(0, created)}
		if store.CheckCIDR(c) != nil {
			return
		}
		got, err := cidrFromKV("/p/v1/cidrs/"+name, name, encodeCIDR(c), 5)
		if err != nil {
			t.Fatalf("%+v: stored value %s does not decode: %v", c, encodeCIDR(c), err)
		}
		c.Revision = 5
		for i, p := range c.Prefixes {
			c.Prefixes[i] = netip.PrefixFrom(p.Addr().WithZone(""), p.Bits()) // PrefixFrom has no zone
		}
		if !equalCIDR(got, c) {
			t.Fatalf("stored %+v, read back %+v", c, got)
		}
	})
}

// FuzzRecordEncodeDecode: every record CreateAddresses accepts (an owner
// store.CheckOwner takes) is read back with the same owner and creation time, in
// every version a record is written with, and the fast decoder reads what
// encoding/json reads.
func FuzzRecordEncodeDecode(f *testing.F) {
	f.Add("", "services", "default", "kubernetes", int64(5), uint8(2))
	f.Add("example.com", "widgets", "", "w/1%", int64(-1), uint8(1))
	f.Add("<g>", "a&b", "\"q\"", "\\", int64(0), uint8(3))
	f.Add("\u2028", "é", "\x7f", "\x01", int64(9223372036854775807), uint8(2))
	f.Fuzz(func(t *testing.T, group, resource, namespace, name string, created int64, version uint8) {
		p := ipaddress.ParentRef{Group: group, Resource: resource, Namespace: namespace, Name: name}
		if store.CheckOwner(p) != nil {
			return
		}
		v := []int{legacyRecordVersion, recordVersion, replacedRecordVersion}[int(version)%3]
		r := ipaddress.IPAddress{Addr: netip.MustParseAddr("10.0.0.1"), Parent: p, Created: time.Unix(0, created)}
		b := encodeRecordVersion(r, v)
		got, gotV, err := recordVersionFromKV("/p/v1/ips/4/0a000001", r.Addr, b, 9)
		if err != nil {
			t.Fatalf("%+v: stored value %s does not decode: %v", r, b, err)
		}
		if got.Parent != p || !got.Created.Equal(r.Created) || got.Addr != r.Addr || got.Revision != 9 || gotV != v {
			t.Fatalf("stored %+v v%d as %s, read back %+v v%d", r, v, b, got, gotV)
		}
	})
}

// unescape is the inverse of escape, for FuzzEscape.
func unescape(t *testing.T, e string) string {
	var b strings.Builder
	for i := 0; i < len(e); i++ {
		if e[i] != '%' {
			b.WriteByte(e[i])
			continue
		}
		if i+2 >= len(e) || strings.ToUpper(e[i+1:i+3]) != e[i+1:i+3] {
			t.Fatalf("escape wrote %q: a %% not followed by two upper-case hex digits", e)
		}
		n, err := strconv.ParseUint(e[i+1:i+3], 16, 8)
		if err != nil {
			t.Fatalf("escape wrote %q: %v", e, err)
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String()
}

// FuzzEscape: an owner field's key segment has no '/', only unreserved
// bytes and %XX, and decodes to the field (so escape is injective, and no
// two owners share a key prefix).
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "a/b", "a%2Fb", "é", "%", "A-z.0_9~", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e := escape(s)
		for i := range len(e) {
			c := e[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._~-%", c) >= 0) {
				t.Fatalf("escape(%q) = %q holds %q", s, e, c)
			}
		}
		if got := unescape(t, e); got != s {
			t.Fatalf("escape(%q) = %q, which reads as %q", s, e, got)
		}
	})
}
