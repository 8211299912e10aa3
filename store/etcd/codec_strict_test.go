package etcd

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"

	"github.com/netipam/netipam/ipaddress"
)

// TestDecodeCIDRRefusesWhatItNeverWrites: a CIDR value that encodeCIDR
// writes for no CIDR is a *CorruptError naming the key, not read as the
// CIDR it looks closest to.
func TestDecodeCIDRRefusesWhatItNeverWrites(t *testing.T) {
	const key = "/p/v1/cidrs/x"
	for _, tc := range []struct{ name, value string }{
		// Refused before as well.
		{"not JSON", "\x00garbage"},
		{"unknown version", `{"v":2,"prefixes":["10.0.0.0/8"],"created":0}`},
		{"zone", `{"v":1,"prefixes":["fe80::%eth0/64"],"created":0}`},
		{"prefix longer than the address", `{"v":1,"prefixes":["10.0.0.0/33"],"created":0}`},
		{"leading zero in the length", `{"v":1,"prefixes":["10.0.0.0/08"],"created":0}`},
		{"two objects", `{"v":1,"prefixes":[],"created":0}{}`},
		// JSON that encoding/json reads and json.Marshal never writes.
		{"space inside", `{"v": 1,"prefixes":["10.0.0.0/8"],"created":0}`},
		{"space before", ` {"v":1,"prefixes":["10.0.0.0/8"],"created":0}`},
		{"newline after", "{\"v\":1,\"prefixes\":[\"10.0.0.0/8\"],\"created\":0}\n"},
		{"unknown field", `{"v":1,"prefixes":["10.0.0.0/8"],"created":0,"labels":{}}`},
		{"repeated key", `{"v":1,"prefixes":["10.0.0.0/8"],"prefixes":["11.0.0.0/8"],"created":0}`},
		{"key in upper case", `{"v":1,"Prefixes":["10.0.0.0/8"],"created":0}`},
		{"escaped key", `{"\u0076":1,"prefixes":["10.0.0.0/8"],"created":0}`},
		{"keys out of order", `{"v":1,"created":0,"prefixes":["10.0.0.0/8"]}`},
		{"no created", `{"v":1,"prefixes":["10.0.0.0/8"]}`},
		{"no prefixes", `{"v":1,"created":0}`},
		{"null prefixes", `{"v":1,"prefixes":null,"created":0}`},
		{"null created", `{"v":1,"prefixes":["10.0.0.0/8"],"created":null}`},
		{"terminating false", `{"v":1,"prefixes":["10.0.0.0/8"],"terminating":false,"created":0}`},
		{"terminating null", `{"v":1,"prefixes":["10.0.0.0/8"],"terminating":null,"created":0}`},
		{"created -0", `{"v":1,"prefixes":["10.0.0.0/8"],"created":-0}`},
		{"escaped slash", `{"v":1,"prefixes":["10.0.0.0\/8"],"created":0}`},
		{"escaped digit", `{"v":1,"prefixes":["\u0031\u0030.0.0.0/8"],"created":0}`},
		// Prefixes netip parses but never prints so.
		{"upper-case IPv6", `{"v":1,"prefixes":["2001:DB8::/32"],"created":0}`},
		{"IPv6 not compressed", `{"v":1,"prefixes":["2001:db8:0:0::/64"],"created":0}`},
		{"IPv4-mapped in hex", `{"v":1,"prefixes":["::ffff:a00:0/104"],"created":0}`},
		{"zero run not compressed", `{"v":1,"prefixes":["0:0::/0"],"created":0}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := cidrFromKV(key, "x", []byte(tc.value), 7)
			if err == nil {
				t.Fatalf("%s read as %+v, which is stored as %s", tc.value, c, encodeCIDR(c))
			}
			checkCorrupt(t, err, key)
		})
	}
}

// TestDecodeCIDRKeepsWhatItWrites: what CreateCIDR stores (store.CheckCIDR:
// any valid prefix, any number of them) reads back unchanged, prefixes
// unmasked, and is stored again as the same bytes.
func TestDecodeCIDRKeepsWhatItWrites(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        []string
	}{
		{"single", `{"v":1,"prefixes":["10.96.0.0/28"],"created":1700000000123456789}`, []string{"10.96.0.0/28"}},
		{"dual, terminating", `{"v":1,"prefixes":["10.0.0.0/16","fd00:10::/108"],"terminating":true,"created":-1}`, []string{"10.0.0.0/16", "fd00:10::/108"}},
		{"host bits", `{"v":1,"prefixes":["10.0.0.1/24"],"created":0}`, []string{"10.0.0.1/24"}},
		{"IPv4-mapped", `{"v":1,"prefixes":["::ffff:10.0.0.0/104"],"created":0}`, []string{"::ffff:10.0.0.0/104"}},
		{"repeated prefix", `{"v":1,"prefixes":["10.0.0.0/8","10.0.0.0/8"],"created":0}`, []string{"10.0.0.0/8", "10.0.0.0/8"}},
		{"two of a family", `{"v":1,"prefixes":["10.0.0.0/8","11.0.0.0/8"],"created":0}`, []string{"10.0.0.0/8", "11.0.0.0/8"}},
		{"three", `{"v":1,"prefixes":["10.0.0.0/8","fd00::/64","11.0.0.0/8"],"created":0}`, []string{"10.0.0.0/8", "fd00::/64", "11.0.0.0/8"}},
		{"none", `{"v":1,"prefixes":[],"created":-9223372036854775808}`, nil},
		{"everything", `{"v":1,"prefixes":["0.0.0.0/0","::/0"],"created":9223372036854775807}`, []string{"0.0.0.0/0", "::/0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := cidrFromKV("/p/v1/cidrs/x", "x", []byte(tc.value), 7)
			if err != nil {
				t.Fatal(err)
			}
			var want []netip.Prefix
			for _, s := range tc.want {
				want = append(want, netip.MustParsePrefix(s))
			}
			if !slices.Equal(c.Prefixes, want) {
				t.Errorf("prefixes %v, want %v", c.Prefixes, want)
			}
			if enc := encodeCIDR(c); !bytes.Equal(enc, []byte(tc.value)) {
				t.Errorf("read as %+v, stored again as %s", c, enc)
			}
		})
	}
}

// TestDecodeRecordRefusesWhatItNeverWrites: a record value that
// encodeRecordVersion writes for no record is a *CorruptError naming the
// key, whichever decoder, the fast or encoding/json, meets it.
func TestDecodeRecordRefusesWhatItNeverWrites(t *testing.T) {
	const key = "/p/v1/ips/4/0a000001"
	a := netip.MustParseAddr("10.0.0.1")
	for _, tc := range []struct{ name, value string }{
		// Refused before as well.
		{"not JSON", "[]"},
		{"empty", ""},
		{"version 0", `{"v":0,"resource":"services","name":"a","created":1}`},
		{"version 4", `{"v":4,"resource":"services","name":"a","created":1}`},
		{"created past int64", `{"v":2,"resource":"services","name":"a","created":9223372036854775808}`},
		{"created not an integer", `{"v":2,"resource":"services","name":"a","created":1.5}`},
		{"created with a leading zero", `{"v":2,"resource":"services","name":"a","created":01}`},
		// JSON that encoding/json reads and json.Marshal never writes.
		{"space inside", `{"v":2, "resource":"services","name":"a","created":1}`},
		{"newline after", "{\"v\":2,\"resource\":\"services\",\"name\":\"a\",\"created\":1}\n"},
		{"unknown field", `{"v":2,"resource":"services","name":"a","created":1,"uid":"u"}`},
		{"repeated key", `{"v":2,"resource":"services","name":"a","name":"b","created":1}`},
		{"key in upper case", `{"v":2,"Resource":"services","name":"a","created":1}`},
		{"keys out of order", `{"v":2,"name":"a","resource":"services","created":1}`},
		{"no created", `{"v":2,"resource":"services","name":"a"}`},
		{"no name", `{"v":2,"resource":"services","created":1}`},
		{"null name", `{"v":2,"resource":"services","name":null,"created":1}`},
		{"empty group", `{"v":2,"group":"","resource":"services","name":"a","created":1}`},
		{"empty namespace", `{"v":2,"resource":"services","namespace":"","name":"a","created":1}`},
		{"created -0", `{"v":2,"resource":"services","name":"a","created":-0}`},
		{"< unescaped", `{"v":2,"resource":"services","name":"a<b","created":1}`},
		{"& unescaped", `{"v":1,"group":"a&b","resource":"services","name":"a","created":1}`},
		{"escape not needed", `{"v":2,"resource":"services","name":"\u0061","created":1}`},
		{"escaped slash", `{"v":2,"resource":"services","name":"a\/b","created":1}`},
		{"escape in upper case", `{"v":2,"resource":"services","name":"a\u003Cb","created":1}`},
		{"U+2028 unescaped", "{\"v\":2,\"resource\":\"services\",\"name\":\"a\u2028\",\"created\":1}"},
		{"not UTF-8", "{\"v\":2,\"resource\":\"services\",\"name\":\"a\xff\",\"created\":1}"},
		{"U+FFFD escaped", `{"v":2,"resource":"services","name":"a\ufffd","created":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, v, err := recordVersionFromKV(key, a, []byte(tc.value), 9)
			if err == nil {
				t.Fatalf("%q read as %+v, which is stored as %s", tc.value, r, encodeRecordVersion(r, v))
			}
			checkCorrupt(t, err, key)
		})
	}
}

// TestDecodeRecordKeepsWhatItWrites: a record of any version, with any
// owner CreateAddresses takes (valid UTF-8, fields possibly empty), reads
// back as written and is stored again as the same bytes.
func TestDecodeRecordKeepsWhatItWrites(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		version     int
		owner       ipaddress.ParentRef
	}{
		{"layout 2", `{"v":2,"resource":"services","namespace":"default","name":"kubernetes","created":5}`, recordVersion, ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "kubernetes"}},
		{"layout 1", `{"v":1,"group":"example.com","resource":"widgets","name":"w/1%","created":-1}`, legacyRecordVersion, ipaddress.ParentRef{Group: "example.com", Resource: "widgets", Name: "w/1%"}},
		{"replaced", `{"v":3,"resource":"services","name":"a","created":0}`, replacedRecordVersion, ipaddress.ParentRef{Resource: "services", Name: "a"}},
		{"escaped as json.Marshal does", `{"v":2,"group":"\u003cg\u003e","resource":"a\u0026b","namespace":"\"q\"","name":"\\\u2028é\u0001","created":9223372036854775807}`, recordVersion, ipaddress.ParentRef{Group: "<g>", Resource: "a&b", Namespace: `"q"`, Name: "\\\u2028é\x01"}},
		{"empty owner", `{"v":2,"resource":"","name":"","created":-9223372036854775808}`, recordVersion, ipaddress.ParentRef{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, v, err := recordVersionFromKV("/p/v1/ips/4/0a000001", netip.MustParseAddr("10.0.0.1"), []byte(tc.value), 9)
			if err != nil {
				t.Fatal(err)
			}
			if r.Parent != tc.owner || v != tc.version {
				t.Errorf("read %+v v%d, want owner %+v v%d", r, v, tc.owner, tc.version)
			}
			if enc := encodeRecordVersion(r, v); !bytes.Equal(enc, []byte(tc.value)) {
				t.Errorf("read as %+v, stored again as %s", r, enc)
			}
		})
	}
}
