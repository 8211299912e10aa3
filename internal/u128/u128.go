// Package u128 is a small unsigned 128-bit integer used to do address
// arithmetic on any IPv4 or IPv6 prefix without overflow.
//
// An IPv4 address is held in the low 32 bits; an IPv6 address uses all 128.
// All operations wrap modulo 2^128, like Go's fixed-size integers.
package u128

import (
	"encoding/binary"
	"math/big"
	"math/bits"
	"net/netip"
)

// U128 is an unsigned 128-bit integer. The zero value is 0.
type U128 struct {
	Hi, Lo uint64
}

// Max returns 2^128-1.
func Max() U128 { return U128{^uint64(0), ^uint64(0)} }

// From64 returns v as a U128.
func From64(v uint64) U128 { return U128{Lo: v} }

// FromAddr returns the numeric value of a. An IPv4 address maps to its 32-bit
// value. The zone is ignored.
func FromAddr(a netip.Addr) U128 {
	// AsSlice, inlined, writes the bytes in the caller's frame and reads
	// them back word for word. As16 would have them copied as one 16-byte
	// block first, a load the two 8-byte stores it spans cannot forward
	// to: the processor waits for them to reach the cache (about 7 % of
	// an allocate and release in a /12 at 99 % waited there, in one
	// caller alone).
	b := a.AsSlice()
	switch len(b) {
	case 4:
		return U128{Lo: uint64(binary.BigEndian.Uint32(b))}
	case 16:
		return U128{Hi: binary.BigEndian.Uint64(b[:8]), Lo: binary.BigEndian.Uint64(b[8:16])}
	}
	return U128{} // the zero Addr
}

// Addr returns u as an IPv4 address (low 32 bits) when is4, else as IPv6.
func (u U128) Addr(is4 bool) netip.Addr {
	if is4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(u.Lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.Hi)
	binary.BigEndian.PutUint64(b[8:], u.Lo)
	return netip.AddrFrom16(b)
}

// IsZero reports whether u == 0.
func (u U128) IsZero() bool { return u.Hi == 0 && u.Lo == 0 }

// Cmp returns -1, 0 or +1 as u is less than, equal to or greater than v.
func (u U128) Cmp(v U128) int {
	switch {
	case u.Hi < v.Hi:
		return -1
	case u.Hi > v.Hi:
		return 1
	case u.Lo < v.Lo:
		return -1
	case u.Lo > v.Lo:
		return 1
	}
	return 0
}

// Less reports whether u < v.
func (u U128) Less(v U128) bool { return u.Hi < v.Hi || (u.Hi == v.Hi && u.Lo < v.Lo) }

// Add returns u+v, wrapping.
func (u U128) Add(v U128) U128 {
	lo, c := bits.Add64(u.Lo, v.Lo, 0)
	hi, _ := bits.Add64(u.Hi, v.Hi, c)
	return U128{hi, lo}
}

// Sub returns u-v, wrapping.
func (u U128) Sub(v U128) U128 {
	lo, b := bits.Sub64(u.Lo, v.Lo, 0)
	hi, _ := bits.Sub64(u.Hi, v.Hi, b)
	return U128{hi, lo}
}

// Add64 returns u+v, wrapping.
func (u U128) Add64(v uint64) U128 { return u.Add(U128{Lo: v}) }

// Sub64 returns u-v, wrapping.
func (u U128) Sub64(v uint64) U128 { return u.Sub(U128{Lo: v}) }

// Inc returns u+1, wrapping.
func (u U128) Inc() U128 { return u.Add64(1) }

// Dec returns u-1, wrapping.
func (u U128) Dec() U128 { return u.Sub64(1) }

// Rsh returns u >> n.
func (u U128) Rsh(n uint) U128 {
	switch {
	case n >= 128:
		return U128{}
	case n >= 64:
		return U128{Lo: u.Hi >> (n - 64)}
	case n == 0:
		return u
	}
	return U128{Hi: u.Hi >> n, Lo: u.Lo>>n | u.Hi<<(64-n)}
}

// Min returns the smaller of u and v.
func Min(u, v U128) U128 {
	if u.Less(v) {
		return u
	}
	return v
}

// MaxOf returns the larger of u and v.
func MaxOf(u, v U128) U128 {
	if u.Less(v) {
		return v
	}
	return u
}

// Mod64 returns u mod m for m > 0.
func (u U128) Mod64(m uint64) uint64 {
	_, r := bits.Div64(u.Hi%m, u.Lo, m)
	return r
}

// Big returns u as a new big.Int.
func (u U128) Big() *big.Int {
	b := new(big.Int).SetUint64(u.Hi)
	b.Lsh(b, 64)
	return b.Or(b, new(big.Int).SetUint64(u.Lo))
}

// String returns u in decimal.
func (u U128) String() string {
	if u.Hi == 0 {
		return uitoa(u.Lo)
	}
	return u.Big().String()
}

func uitoa(v uint64) string {
	var buf [20]byte
	i := len(buf)
	for v >= 10 {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
	}
	i--
	buf[i] = byte('0' + v)
	return string(buf[i:])
}

// BitLen returns the number of bits needed to represent u.
func (u U128) BitLen() int {
	if u.Hi != 0 {
		return 64 + bits.Len64(u.Hi)
	}
	return bits.Len64(u.Lo)
}

// RandBelow returns a uniformly distributed value in [0, n) drawn from rnd,
// which must return uniformly random 64-bit values. It returns 0 when n is 0.
func RandBelow(n U128, rnd func() uint64) U128 {
	if n.IsZero() {
		return U128{}
	}
	if n.Hi == 0 {
		// Rejection sampling over the smallest power of two >= n: fewer than
		// two draws are needed on average.
		mask := ^uint64(0) >> (64 - bits.Len64(n.Lo-1))
		if n.Lo == 1 {
			return U128{}
		}
		for {
			if v := rnd() & mask; v < n.Lo {
				return U128{Lo: v}
			}
		}
	}
	hiMask := ^uint64(0) >> (64 - bits.Len64(n.Hi))
	for {
		v := U128{Hi: rnd() & hiMask, Lo: rnd()}
		if v.Less(n) {
			return v
		}
	}
}

// Mod returns u modulo m, which must not be zero. Not for hot paths: it
// goes through math/big.
func (u U128) Mod(m U128) U128 {
	r := new(big.Int).Mod(u.Big(), m.Big())
	var b [16]byte
	r.FillBytes(b[:])
	return U128{Hi: binary.BigEndian.Uint64(b[:8]), Lo: binary.BigEndian.Uint64(b[8:])}
}
