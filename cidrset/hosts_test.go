package cidrset

import (
	"math/big"
	"net/netip"
	"testing"
)

func prefixOf(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addrOf(s string) netip.Addr     { return netip.MustParseAddr(s) }

func pow2minus(h uint, minus int64) *big.Int {
	n := new(big.Int).Lsh(big.NewInt(1), h)
	return n.Sub(n, big.NewInt(minus))
}

// SPEC 2: IPv4 offers 2^h-2, IPv6 2^h-1; /31, /32, /128 offer none; /127 one.
// Beyond the reference, any prefix length works with exact 128-bit counts.
func TestSizeIsTwoToTheHostBitsMinusNetworkAndIPv4Broadcast(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   *big.Int
	}{
		{"10.96.0.0/28", big.NewInt(14)},
		{"10.0.0.0/24", big.NewInt(254)},
		{"10.0.0.0/30", big.NewInt(2)},
		{"10.0.0.0/31", big.NewInt(0)},
		{"10.0.0.1/32", big.NewInt(0)},
		{"0.0.0.0/0", pow2minus(32, 2)},
		{"2001:db8::/127", big.NewInt(1)},
		{"2001:db8::1/128", big.NewInt(0)},
		{"2001:db8::/112", pow2minus(16, 1)},
		{"2001:db8::/64", pow2minus(64, 1)},
		{"2001:db8::/48", pow2minus(80, 1)},
		{"::/0", pow2minus(128, 1)},
	} {
		if got := Size(prefixOf(tc.prefix)).Big(); got.Cmp(tc.want) != 0 {
			t.Errorf("Size(%s) = %s, want %s", tc.prefix, got, tc.want)
		}
	}
}

func TestNetworkAddressIsNeverOffered(t *testing.T) {
	for _, p := range []string{"10.0.0.0/24", "2001:db8::/64", "::/0", "0.0.0.0/0"} {
		if HostContains(prefixOf(p), prefixOf(p).Addr()) {
			t.Errorf("%s offers its network address", p)
		}
	}
}

func TestIPv4BroadcastIsNeverOfferedButIPv6AllOnesIs(t *testing.T) {
	if HostContains(prefixOf("10.0.0.0/24"), addrOf("10.0.0.255")) {
		t.Error("10.0.0.0/24 offers its broadcast address")
	}
	if !HostContains(prefixOf("10.0.0.0/24"), addrOf("10.0.0.254")) || !HostContains(prefixOf("10.0.0.0/24"), addrOf("10.0.0.1")) {
		t.Error("10.0.0.0/24 does not offer .1 and .254")
	}
	if !HostContains(prefixOf("2001:db8::/64"), addrOf("2001:db8::ffff:ffff:ffff:ffff")) {
		t.Error("2001:db8::/64 does not offer its all-ones address")
	}
	if !HostContains(prefixOf("::/0"), addrOf("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")) {
		t.Error("::/0 does not offer the last address")
	}
	if HostContains(prefixOf("10.0.0.0/24"), addrOf("2001:db8::1")) || HostContains(prefixOf("10.0.0.0/24"), addrOf("10.0.1.1")) {
		t.Error("HostContains of an address outside the prefix")
	}
}

// KEP-3070: offset = 0 if n <= 16, else min(max(16, n/16), 256), n = 2^h.
func TestReservedLowerBandSizeFollowsKEP3070(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   uint64
	}{
		{"10.96.0.0/28", 0}, {"10.0.0.0/30", 0}, {"fd00::/124", 0},
		{"10.0.0.0/27", 16}, {"10.0.0.0/24", 16}, {"10.0.0.0/22", 64},
		{"10.0.0.0/20", 256}, {"10.0.0.0/8", 256}, {"fd00::/64", 256}, {"::/0", 256},
		{"10.0.0.0/32", 0}, {"fd00::/120", 16},
	} {
		if got := ReservedSize(prefixOf(tc.prefix)); got != tc.want {
			t.Errorf("ReservedSize(%s) = %d, want %d", tc.prefix, got, tc.want)
		}
	}
}

func TestBandsOfA24AreDotOneToSixteenAndSeventeenToTwoFiftyFour(t *testing.T) {
	lower, upper, hasLower, ok := Bands(prefixOf("10.0.0.0/24"))
	if !ok || !hasLower {
		t.Fatalf("Bands(/24): hasLower %v ok %v", hasLower, ok)
	}
	if lower.String() != "10.0.0.1-10.0.0.16" || upper.String() != "10.0.0.17-10.0.0.254" {
		t.Fatalf("Bands(/24) = %s, %s", lower, upper)
	}
	_, upper, hasLower, ok = Bands(prefixOf("10.96.0.0/28"))
	if !ok || hasLower || upper.String() != "10.96.0.1-10.96.0.14" {
		t.Fatalf("Bands(/28) = %s, hasLower %v", upper, hasLower)
	}
	if _, _, _, ok := Bands(prefixOf("10.0.0.0/31")); ok {
		t.Fatal("Bands(/31) offers addresses")
	}
}

func TestCountArithmetic(t *testing.T) {
	c := Size(prefixOf("2001:db8::/48"))
	if _, fits := c.Uint64(); fits {
		t.Fatal("2^80-1 fits in 64 bits")
	}
	if got := c.Sub(CountOf(1)).Add(CountOf(1)); got != c {
		t.Fatalf("Sub/Add round trip: %s", got)
	}
	if c.String() != pow2minus(80, 1).String() || c.Cmp(CountOf(5)) != 1 || CountOf(0).IsZero() != true {
		t.Fatalf("Count %s", c)
	}
}
