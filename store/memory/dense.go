package memory

import (
	"net/netip"

	"github.com/netipam/netipam/internal/u128"
)

// denseBlock holds the IPv4 records of one /16 that holds many of them:
// their arena offsets, indexed by the address's low 16 bits, 0 where there
// is none. A lookup is then one load at a place the address gives, where
// the hash table's costs a hash, a probe of a group and, now and then, an
// entry read to compare keys; and a range allocated at random reads its
// blocks, a quarter of a MiB per /16, not a hash table three times that
// size (a full /12: 4 MiB of blocks against 14 MB of table).
//
// A block costs 4 bytes per address of its /16, and the table 40/7 bytes
// per slot at up to half full, 11.4 to 14 bytes a record: from about 23k
// records a /16 (3/8 of it, denseFrom) the block is not larger. It goes
// back to the table below 8192 records (denseUntil), so that records
// coming and going near one bound do not move the /16 back and forth.
type denseBlock struct {
	offs [1 << 16]uint32
	n    int // records
}

const (
	denseFrom  = 3 << 13
	denseUntil = 1 << 13
)

// slash16 returns the /16 of an IPv4 address: its upper 16 bits.
func slash16(a netip.Addr) uint16 { return uint16(u128.FromAddr(a).Lo >> 16) }

// block returns the block of a's /16 and a's index in it, or nil if a is
// IPv6 or its /16 has no block. The test of dense is all that a store
// without blocks pays, inlined.
func (r *records) block(a netip.Addr) (*denseBlock, uint16) {
	if r.dense == nil {
		return nil, 0
	}
	return r.blockOf(a)
}

// blockOfKey is block for an address as an entry stores it.
func (r *records) blockOfKey(k addrKey) (*denseBlock, uint16) {
	if r.dense == nil || k.n != 4 {
		return nil, 0
	}
	return r.dense[uint16(k.lo>>16)], uint16(k.lo)
}

func (r *records) blockOf(a netip.Addr) (*denseBlock, uint16) {
	if !a.Is4() {
		return nil, 0
	}
	v := u128.FromAddr(a).Lo
	return r.dense[uint16(v>>16)], uint16(v)
}

// densify gives a block to every /16 with denseFrom or more records in
// v4, moving them there; it reports whether it moved any. v4 is about to
// grow (grow), which reads every entry anyway: counting them first
// makes that at most twice as long, and only for tables that could hold
// such a /16.
func (r *records) densify() bool {
	t := &r.v4
	if t.n < r.denseFrom {
		return false
	}
	counts := make([]int32, 1<<16)
	var offs [batchLen]uint32
	var slots [batchLen]int
	for i, n := t.batch(0, nil, offs[:]); n > 0; i, n = t.batch(i, nil, offs[:]) {
		r.arena.touch(offs[:n])
		for _, off := range offs[:n] {
			counts[keySlash16(r.parse(off).key)]++
		}
	}
	moved := false
	for s, c := range counts {
		if int(c) >= r.denseFrom {
			if r.dense == nil {
				r.dense = new([1 << 16]*denseBlock)
			}
			r.dense[s] = new(denseBlock)
			moved = true
		}
	}
	if !moved {
		return false
	}
	// Emptying slots moves no entry (see removeIn), so the walk goes on
	// past them.
	for i, n := t.batch(0, slots[:], offs[:]); n > 0; i, n = t.batch(i, slots[:], offs[:]) {
		r.arena.touch(offs[:n])
		for k, off := range offs[:n] {
			key := r.parse(off).key
			b := r.dense[keySlash16(key)]
			if b == nil {
				continue
			}
			r.removeAt(t, slots[k], r.addrHash(key))
			b.offs[uint16(key[2])<<8|uint16(key[3])] = off
			b.n++
			r.denseN++
		}
	}
	return true
}

// undense moves the records of /16 s's block back into v4 and drops the
// block.
func (r *records) undense(s uint16) {
	b := r.dense[s]
	// Room for them all first, while the block still holds them: a growth
	// may rehash by reading the arena, and must skip them (inBlock), or
	// they would be in v4 twice.
	if t := &r.v4; t.n+b.n >= t.full {
		r.rehash(t, t.sizeFor(t.n+b.n))
	}
	r.dense[s] = nil
	r.denseN -= b.n
	if r.denseN == 0 {
		r.dense = nil
	}
	for lo, off := range b.offs {
		if off != 0 {
			r.insert(&r.v4, r.addrHash4(uint64(s)<<16|uint64(lo)), off)
		}
	}
}

// denseBatches calls fn with the offsets of the records in blocks,
// batchLen at a time, and, unless nil, where each is (its block and index),
// so that fn can load a batch's entries all at once (see arena.touch).
func (r *records) denseBatches(fn func(offs []uint32, at []denseAt)) {
	if r.dense == nil {
		return
	}
	var offs [batchLen]uint32
	var at [batchLen]denseAt
	n := 0
	for s, b := range r.dense {
		if b == nil {
			continue
		}
		for j, off := range b.offs {
			if off == 0 {
				continue
			}
			offs[n], at[n] = off, denseAt{b, uint16(s), uint16(j)}
			if n++; n == batchLen {
				fn(offs[:], at[:])
				n = 0
			}
		}
	}
	if n > 0 {
		fn(offs[:n], at[:n])
	}
}

// denseAt is where a record in a block is: the block of /16 s, index j.
type denseAt struct {
	b    *denseBlock
	s, j uint16
}

// addr returns the address of the record at d.
func (d denseAt) addr() netip.Addr {
	return netip.AddrFrom4([4]byte{byte(d.s >> 8), byte(d.s), byte(d.j >> 8), byte(d.j)})
}

// inBlock reports whether the record of address key, as an entry stores
// it, is held in a block.
func (r *records) inBlock(key []byte) bool {
	return r.dense != nil && len(key) == 4 && r.dense[keySlash16(key)] != nil
}

// keySlash16 is slash16 of an IPv4 address as an entry stores it.
func keySlash16(key []byte) uint16 { return uint16(key[0])<<8 | uint16(key[1]) }
