package cidrset

import (
	"math/big"
	"net/netip"
	"testing"
)

// bigOf is a as a number.
func bigOf(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }

// FuzzHostsFollowTheSpec checks Size, ReservedSize, HostContains and Bands
// against SPEC §2 and §3 computed with big.Int: a prefix of h host bits
// offers 2^h-2 (IPv4) or 2^h-1 (IPv6) addresses, never its network
// address nor the IPv4 broadcast; its lower band is the first
// min(max(16, 2^h/16), 256) of them, none if 2^h <= 16.
func FuzzHostsFollowTheSpec(f *testing.F) {
	f.Add(true, []byte{10, 96, 0, 0}, uint8(28), []byte{10, 96, 0, 15})
	f.Add(true, []byte{10, 0, 0, 0}, uint8(24), []byte{10, 0, 0, 16})
	f.Add(true, []byte{10, 0, 0, 0}, uint8(31), []byte{10, 0, 0, 1})
	f.Add(true, []byte{0, 0, 0, 0}, uint8(0), []byte{255, 255, 255, 255})
	f.Add(false, []byte{0xfd, 0}, uint8(127), []byte{0xfd, 15: 1})
	f.Add(false, []byte{}, uint8(0), []byte{0: 0xff, 15: 0xff})
	f.Add(false, []byte{0xfd, 0, 0, 0x10}, uint8(108), []byte{0xfd, 0, 0, 0x10, 15: 0x11})
	f.Fuzz(func(t *testing.T, is4 bool, ab []byte, bits uint8, probe []byte) {
		var a, x netip.Addr
		if is4 {
			var b, q [4]byte
			copy(b[:], ab)
			copy(q[:], probe)
			a, x = netip.AddrFrom4(b), netip.AddrFrom4(q)
		} else {
			var b, q [16]byte
			copy(b[:], ab)
			copy(q[:], probe)
			a, x = netip.AddrFrom16(b), netip.AddrFrom16(q)
		}
		if int(bits) > a.BitLen() {
			return
		}
		p := netip.PrefixFrom(a, int(bits)).Masked()
		h := uint(a.BitLen() - int(bits))
		n := new(big.Int).Lsh(big.NewInt(1), h)
		network := bigOf(p.Addr())
		last := new(big.Int).Sub(new(big.Int).Add(network, n), big.NewInt(1)) // the last address of p
		firstUsable := new(big.Int).Add(network, big.NewInt(1))
		lastUsable := new(big.Int).Set(last)
		if is4 {
			lastUsable.Sub(lastUsable, big.NewInt(1))
		}
		size := new(big.Int).Sub(lastUsable, network)
		if size.Sign() < 0 {
			size.SetInt64(0)
		}
		if got := Size(p).Big(); got.Cmp(size) != 0 {
			t.Fatalf("Size(%v) = %v, want %v", p, got, size)
		}
		var offset uint64
		if n.Cmp(big.NewInt(16)) > 0 {
			o := new(big.Int).Rsh(n, 4)
			switch {
			case o.Cmp(big.NewInt(16)) < 0:
				offset = 16
			case o.Cmp(big.NewInt(256)) > 0:
				offset = 256
			default:
				offset = o.Uint64()
			}
		}
		if got := ReservedSize(p); got != offset {
			t.Fatalf("ReservedSize(%v) = %d, want %d", p, got, offset)
		}
		xi := bigOf(x)
		want := xi.Cmp(firstUsable) >= 0 && xi.Cmp(lastUsable) <= 0
		if got := HostContains(p, x); got != want {
			t.Fatalf("HostContains(%v, %v) = %v, want %v", p, x, got, want)
		}
		lower, upper, hasLower, ok := Bands(p)
		if ok != (size.Sign() > 0) {
			t.Fatalf("Bands(%v): ok %v with %v addresses", p, ok, size)
		}
		if !ok {
			return
		}
		if hasLower != (offset > 0) {
			t.Fatalf("Bands(%v): hasLower %v, offset %d", p, hasLower, offset)
		}
		if bigOf(upper.To()).Cmp(lastUsable) != 0 {
			t.Fatalf("Bands(%v): upper band ends at %v", p, upper.To())
		}
		lowerEnd := new(big.Int).Add(firstUsable, new(big.Int).SetUint64(offset)) // first address of the upper band
		if bigOf(upper.From()).Cmp(lowerEnd) != 0 {
			t.Fatalf("Bands(%v): upper band starts at %v, want offset %d past %v", p, upper.From(), offset, firstUsable)
		}
		if hasLower && (bigOf(lower.From()).Cmp(firstUsable) != 0 || bigOf(lower.To()).Cmp(new(big.Int).Sub(lowerEnd, big.NewInt(1))) != 0) {
			t.Fatalf("Bands(%v): lower band %v, want %d addresses from %v", p, lower, offset, firstUsable)
		}
	})
}
