package memory

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"slices"

	"github.com/netipam/netipam/internal/u128"
)

// denseBlock holds the records of the 65,536 addresses of one IPv4 /16 or
// IPv6 /112 that holds many of them: their arena offsets, indexed by the
// address's low 16 bits, 0 where there is none. A lookup is then one load
// at a place the address gives, where the hash table's costs a hash, a
// probe of a group and, now and then, an entry read to compare keys; and a
// range allocated at random reads its blocks, a quarter of a MiB per /16,
// not a hash table three times that size (a full /12: 4 MiB of blocks
// against 14 MB of table). In IPv6, where a large range is never full,
// blocks take the addresses handed out in order or a /112 filled; the
// scattered ones stay in the table, which is then as small as they are
// few (a /64 or /48 holding 10M packed addresses: a cycle 21–54 %
// shorter).
//
// A block costs 4 bytes per address, and the table 40/7 bytes per slot at
// up to half full, 11.4 to 14 bytes a record: from about 23k records a
// block's addresses (3/8 of them, denseFrom) the block is not larger. It
// goes back to the table below 8192 records (denseUntil), so that records
// coming and going near one bound do not move it back and forth.
type denseBlock struct {
	offs [1 << 16]uint32
	n    int // records
	id   blockID
}

const (
	denseFrom  = 3 << 13
	denseUntil = 1 << 13
)

// blockID names the addresses a block holds: an IPv4 /16 or an IPv6 /112,
// as the first of them, with its low 16 bits 0.
type blockID struct {
	hi, lo uint64 // IPv4: in the low 32 bits of lo
	v6     bool
}

// blockTable holds blocks by their prefix, open-addressed: a lookup is a
// hash, mostly one slot and a comparison of two words, where a Go map's
// took about 90 instructions (a cycle in a /64 holding 100k packed
// addresses made four lookups then, two since session 35: +10 %
// instructions, against +5 % with this table, as measured with four).
// Most lookups are of a prefix without a block (a new
// address among packed ones): a bit per group of prefixes, set when one
// of them has a block, answers those without the hash. The zero value is
// empty. It is for the few blocks a store has (one per 65,536 addresses),
// kept at most half full, and rebuilt when one goes.
type blockTable struct {
	slots []blockSlot // a power of two of them, or none
	n     int
	some  [filterWords]uint64 // bit filterBit(prefix): a block may be there
}

const filterWords = 64

// filterBit returns the bit of t.some for prefix hi, lo: consecutive
// /112s have distinct ones.
func filterBit(hi, lo uint64) uint64 { return (lo>>16 ^ hi ^ hi>>29) % (filterWords * 64) }

type blockSlot struct {
	hi, lo uint64 // the prefix: a blockID's
	b      *denseBlock
}

func blockHash(hi, lo uint64) uint64 { return mix64(hi ^ bits.RotateLeft64(lo, 32)) }

// get returns the block of prefix hi, lo, or nil.
func (t *blockTable) get(hi, lo uint64) *denseBlock {
	if !t.mayHold(hi, lo) {
		return nil
	}
	return t.getIn(hi, lo)
}

// mayHold reports whether the filter lets a block of prefix hi, lo be
// there. Apart so that it inlines: most addresses of a range with blocks
// are in none (a huge range's new addresses), and blockOfKeyIn then
// makes no call for them (8 instructions a look-up, two a cycle in a
// /64 holding 100k packed addresses).
func (t *blockTable) mayHold(hi, lo uint64) bool {
	f := filterBit(hi, lo)
	return t.some[f/64]&(1<<(f%64)) != 0
}

// getIn is get past the filter.
func (t *blockTable) getIn(hi, lo uint64) *denseBlock {
	m := uint64(len(t.slots) - 1)
	for i := blockHash(hi, lo) & m; ; i = (i + 1) & m {
		if s := &t.slots[i]; s.b == nil || s.hi == hi && s.lo == lo {
			return s.b
		}
	}
}

// put adds b, whose prefix has no block.
func (t *blockTable) put(b *denseBlock) {
	if 2*(t.n+1) > len(t.slots) {
		old := t.slots
		t.slots, t.n = make([]blockSlot, max(8, 2*len(old))), 0
		for _, s := range old {
			if s.b != nil {
				t.put(s.b)
			}
		}
	}
	m := uint64(len(t.slots) - 1)
	i := blockHash(b.id.hi, b.id.lo) & m
	for t.slots[i].b != nil {
		i = (i + 1) & m
	}
	t.slots[i] = blockSlot{b.id.hi, b.id.lo, b}
	t.n++
	f := filterBit(b.id.hi, b.id.lo)
	t.some[f/64] |= 1 << (f % 64)
}

// drop removes the block of prefix hi, lo, rebuilding the table.
func (t *blockTable) drop(hi, lo uint64) {
	old := t.slots
	*t = blockTable{}
	for _, s := range old {
		if s.b != nil && (s.hi != hi || s.lo != lo) {
			t.put(s.b)
		}
	}
}

// blockIDOfKey returns the block the record of an address, as an entry
// stores it, would be in, and the address's index in it.
func blockIDOfKey(key []byte) (blockID, uint16) {
	j := binary.BigEndian.Uint16(key[len(key)-2:])
	if len(key) == 4 {
		return blockID{lo: uint64(binary.BigEndian.Uint16(key)) << 16}, j
	}
	return blockID{hi: binary.BigEndian.Uint64(key), lo: binary.BigEndian.Uint64(key[8:]) &^ 0xffff, v6: true}, j
}

// addr returns the address at index j of block id.
func (id blockID) addr(j uint16) netip.Addr {
	if !id.v6 {
		return netip.AddrFrom4([4]byte{byte(id.lo >> 24), byte(id.lo >> 16), byte(j >> 8), byte(j)})
	}
	return u128.U128{Hi: id.hi, Lo: id.lo | uint64(j)}.Addr(false)
}

// key returns address j of block id as an entry stores it.
func (id blockID) key(j uint16) addrKey {
	if !id.v6 {
		return addrKey{lo: id.lo | uint64(j), n: 4}
	}
	return addrKey{hi: id.hi, lo: id.lo | uint64(j), n: 16}
}

// blockOfKey returns the block of the address k and k's index in it, or
// nil if it has none. The test that there are none is all that a store
// without blocks pays, inlined.
func (r *records) blockOfKey(k addrKey) (*denseBlock, uint16) {
	if r.blocks == 0 {
		return nil, 0
	}
	return r.blockOfKeyIn(k)
}

// blockOfKeyIn is blockAt for an address, written out: through blockAt,
// a /12's cycle took 59 instructions more (a call more on the way to an
// IPv4 block).
func (r *records) blockOfKeyIn(k addrKey) (*denseBlock, uint16) {
	if k.n == 4 {
		if r.dense == nil {
			return nil, 0
		}
		return r.dense[uint16(k.lo>>16)], uint16(k.lo)
	}
	if id := k.lo &^ 0xffff; r.dense6.n != 0 && r.dense6.mayHold(k.hi, id) {
		return r.dense6.getIn(k.hi, id), uint16(k.lo)
	}
	return nil, 0
}

// blockAt returns block id, or nil.
func (r *records) blockAt(id blockID) *denseBlock {
	if !id.v6 {
		if r.dense == nil {
			return nil
		}
		return r.dense[uint16(id.lo>>16)]
	}
	return r.dense6.get(id.hi, id.lo)
}

// addBlock gives id a block, empty.
func (r *records) addBlock(id blockID) *denseBlock {
	b := &denseBlock{id: id}
	r.blocks++
	if !id.v6 {
		if r.dense == nil {
			r.dense = new([1 << 16]*denseBlock)
		}
		r.dense[uint16(id.lo>>16)] = b
		return b
	}
	r.dense6.put(b)
	return b
}

// dropBlock drops block id; its records must be elsewhere by then.
func (r *records) dropBlock(id blockID) {
	r.blocks--
	if !id.v6 {
		r.dense[uint16(id.lo>>16)] = nil
		if r.blocks == r.dense6.n { // none of IPv4 left
			r.dense = nil
		}
		return
	}
	r.dense6.drop(id.hi, id.lo)
}

// densifyBuckets is how many counters densify counts records by (an
// IPv4 /16 each, IPv6 /112s hashed), densifyBits its log2.
const (
	densifyBits    = 16
	densifyBuckets = 1 << densifyBits
)

// bucket returns the counter of densify's first pass for block id: an
// IPv4 /16's own, an IPv6 /112's by a hash (which many /112s share).
func (id blockID) bucket() int {
	if !id.v6 {
		return int(id.lo >> 16)
	}
	return bucket6(id.hi, id.lo)
}

// bucket6 returns the bucket of the /112 of the IPv6 address hi, lo: a
// multiplicative hash of its prefix.
func bucket6(hi, lo uint64) int {
	return int((hi ^ bits.RotateLeft64(lo>>16, 29)) * 0x9e3779b97f4a7c15 >> (64 - densifyBits))
}

// famOf returns the index of t's family in sparseAt: 0 for v4, 1 for v6.
func (r *records) famOf(t *offTable) int {
	if t == &r.v6 {
		return 1
	}
	return 0
}

// densify gives a block to every /16 (v4) or /112 (v6) with denseFrom or
// more records in t, moving them there; it reports whether it moved any.
// t is about to grow (grow), which reads every entry anyway. densify
// reads them first, counting them by bucket; a bucket of an IPv4 /16 is
// the /16 itself, but many /112s share one, so the /112s of buckets of
// denseFrom records or more are then counted one by one. When a count
// gives no block, the next is made once the table holds twice as many
// records (sparseAt), or fewer than then: a fill of scattered addresses,
// which never gives one, then reads each entry about twice more, not
// five times (a fill of 1M scattered IPv6 addresses took 1.5 times as
// long counting at every growth); a prefix that fills among many
// scattered records may wait for its block until then.
func (r *records) densify(t *offTable) bool {
	if t.owner() || t.n < r.denseFrom {
		return false
	}
	f := r.famOf(t)
	if at := r.sparseAt[f]; at <= t.n && t.n < 2*at {
		return false
	}
	// The entries are read in the arena's order when they can be
	// (readsArena).
	keys := func(fn func(key []byte)) {
		if r.readsArena(t, t.n) {
			r.arenaEntries(t, func(_ uint32, key []byte) { fn(key) })
			return
		}
		r.eachKey(t, func(key []byte, _ int, _ uint32) { fn(key) })
	}
	counts := make([]int32, densifyBuckets)
	keys(func(key []byte) {
		id, _ := blockIDOfKey(key)
		counts[id.bucket()]++
	})
	added := false
	if f == 1 {
		crowded := func(c int32) bool { return int(c) >= r.denseFrom }
		exact := map[blockID]int{}
		if slices.ContainsFunc(counts, crowded) {
			keys(func(key []byte) {
				if id, _ := blockIDOfKey(key); crowded(counts[id.bucket()]) {
					exact[id]++
				}
			})
		}
		for id, c := range exact {
			if c >= r.denseFrom {
				r.addBlock(id)
				added = true
			}
		}
	} else {
		for s, c := range counts {
			if int(c) >= r.denseFrom {
				r.addBlock(blockID{lo: uint64(s) << 16})
				added = true
			}
		}
	}
	if !added {
		r.sparseAt[f] = t.n
		return false
	}
	r.sparseAt[f] = 0
	// Emptying slots moves no entry (see removeIn), so the walk goes on
	// past them.
	r.eachKey(t, func(key []byte, slot int, off uint32) {
		id, j := blockIDOfKey(key)
		if b := r.blockAt(id); b != nil {
			r.removeAt(t, slot, r.addrHash(key))
			b.offs[j] = off
			b.n++
			r.denseN++
		}
	})
	return true
}

// eachKey calls fn with the address (as its entry stores it), the slot
// and the offset of every entry of t, reading the arena a batch at a time
// (see arena.touch).
func (r *records) eachKey(t *offTable, fn func(key []byte, slot int, off uint32)) {
	var offs [batchLen]uint32
	var slots [batchLen]int
	for i, n := t.batch(0, slots[:], offs[:]); n > 0; i, n = t.batch(i, slots[:], offs[:]) {
		r.arena.touch(offs[:n])
		for k, off := range offs[:n] {
			fn(r.parse(off).key, slots[k], off)
		}
	}
}

// undense moves the records of block b back into its family's table and
// drops the block.
func (r *records) undense(b *denseBlock) {
	t := &r.v4
	if b.id.v6 {
		t = &r.v6
	}
	// Room for them all first, while the block still holds them: a growth
	// may rehash by reading the arena, and must skip them (inBlock), or
	// they would be in the table twice.
	if t.n+b.n >= t.full {
		r.rehash(t, t.sizeFor(t.n+b.n))
	}
	r.dropBlock(b.id)
	r.denseN -= b.n
	for j, off := range b.offs {
		if off != 0 {
			r.insert(t, r.keyHash(b.id.key(uint16(j))), off)
		}
	}
}

// denseBatches calls fn with the offsets of the records in blocks,
// batchLen at a time, and where each is (its block and index), so that fn
// can load a batch's entries all at once (see arena.touch).
func (r *records) denseBatches(fn func(offs []uint32, at []denseAt)) {
	var offs [batchLen]uint32
	var at [batchLen]denseAt
	n := 0
	each := func(b *denseBlock) {
		for j, off := range b.offs {
			if off == 0 {
				continue
			}
			offs[n], at[n] = off, denseAt{b, uint16(j)}
			if n++; n == batchLen {
				fn(offs[:], at[:])
				n = 0
			}
		}
	}
	if r.dense != nil {
		for _, b := range r.dense {
			if b != nil {
				each(b)
			}
		}
	}
	for _, s := range r.dense6.slots {
		if s.b != nil {
			each(s.b)
		}
	}
	if n > 0 {
		fn(offs[:n], at[:n])
	}
}

// denseAt is where a record in a block is: block b, index j.
type denseAt struct {
	b *denseBlock
	j uint16
}

// addr returns the address of the record at d.
func (d denseAt) addr() netip.Addr { return d.b.id.addr(d.j) }

// inBlock reports whether the record of address key, as an entry stores
// it, is held in a block.
func (r *records) inBlock(key []byte) bool {
	if r.blocks == 0 {
		return false
	}
	id, _ := blockIDOfKey(key)
	return r.blockAt(id) != nil
}
