package cidrset

import (
	"math/big"
	"net/netip"

	"go4.org/netipx"

	"github.com/netipam/netipam/internal/u128"
)

// Count is an exact number of addresses, from 0 to 2^128-1: Hi and Lo are
// its high and low 64 bits. The zero value is 0.
type Count u128.U128

// CountOf returns v as a Count.
func CountOf(v uint64) Count { return Count{Lo: v} }

// String returns c in decimal.
func (c Count) String() string { return u128.U128(c).String() }

// Uint64 returns c and true if it fits in 64 bits.
func (c Count) Uint64() (uint64, bool) { return c.Lo, c.Hi == 0 }

// Big returns c as a new big.Int.
func (c Count) Big() *big.Int { return u128.U128(c).Big() }

// IsZero reports whether c is 0.
func (c Count) IsZero() bool { return c == Count{} }

// Cmp compares c and d: -1, 0 or +1.
func (c Count) Cmp(d Count) int { return u128.U128(c).Cmp(u128.U128(d)) }

// Add returns c+d. Counts of distinct addresses never exceed 2^128-1.
func (c Count) Add(d Count) Count { return Count(u128.U128(c).Add(u128.U128(d))) }

// Sub returns c-d for d <= c.
func (c Count) Sub(d Count) Count { return Count(u128.U128(c).Sub(u128.U128(d))) }

// HostRange returns the addresses p offers for allocation: every address of
// p except the network address and, for IPv4, the broadcast address. ok is
// false when p offers none (IPv4 /31 and /32, IPv6 /128) or is invalid.
// Any prefix length works: the arithmetic is 128-bit.
func HostRange(p netip.Prefix) (r netipx.IPRange, ok bool) {
	if !p.IsValid() {
		return netipx.IPRange{}, false
	}
	p = p.Masked()
	first := p.Addr().Next()
	last := netipx.PrefixLastIP(p)
	if p.Addr().Is4() {
		last = last.Prev()
	}
	if !first.IsValid() || !last.IsValid() || last.Less(first) {
		return netipx.IPRange{}, false
	}
	return netipx.IPRangeFrom(first, last), true
}

// HostContains reports whether p offers a: a is inside p and is neither its
// network address nor its IPv4 broadcast. This is the containment used for
// allocation, deletion checks and repair.
func HostContains(p netip.Prefix, a netip.Addr) bool {
	r, ok := HostRange(p)
	return ok && r.Contains(a)
}

// Size returns how many addresses p offers: 2^h-2 for IPv4 and 2^h-1 for
// IPv6 (h host bits), 0 where HostRange has none.
func Size(p netip.Prefix) Count {
	r, ok := HostRange(p)
	if !ok {
		return Count{}
	}
	return Count(u128.FromAddr(r.To()).Sub(u128.FromAddr(r.From())).Inc())
}

// ReservedSize returns the size of the KEP-3070 lower band of p: with n =
// 2^h addresses in p, 0 if n <= 16, else min(max(16, n/16), 256). Dynamic
// allocation takes from the lower band only when the upper band is full.
func ReservedSize(p netip.Prefix) uint64 {
	h := p.Addr().BitLen() - p.Bits()
	if !p.IsValid() || h <= 4 {
		return 0
	}
	if h >= 12 { // n/16 >= 256
		return 256
	}
	return max(16, uint64(1)<<h/16)
}

// Bands splits HostRange(p) into the lower band (the first ReservedSize(p)
// usable addresses, kept for static requests) and the upper band (the rest).
// hasLower is false when the lower band is empty; ok is false when p offers
// no address.
func Bands(p netip.Prefix) (lower, upper netipx.IPRange, hasLower, ok bool) {
	r, ok := HostRange(p)
	if !ok {
		return netipx.IPRange{}, netipx.IPRange{}, false, false
	}
	n := ReservedSize(p)
	if n == 0 {
		return netipx.IPRange{}, r, false, true
	}
	first := u128.FromAddr(r.From())
	is4 := p.Addr().Is4()
	lowerLast := first.Add64(n - 1).Addr(is4)
	return netipx.IPRangeFrom(r.From(), lowerLast), netipx.IPRangeFrom(lowerLast.Next(), r.To()), true, true
}
