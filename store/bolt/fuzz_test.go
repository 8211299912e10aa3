package bolt

import (
	"bytes"
	"errors"
	"math"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// The fuzz targets check every decoder: it never panics; what it accepts
// re-encodes to the same bytes (one encoding per value); what it refuses is
// an error matching store.ErrCorrupt.

func seedOwners() []ipaddress.ParentRef {
	return []ipaddress.ParentRef{
		{Resource: "services", Namespace: "default", Name: "kubernetes"},
		{Group: "example.com", Resource: "widgets", Namespace: "ns-1", Name: "w.1"},
		{},
	}
}

func seedAddrs() []netip.Addr {
	return []netip.Addr{
		netip.MustParseAddr("10.96.0.1"),
		netip.MustParseAddr("0.0.0.0"),
		netip.MustParseAddr("255.255.255.255"),
		netip.MustParseAddr("2001:db8::1"),
		netip.MustParseAddr("::1.2.3.4"), // IPv4-compatible, not mapped: stored as IPv6
		netip.MustParseAddr("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
	}
}

func seedCIDRs() []cidrset.CIDR {
	return []cidrset.CIDR{
		{Name: "kubernetes", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/28")}, Created: time.Unix(1700000000, 5), Revision: 1},
		{Name: "dual", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/16"), netip.MustParsePrefix("fd00:10::/108")}, Terminating: true, Created: time.Unix(0, -1), Revision: math.MaxInt64},
		{Name: "none", Created: time.Unix(0, 0), Revision: 300},
		{Name: "odd", Prefixes: []netip.Prefix{netip.PrefixFrom(netip.MustParseAddr("10.0.0.1"), 8), netip.MustParsePrefix("::/0")}, Created: time.Unix(0, math.MinInt64), Revision: 2},
	}
}

func checkCorrupt(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("%s: error %v does not match store.ErrCorrupt", what, err)
	}
}

func FuzzDecodeAddress(f *testing.F) {
	for i, p := range seedOwners() {
		f.Add(appendAddrValue(nil, addrValue{parent: p, created: int64(i) * -1e15, rev: int64(i + 1)}))
	}
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2, 0, 1, 0, 0, 0, 0})
	f.Add([]byte{1, 0x80, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeAddrValue(b)
		if err != nil {
			checkCorrupt(t, "decodeAddrValue", err)
			return
		}
		if got := appendAddrValue(nil, v); !bytes.Equal(got, b) {
			t.Fatalf("decoded %+v re-encodes to %x, not %x", v, got, b)
		}
	})
}

func FuzzDecodeCIDR(f *testing.F) {
	for _, c := range seedCIDRs() {
		f.Add(c.Name, appendCIDRValue(nil, c))
	}
	f.Add("x", []byte{})
	f.Add("x", []byte{1, 2, 0, 1, 0})
	f.Add("x", []byte{1, 0, 0, 1, 1, 4, 10, 0, 0, 0, 33})
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		c, err := decodeCIDRValue(name, b)
		if err != nil {
			checkCorrupt(t, "decodeCIDRValue", err)
			return
		}
		if c.Name != name {
			t.Fatalf("decoded name %q, key %q", c.Name, name)
		}
		if got := appendCIDRValue(nil, c); !bytes.Equal(got, b) {
			t.Fatalf("decoded %+v re-encodes to %x, not %x", c, got, b)
		}
	})
}

func FuzzDecodeAddrKey(f *testing.F) {
	for _, a := range seedAddrs() {
		f.Add(appendAddrKey(nil, a))
	}
	f.Add([]byte{})
	f.Add([]byte{4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1})
	f.Add([]byte{5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 1})
	f.Add([]byte{6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1})
	f.Fuzz(func(t *testing.T, k []byte) {
		a, err := decodeAddrKey(k)
		if err != nil {
			checkCorrupt(t, "decodeAddrKey", err)
			return
		}
		if checkAddr(a) != nil || ipaddress.ValidateAddr(a) != nil {
			t.Fatalf("decoded %v, which CreateAddresses refuses", a)
		}
		if got := appendAddrKey(nil, a); !bytes.Equal(got, k) {
			t.Fatalf("decoded %v re-encodes to %x, not %x", a, got, k)
		}
	})
}

func FuzzDecodeOwnerKey(f *testing.F) {
	for i, p := range seedOwners() {
		f.Add(appendOwnerKey(nil, p, seedAddrs()[i]))
	}
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, k []byte) {
		p, a, err := decodeOwnerKey(k)
		if err != nil {
			checkCorrupt(t, "decodeOwnerKey", err)
			return
		}
		if got := appendOwnerKey(nil, p, a); !bytes.Equal(got, k) {
			t.Fatalf("decoded %+v %v re-encodes to %x, not %x", p, a, got, k)
		}
		if !bytes.HasPrefix(k, appendOwner(nil, p)) {
			t.Fatalf("owner index key %x does not start with its owner's encoding", k)
		}
	})
}

func FuzzDecodeRevision(f *testing.F) {
	f.Add(encodeRevision(0))
	f.Add(encodeRevision(1))
	f.Add(encodeRevision(math.MaxInt64))
	f.Add([]byte{0xff, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRevision(b)
		if err != nil {
			checkCorrupt(t, "decodeRevision", err)
			return
		}
		if r < 0 {
			t.Fatalf("decoded negative revision %d", r)
		}
		if got := encodeRevision(r); !bytes.Equal(got, b) {
			t.Fatalf("decoded %d re-encodes to %x, not %x", r, got, b)
		}
	})
}

func FuzzDecodeFormatVersion(f *testing.F) {
	f.Add([]byte{formatVersion})
	f.Add([]byte{})
	f.Add([]byte{1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeFormatVersion(b)
		if err != nil {
			checkCorrupt(t, "decodeFormatVersion", err)
			return
		}
		if !bytes.Equal([]byte{v}, b) {
			t.Fatalf("decoded %d from %x", v, b)
		}
	})
}

// TestCodecRoundTrip checks the other direction: what is encoded decodes
// to the same value.
func TestCodecRoundTrip(t *testing.T) {
	for _, c := range seedCIDRs() {
		got, err := decodeCIDRValue(c.Name, appendCIDRValue(nil, c))
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		if !sameCIDR(got, c) {
			t.Fatalf("CIDR %+v decodes to %+v", c, got)
		}
	}
	for i, a := range seedAddrs() {
		k := appendAddrKey(nil, a)
		if got, err := decodeAddrKey(k); err != nil || got != a {
			t.Fatalf("address key of %v decodes to %v, %v", a, got, err)
		}
		p := seedOwners()[i%len(seedOwners())]
		gp, ga, err := decodeOwnerKey(appendOwnerKey(nil, p, a))
		if err != nil || gp != p || ga != a {
			t.Fatalf("owner key of %+v %v decodes to %+v %v, %v", p, a, gp, ga, err)
		}
		v := addrValue{parent: p, created: time.Now().UnixNano(), rev: int64(i + 1)}
		if got, err := decodeAddrValue(appendAddrValue(nil, v)); err != nil || got != v {
			t.Fatalf("address value %+v decodes to %+v, %v", v, got, err)
		}
	}
	// Keys sort by family, then address.
	addrs := seedAddrs()
	for i := range addrs {
		for j := range addrs {
			want := addrs[i].Compare(addrs[j])
			if got := bytes.Compare(appendAddrKey(nil, addrs[i]), appendAddrKey(nil, addrs[j])); got != want {
				t.Fatalf("key order of %v and %v is %d, want %d", addrs[i], addrs[j], got, want)
			}
		}
	}
}

// sameCIDR reports whether a and b hold the same fields (Created as an
// instant).
func sameCIDR(a, b cidrset.CIDR) bool {
	return a.Name == b.Name && a.Terminating == b.Terminating && a.Revision == b.Revision &&
		a.Created.Equal(b.Created) && slices.Equal(a.Prefixes, b.Prefixes)
}
