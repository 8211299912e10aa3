package etcd

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
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
