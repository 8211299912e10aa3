package u128

import (
	"math/big"
	"net/netip"
	"testing"

	"pgregory.net/rapid"
)

func gen() *rapid.Generator[U128] {
	return rapid.Custom(func(t *rapid.T) U128 {
		return U128{Hi: rapid.Uint64().Draw(t, "hi"), Lo: rapid.Uint64().Draw(t, "lo")}
	})
}

var two128 = new(big.Int).Lsh(big.NewInt(1), 128)

func mod128(b *big.Int) *big.Int { return b.Mod(b, two128) }

func TestArithmeticMatchesBigIntModulo2To128(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		x, y := gen().Draw(t, "x"), gen().Draw(t, "y")
		if got, want := x.Add(y).Big(), mod128(new(big.Int).Add(x.Big(), y.Big())); got.Cmp(want) != 0 {
			t.Fatalf("%s + %s = %s, want %s", x, y, got, want)
		}
		if got, want := x.Sub(y).Big(), mod128(new(big.Int).Sub(x.Big(), y.Big())); got.Cmp(want) != 0 {
			t.Fatalf("%s - %s = %s, want %s", x, y, got, want)
		}
		if x.Cmp(y) != x.Big().Cmp(y.Big()) || x.Less(y) != (x.Big().Cmp(y.Big()) < 0) {
			t.Fatalf("Cmp/Less(%s, %s) disagree with big.Int", x, y)
		}
		n := uint(rapid.IntRange(0, 130).Draw(t, "n"))
		if got, want := x.Rsh(n).Big(), new(big.Int).Rsh(x.Big(), n); got.Cmp(want) != 0 {
			t.Fatalf("%s >> %d = %s, want %s", x, n, got, want)
		}
		if x.String() != x.Big().String() {
			t.Fatalf("String %s, big %s", x.String(), x.Big())
		}
		if m := rapid.Uint64Range(1, ^uint64(0)).Draw(t, "m"); x.Mod64(m) != new(big.Int).Mod(x.Big(), new(big.Int).SetUint64(m)).Uint64() {
			t.Fatalf("%s mod %d wrong", x, m)
		}
	})
}

func TestWrapAtTheEdges(t *testing.T) {
	if Max().Inc() != (U128{}) || (U128{}).Dec() != Max() {
		t.Fatal("Inc/Dec do not wrap at 0 and 2^128-1")
	}
	if Max().BitLen() != 128 || (U128{}).BitLen() != 0 || From64(1).BitLen() != 1 || (U128{Hi: 1}).BitLen() != 65 {
		t.Fatal("BitLen edges")
	}
}

func TestAddrRoundTrip(t *testing.T) {
	for _, s := range []string{"0.0.0.0", "10.96.0.1", "255.255.255.255", "::", "2001:db8::1", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"} {
		a := netip.MustParseAddr(s)
		if got := FromAddr(a).Addr(a.Is4()); got != a {
			t.Errorf("round trip of %s = %s", a, got)
		}
	}
	if FromAddr(netip.MustParseAddr("10.0.0.1")) != From64(0x0a000001) {
		t.Error("IPv4 is not its 32-bit value")
	}
}

// Any address goes to its value and back, zone aside; IPv4 to its 32
// bits, never to its IPv4-mapped form.
func TestAddrRoundTripsAtRandom(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var b16 [16]byte
		copy(b16[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "bytes"))
		v6 := netip.AddrFrom16(b16)
		if got := FromAddr(v6).Addr(false); got != v6 {
			t.Fatalf("round trip of %s = %s", v6, got)
		}
		if u := FromAddr(v6); u.Hi != uint64(b16[0])<<56|uint64(b16[1])<<48|uint64(b16[2])<<40|uint64(b16[3])<<32|uint64(b16[4])<<24|uint64(b16[5])<<16|uint64(b16[6])<<8|uint64(b16[7]) {
			t.Fatalf("FromAddr(%s).Hi = %#x", v6, u.Hi)
		}
		if got := FromAddr(v6.WithZone("eth0")); got != FromAddr(v6) {
			t.Fatalf("the zone changed the value of %s", v6)
		}
		v4 := netip.AddrFrom4([4]byte(b16[:4]))
		u := FromAddr(v4)
		if want := uint64(b16[0])<<24 | uint64(b16[1])<<16 | uint64(b16[2])<<8 | uint64(b16[3]); u != From64(want) {
			t.Fatalf("FromAddr(%s) = %#x, want %#x", v4, u.Lo, want)
		}
		if got := u.Addr(true); got != v4 {
			t.Fatalf("round trip of %s = %s", v4, got)
		}
	})
	if !FromAddr(netip.Addr{}).IsZero() {
		t.Fatal("the zero Addr is not 0")
	}
	// An IPv4-mapped IPv6 address is IPv6: its 128-bit value.
	if got := FromAddr(netip.MustParseAddr("::ffff:10.0.0.1")); got != (U128{Lo: 0xffff_0a00_0001}) {
		t.Fatalf("FromAddr(::ffff:10.0.0.1) = %#x %#x", got.Hi, got.Lo)
	}
}

func TestRandBelowStaysBelow(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := gen().Draw(t, "n")
		src := rapid.SliceOfN(rapid.Uint64(), 64, 64).Draw(t, "randomness")
		i := 0
		next := func() uint64 { i++; return src[i%len(src)] ^ uint64(i)*0x9e3779b97f4a7c15 }
		got := RandBelow(n, next)
		if n.IsZero() {
			if !got.IsZero() {
				t.Fatalf("RandBelow(0) = %s", got)
			}
			return
		}
		if !got.Less(n) {
			t.Fatalf("RandBelow(%s) = %s", n, got)
		}
	})
}

func TestModMatchesBigInt(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		u, m := gen().Draw(t, "u"), gen().Draw(t, "m")
		if m.IsZero() {
			m = From64(1)
		}
		want := new(big.Int).Mod(u.Big(), m.Big())
		if got := u.Mod(m); got.Big().Cmp(want) != 0 || !got.Less(m) {
			t.Fatalf("%v mod %v = %v, want %v", u, m, got, want)
		}
	})
}
