package bolt

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// prefixesFrom builds prefixes from b, 18 bytes each: a family bit, 16
// address bytes (the last 4 for IPv4; IPv4-mapped when the first 12 say
// so), and a prefix length. Host bits, mapped addresses and lengths out of
// range are all made: store.CheckCIDR decides what the store takes.
func prefixesFrom(b []byte) []netip.Prefix {
	var ps []netip.Prefix
	for len(b) >= 18 {
		var a netip.Addr
		if b[0]&1 == 0 {
			a = netip.AddrFrom4([4]byte(b[13:17]))
		} else {
			a = netip.AddrFrom16([16]byte(b[1:17]))
		}
		ps = append(ps, netip.PrefixFrom(a, int(int8(b[17]))))
		b = b[18:]
	}
	return ps
}

// FuzzCIDREncodeDecode is FuzzDecodeCIDR's other direction: every CIDR that
// store.CheckCIDR lets the store write is read back as it was, and its value
// decodes to nothing else under another name.
func FuzzCIDREncodeDecode(f *testing.F) {
	for _, c := range seedCIDRs() {
		var pb []byte
		for _, p := range c.Prefixes {
			b := make([]byte, 18)
			if p.Addr().Is4() {
				a4 := p.Addr().As4()
				copy(b[13:], a4[:])
			} else {
				b[0] = 1
				a16 := p.Addr().As16()
				copy(b[1:], a16[:])
			}
			b[17] = byte(p.Bits())
			pb = append(pb, b...)
		}
		f.Add(c.Name, c.Terminating, c.Created.UnixNano(), c.Revision, pb)
	}
	f.Fuzz(func(t *testing.T, name string, terminating bool, created, rev int64, pb []byte) {
		c := cidrset.CIDR{Name: name, Prefixes: prefixesFrom(pb), Terminating: terminating, Created: time.Unix(0, created), Revision: rev}
		if store.CheckCIDR(c) != nil || rev < 1 {
			return // the store assigns revisions from 1
		}
		b := appendCIDRValue(nil, c)
		got, err := decodeCIDRValue(name, b)
		if err != nil {
			t.Fatalf("%+v: stored value %x does not decode: %v", c, b, err)
		}
		if !sameCIDR(got, c) {
			t.Fatalf("stored %+v, read back %+v", c, got)
		}
	})
}

// FuzzAddressEncodeDecode: every record CreateAddresses lets the store
// write (a storable address, an owner store.CheckOwner takes)
// is read back as it was, from its value and from its owner-index key,
// and the index key sorts with the owner's other keys in address order.
func FuzzAddressEncodeDecode(f *testing.F) {
	for i, p := range seedOwners() {
		a := seedAddrs()[i].As16()
		f.Add(p.Group, p.Resource, p.Namespace, p.Name, a[:], int64(i)*-1e15, int64(i+1))
	}
	f.Fuzz(func(t *testing.T, group, resource, namespace, name string, ab []byte, created, rev int64) {
		p := ipaddress.ParentRef{Group: group, Resource: resource, Namespace: namespace, Name: name}
		var a netip.Addr
		switch len(ab) {
		case 4:
			a = netip.AddrFrom4([4]byte(ab))
		case 16:
			a = netip.AddrFrom16([16]byte(ab))
		default:
			return
		}
		if ipaddress.ValidateAddr(a) != nil || checkAddr(a) != nil || store.CheckOwner(p) != nil || rev < 1 {
			return
		}
		v := addrValue{parent: p, created: created, rev: rev}
		b := appendAddrValue(nil, v)
		if got, err := decodeAddrValue(b); err != nil || got != v {
			t.Fatalf("stored %+v as %x, read back %+v, %v", v, b, got, err)
		}
		k := appendOwnerKey(nil, p, a)
		gp, ga, err := decodeOwnerKey(k)
		if err != nil || gp != p || ga != a {
			t.Fatalf("owner key of %+v %v is %x, read back %+v %v, %v", p, a, k, gp, ga, err)
		}
		// The owner's keys are contiguous and in address order: the key of
		// a's neighbour compares as the addresses do.
		for _, b := range []netip.Addr{a.Prev(), a.Next()} {
			if !b.IsValid() || ipaddress.ValidateAddr(b) != nil {
				continue
			}
			if got, want := bytes.Compare(k, appendOwnerKey(nil, p, b)), a.Compare(b); got != want {
				t.Fatalf("owner keys of %v and %v compare %d, addresses %d", a, b, got, want)
			}
		}
	})
}
