package memory

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/netipam/netipam/internal/prefetch"
	"github.com/netipam/netipam/ipaddress"
)

// records holds the address records in a few pointer-free arrays, so the
// garbage collector never scans them and a record costs a few tens of bytes
// on top of its owner's name.
//
// Layout. Every record is one entry in a byte arena (see arena), named by
// its arena offset, a uint32, and never changed while the record lives:
//
//	uvarint(scope<<1 | is6) | address (4 or 16 bytes) | uvarint(revision) |
//	uvarint(created - base) | uvarint(len(name)) | name
//
// The scope is the interned group, resource and namespace of the owner
// (freed with its last record, and its index reused);
// created is Unix seconds as a uint32, stored as its distance from the first
// one seen (base), modulo 2^32, so it is a few bytes, not five.
//
// Three hash tables of arena offsets index the entries: v4 and v6 by
// address, owners by owner (scope and name), one slot per record, so an
// owner with several addresses (dual-stack, or hundreds) has several slots,
// all with the same hash. A table slot is the offset (4 bytes), its probe
// distance (1 byte) and 8 more bits of the hash (a tag, so a lookup reads
// the arena of almost only the entry it wants): 6 bytes. The owner slot of
// a record being deleted is found by its offset, without reading the arena.
//
// The tables are open-addressing Robin Hood tables with linear probing and
// backward-shift deletion, so there are no tombstones and churn at a
// constant size leaves them as they were. Their size is any integer, not a
// power of two (the home slot of a hash h is h*size/2^64), so that growth
// can be by a quarter: at most a fixed share of the slots are full (half
// in the address tables, 2/3 in the owner table; see addrLoadNum), and a
// table that fills grows, all at once, to 5/4 of its size, so the load
// stays within 4/5 of that bound and the bound whatever the number of
// records. Growth rehashes every entry, which reads its address or owner
// from the arena; amortized, that is four entries per insertion. It is done at once, not incrementally: at a
// million records the put that grows a table stalls for 0.1 to 0.2 s (both
// tables of a family may grow on the same put), in exchange for lookups
// that look in one table only.
//
// Per record, then: its entry, the name plus about 12 bytes for IPv4
// (header 1, address 4, revision 3 below 2^21, created 3 within 24 days of
// the first, name length 1) and 24 for IPv6, and 6/load bytes of slots in
// each table, 20 to 25 in all. An owner's records past its second take no
// owner slot but 4 bytes in more and an entry of morePos (about 10 more).
//
// Deleting a record turns its entry into waste, which the next entry of the
// same size reuses; when the waste outgrows the live entries all the same
// (many deletions, or sizes that do not come back), compact copies the live
// ones into a fresh arena and rebuilds the owner table (and shrinks the
// tables if they are mostly empty).
type records struct {
	v4, v6 offTable
	// owners holds up to ownerSlots slots per owner, each the entry of one
	// of its records; an owner's further records are in more, under the
	// owner's hash, so that an owner of many addresses is not a probe
	// cluster that every insert would walk (quadratic filling). morePos
	// gives each entry in more its index there, so that deleting one of an
	// owner's million records does not scan the other ones (quadratic
	// release).
	owners  offTable
	more    map[uint64][]uint32
	morePos map[uint32]uint32
	arena   arena

	seed      uint64    // of the address hash
	ownerKeys [2]uint64 // of the owner hash: random, see ownerHash
	// mask is ANDed into every hash: all ones, except in tests that force
	// collisions.
	mask uint64
	// compactAt is the waste in bytes below which the arena is never
	// compacted; tests lower it.
	compactAt int
	// prefetchMin is the size of a table, in bytes of slots, below which
	// prefetchOwner and prefetchAddr do nothing: prefetchFrom; tests
	// lower it.
	prefetchMin int

	base    uint32 // created values are stored as created - base
	hasBase bool

	// scopes are interned: an entry names its owner's scope by index.
	// A scope whose last record goes is freed and its index reused, so
	// that namespaces come and go (CI, tenants) without piling up; not at
	// once, but when the emptied ones outnumber maxEmptyScopes and half
	// the interned ones (see dropScopeRecord).
	scopes      []scope
	scopeIDs    map[scope]uint32
	scopeLive   []uint32 // records per scope
	freeScopes  []uint32 // freed indexes
	emptyScopes []uint32 // emptied since the last sweep; may repeat, may have records again
	last        uint32   // the scope looked up last: most writes repeat it
	lastOK      bool     // last names a live scope

	warmed uint8 // the sum of what warm loaded, so that its loads are kept

	// prefetched is the key prefetchOwner found, for the name
	// prefetchedName, until the next knownOwnerKey: a prefetch and the
	// create after it look up one owner, and hash its name once. Only the
	// hash is reused, and for the very same string (the same bytes at the
	// same address, which the held string keeps from being freed and
	// reused); the scope is looked up each time.
	prefetched     ownerKey
	prefetchedName string
	prefetchedOK   bool
}

type scope struct{ group, resource, namespace string }

// entry names one record: its arena offset.
type entry struct{ off uint32 }

func newRecords() *records {
	r := &records{
		seed:        rand.Uint64(),
		ownerKeys:   [2]uint64{rand.Uint64(), rand.Uint64()},
		mask:        ^uint64(0),
		compactAt:   1 << chunkBits,
		prefetchMin: prefetchFrom,
		scopeIDs:    map[scope]uint32{},
	}
	r.v4, r.v6 = newTable(false, 0), newTable(false, 0)
	r.owners = newTable(true, 0)
	r.more, r.morePos = map[uint64][]uint32{}, map[uint32]uint32{}
	return r
}

func (r *records) len() int { return r.v4.n + r.v6.n }

func unixTime(sec int64) time.Time { return time.Unix(sec, 0) }

func (r *records) table(a netip.Addr) *offTable {
	if a.Is4() {
		return &r.v4
	}
	return &r.v6
}

func (r *records) has(a netip.Addr) bool { return r.find(r.table(a), a) >= 0 }

// scopeID interns p's scope, for a record about to be put.
func (r *records) scopeID(p ipaddress.ParentRef) uint32 {
	if id, ok := r.knownScope(p); ok {
		return id
	}
	s := scope{p.Group, p.Resource, p.Namespace}
	var id uint32
	if n := len(r.freeScopes); n > 0 {
		id = r.freeScopes[n-1]
		r.freeScopes = r.freeScopes[:n-1]
		r.scopes[id] = s
	} else {
		id = uint32(len(r.scopes))
		r.scopes = append(r.scopes, s)
		r.scopeLive = append(r.scopeLive, 0)
	}
	r.scopeIDs[s] = id
	r.last, r.lastOK = id, true
	return id
}

// knownScope returns the index of p's scope if it is interned.
func (r *records) knownScope(p ipaddress.ParentRef) (uint32, bool) {
	if r.lastOK && sameScope(&r.scopes[r.last], &p) {
		return r.last, true
	}
	return r.lookUpScope(&p)
}

// sameScope reports whether s is p's scope: small enough to inline, so
// that the common case costs no call.
func sameScope(s *scope, p *ipaddress.ParentRef) bool {
	return sameString(s.namespace, p.Namespace) && sameString(s.resource, p.Resource) && sameString(s.group, p.Group)
}

// lookUpScope is knownScope past the last scope: a map lookup.
func (r *records) lookUpScope(p *ipaddress.ParentRef) (uint32, bool) {
	id, ok := r.scopeIDs[scope{p.Group, p.Resource, p.Namespace}]
	if ok {
		r.last, r.lastOK = id, true
	}
	return id, ok
}

// sameString reports whether a == b, without comparing bytes when the two
// share them: a caller mostly names its scope with the same strings every
// time, which the interned scope holds.
func sameString(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}

// maxEmptyScopes is how many emptied scopes stay interned at least.
const maxEmptyScopes = 64

// dropScopeRecord counts one record fewer in scope id. A scope left
// without records stays interned until a sweep: a scope whose only record
// comes and goes (a namespace with one Service, re-created) would
// otherwise be freed and interned again on every cycle, a map delete and
// insert of three hashed strings each time. The sweep frees what is still
// empty once the emptied outnumber maxEmptyScopes and half the interned:
// amortized O(1), and at most that many empty scopes are kept.
func (r *records) dropScopeRecord(id uint32) {
	r.scopeLive[id]--
	r.scopeEmptied(id)
}

// scopeEmptied lists scope id for the sweep if it holds no record.
func (r *records) scopeEmptied(id uint32) {
	if r.scopeLive[id] > 0 {
		return
	}
	if n := len(r.emptyScopes); n > 0 && r.emptyScopes[n-1] == id {
		return // listed already: one scope churning is listed once
	}
	r.emptyScopes = append(r.emptyScopes, id)
	if len(r.emptyScopes) <= max(maxEmptyScopes, len(r.scopeIDs)/2) {
		return
	}
	slices.Sort(r.emptyScopes)
	for _, id := range slices.Compact(r.emptyScopes) {
		if r.scopeLive[id] > 0 {
			continue // it has records again
		}
		delete(r.scopeIDs, r.scopes[id])
		r.scopes[id] = scope{}
		r.freeScopes = append(r.freeScopes, id)
		if r.last == id {
			r.lastOK = false
		}
	}
	r.emptyScopes = r.emptyScopes[:0]
}

// ownerKey is an owner's interned scope and its hash in the owner table.
type ownerKey struct {
	sid uint32
	h   uint64
}

// ownerKeyOf returns p's key, interning its scope: for a record about to
// be put.
func (r *records) ownerKeyOf(p ipaddress.ParentRef) ownerKey {
	sid := r.scopeID(p)
	return ownerKey{sid, r.ownerHash(sid, p.Name)}
}

// knownOwnerKey returns p's key if its scope is interned already, and
// interns nothing: for a write that may yet be refused.
func (r *records) knownOwnerKey(p ipaddress.ParentRef) (ownerKey, bool) {
	// knownScope by hand: its call, and the copy of p it takes, cost more
	// than the common case, the last scope again.
	sid := r.last
	if !r.lastOK || !sameScope(&r.scopes[sid], &p) {
		var ok bool
		if sid, ok = r.lookUpScope(&p); !ok {
			return ownerKey{}, false
		}
	}
	if r.prefetchedOK { // the create after a prefetch, mostly
		r.prefetchedOK = false
		if sid == r.prefetched.sid && len(p.Name) == len(r.prefetchedName) && unsafe.StringData(p.Name) == unsafe.StringData(r.prefetchedName) {
			return r.prefetched, true // the same string: the same bytes
		}
	}
	return ownerKey{sid, r.ownerHash(sid, p.Name)}, true
}

// warm loads the owner table's home slot of k. A write calls it before
// looking the address up: in a large store both are cache misses, and
// neither depends on the other, so the processor then waits for them
// together instead of one after the other.
func (r *records) warm(k ownerKey) {
	if t := &r.owners; t.n > 0 {
		r.warmed += t.slot(r.home(t, k.h))[0]
	}
}

// prefetchFrom is the size of a table, in bytes of slots, from which a
// prefetch of its slots is worth its instructions: a table this large is
// past the L2 cache of the hosts measured (512 KiB and 1 MiB), and a slot
// of it read at random mostly waits for memory.
const prefetchFrom = 1 << 20

// prefetchOwner starts loading the owner table's home slot of p, when the
// table is large enough for it to matter and p's scope is interned.
func (r *records) prefetchOwner(p ipaddress.ParentRef) {
	t := &r.owners
	if t.size == 0 || len(t.slots) < r.prefetchMin {
		return
	}
	if k, ok := r.knownOwnerKey(p); ok {
		prefetch.Line(unsafe.Pointer(&t.slot(r.home(t, k.h))[0]))
		r.prefetched, r.prefetchedName, r.prefetchedOK = k, p.Name, true
	}
}

// prefetchAddr starts loading the home slot of a in its address table,
// when the table is large enough for it to matter.
func (r *records) prefetchAddr(a netip.Addr) {
	t := r.table(a)
	if t.size == 0 || len(t.slots) < r.prefetchMin {
		return
	}
	var h uint64
	if a.Is4() {
		k := a.As4()
		h = r.addrHash4(uint64(binary.BigEndian.Uint32(k[:])))
	} else {
		k := a.As16()
		h = r.addrHash16(binary.BigEndian.Uint64(k[:8]), binary.BigEndian.Uint64(k[8:]))
	}
	prefetch.Line(unsafe.Pointer(&t.slot(r.home(t, h))[0]))
}

// put stores a record; the caller checked the address is free. It reports
// false, and stores nothing, when the arena is full (see arena.limit).
func (r *records) put(a netip.Addr, p ipaddress.ParentRef, created, rev int64) bool {
	return r.putKeyed(a, r.ownerKeyOf(p), p.Name, created, rev)
}

// putKeyed is put for a caller that has the owner's key.
func (r *records) putKeyed(a netip.Addr, k ownerKey, name string, created, rev int64) bool {
	sid := k.sid
	if !r.hasBase {
		r.base, r.hasBase = uint32(created), true
	}
	hdr, kb, kn := entryKey(a, sid)
	key := kb[:kn]
	// Room first: a growth may read every entry in the arena, and this one
	// is not in the tables yet.
	t := r.table(a)
	r.reserve(t)
	off, ok := r.arena.add(hdr, key, uint64(rev), uint32(created)-r.base, name)
	if !ok {
		r.scopeEmptied(sid) // interned for this record, maybe: swept if empty
		return false
	}
	r.scopeLive[sid]++
	r.insert(t, r.addrHash(key), off)
	r.addOwner(k.h, sid, name, off)
	return true
}

// entryKey returns the header of an entry of scope sid for address a, and
// the address as the entry stores it: the first n bytes of key.
func entryKey(a netip.Addr, sid uint32) (hdr uint64, key [16]byte, n int) {
	// As16, unlike As4, has no panic to prepare for: this inlines.
	key = a.As16()
	if a.Is4() {
		copy(key[:4], key[12:])
		return uint64(sid) << 1, key, 4
	}
	return uint64(sid)<<1 | 1, key, 16
}

// replace gives the record of a, which exists, the owner p, created and
// rev. The new entry is written before the old one goes, so that a full
// arena refuses the change (false) with the old record as it was.
func (r *records) replace(a netip.Addr, p ipaddress.ParentRef, created, rev int64) bool {
	k := r.ownerKeyOf(p)
	hdr, kb, kn := entryKey(a, k.sid)
	off, ok := r.arena.add(hdr, kb[:kn], uint64(rev), uint32(created)-r.base, p.Name)
	if !ok {
		r.scopeEmptied(k.sid)
		return false
	}
	// The new scope counts first: dropping the old one's record must not
	// sweep a scope the new entry holds.
	r.scopeLive[k.sid]++
	t := r.table(a)
	i := r.find(t, a)
	old := t.off(i)
	sid, name, size := ownerOf(r.arena.bytes(old))
	r.dropOwner(r.ownerHash(sid, name), old)
	r.arena.release(old, size)
	r.dropScopeRecord(sid)
	binary.LittleEndian.PutUint32(t.slot(i), off) // same address: same slot
	r.addOwner(k.h, k.sid, p.Name, off)
	r.compactIfWasteful()
	return true
}

// ownerSlots is how many records of one owner the owner table holds (a
// dual-stack owner has two); the owner's further records go to more.
const ownerSlots = 2

// addOwner indexes the entry at off under its owner (sid, name), hash h:
// in the owner table unless ownerSlots of its slots there hold the owner's
// records already, and then in more. One walk from the home of h counts
// those slots (reading from the arena only the entries whose slot tag
// matches h) and stops where the entry goes.
func (r *records) addOwner(h uint64, sid uint32, name string, off uint32) {
	t := &r.owners
	if t.size == 0 {
		r.reserve(t)
	}
	i, d, tag, n := r.home(t, h), 0, uint8(h), 0
	for ; ; d++ {
		s := t.slot(i)
		cur := binary.LittleEndian.Uint32(s)
		if cur == 0 {
			break
		}
		rd := r.slotDist(t, i, s)
		if rd < d {
			break
		}
		if rd == d && s[5] == tag { // same home and tag: maybe this owner's
			if fsid, fname, _ := ownerOf(r.arena.bytes(cur)); fsid == sid && fname == name {
				n++
			}
		}
		i = t.next(i)
	}
	switch {
	case n >= ownerSlots:
		more := r.more[h]
		r.morePos[off] = uint32(len(more))
		r.more[h] = append(more, off)
	case t.n >= t.full: // the table grows, and the entry's place moves
		r.reserve(t)
		r.insert(t, h, off)
	case t.off(i) == 0:
		t.set(i, off, d, tag)
		t.n++
	default:
		t.shiftIn(i, off, d, tag)
	}
}

// dropOwner removes the entry at off, whose owner hash is h, from the
// owner index: O(1) expected from the table, and from more, where the last
// entry takes its place.
func (r *records) dropOwner(h uint64, off uint32) {
	// The owner table holds the entry if a probe for h meets off: an
	// offset names one entry, so the arena is not read.
	if t := &r.owners; t.n > 0 {
		i := r.home(t, h)
		for d := 0; ; d++ {
			s := t.slot(i)
			cur := binary.LittleEndian.Uint32(s)
			if cur == off {
				r.removeAt(t, i)
				return
			}
			if cur == 0 || r.slotDist(t, i, s) < d {
				break // in more
			}
			i = t.next(i)
		}
	}
	k, ok := r.morePos[off]
	if !ok {
		return
	}
	delete(r.morePos, off)
	more := r.more[h]
	last := more[len(more)-1]
	if last != off {
		more[k] = last
		r.morePos[last] = k
	}
	if more = more[:len(more)-1]; len(more) == 0 {
		delete(r.more, h)
	} else {
		r.more[h] = more
	}
}

func (r *records) get(a netip.Addr) (ipaddress.IPAddress, bool) {
	t := r.table(a)
	i := r.find(t, a)
	if i < 0 {
		return ipaddress.IPAddress{}, false
	}
	return r.record(a, entry{t.off(i)}), true
}

func (r *records) record(a netip.Addr, e entry) ipaddress.IPAddress {
	return r.recordOf(a, r.parse(e.off))
}

func (r *records) recordOf(a netip.Addr, f fields) ipaddress.IPAddress {
	s := r.scopes[f.sid]
	return ipaddress.IPAddress{
		Addr: a,
		// A copy: the entry's bytes are reused once it is deleted.
		Parent:   ipaddress.ParentRef{Group: s.group, Resource: s.resource, Namespace: s.namespace, Name: strings.Clone(f.name)},
		Created:  unixTime(int64(f.created)),
		Revision: int64(f.rev),
	}
}

// delete removes the record of a and returns it.
func (r *records) delete(a netip.Addr) (ipaddress.IPAddress, bool) {
	t := r.table(a)
	i := r.find(t, a)
	if i < 0 {
		return ipaddress.IPAddress{}, false
	}
	rec := r.recordOf(a, r.parse(t.off(i)))
	r.removeSlot(t, i)
	return rec, true
}

// remove removes the record of a, reporting whether there was one.
func (r *records) remove(a netip.Addr) bool {
	t := r.table(a)
	i := r.find(t, a)
	if i < 0 {
		return false
	}
	r.removeSlot(t, i)
	return true
}

// removeSlot removes the record in slot i of t, its owner slot and its
// entry.
func (r *records) removeSlot(t *offTable, i int) {
	off := t.off(i)
	sid, name, size := ownerOf(r.arena.bytes(off))
	r.removeAt(t, i)
	r.dropOwner(r.ownerHash(sid, name), off)
	r.arena.release(off, size)
	r.dropScopeRecord(sid)
	r.compactIfWasteful()
}

// compactIfWasteful compacts the arena once deleted entries take more of
// it than live ones (and at least compactAt bytes).
func (r *records) compactIfWasteful() {
	if r.arena.waste >= r.compactAt && r.arena.waste > r.arena.live {
		r.compact()
	}
}

// of returns the records owned by p.
func (r *records) of(p ipaddress.ParentRef) []ipaddress.IPAddress {
	sid, ok := r.scopeIDs[scope{p.Group, p.Resource, p.Namespace}]
	if !ok {
		return nil
	}
	var out []ipaddress.IPAddress
	add := func(off uint32) {
		if f := r.parse(off); f.sid == sid && f.name == p.Name {
			out = append(out, r.recordOf(f.addr(), f))
		}
	}
	h := r.ownerHash(sid, p.Name)
	t := &r.owners
	i := r.home(t, h)
	// The table may hold none of p's records while more still does.
	for d := 0; t.n > 0 && t.off(i) != 0; d++ {
		rd := r.dist(t, i)
		if rd < d {
			break
		}
		if rd == d && t.slot(i)[5] == uint8(h) { // same home and tag: maybe p's
			add(t.off(i))
		}
		i = t.next(i)
	}
	for _, off := range r.more[h] {
		add(off)
	}
	return out
}

// all calls fn for every record, in no order.
func (r *records) all(fn func(netip.Addr, entry)) {
	for _, t := range [...]*offTable{&r.v4, &r.v6} {
		for i := range t.size {
			if off := t.off(i); off != 0 {
				fn(r.parse(off).addr(), entry{off})
			}
		}
	}
}

// compact copies the live entries into a fresh arena, dropping the space of
// deleted ones, and rebuilds the owner table on the new offsets: O(records),
// run when more than half the arena is waste. The address tables are
// updated in place, slot by slot; they and the owner table are made smaller
// if under a quarter full. The entries are handled by batches: the arena
// reads of a batch are loaded at once (see arena.touch).
func (r *records) compact() {
	old := r.arena
	r.arena = arena{limit: old.limit}
	osize := r.owners.size
	if small := r.owners.sizeFor(r.len()); small < osize/4 {
		osize = small
	}
	r.owners = newTable(true, osize)
	r.more, r.morePos = map[uint64][]uint32{}, map[uint32]uint32{}
	var slots [64]int
	var offs [64]uint32
	for _, t := range [...]*offTable{&r.v4, &r.v6} {
		src := t
		if small := t.sizeFor(t.n); small < t.size/4 {
			cp := *t
			src = &cp
			*t = newTable(false, small)
		}
		for i := 0; i < src.size; {
			n := 0
			for ; i < src.size && n < len(slots); i++ {
				if off := src.off(i); off != 0 {
					slots[n], offs[n] = i, off
					n++
				}
			}
			old.touch(offs[:n])
			for k, i := range slots[:n] {
				b := old.bytes(offs[k])
				f := parseBytes(b, r.base)
				noff, ok := r.arena.addRaw(b[:f.size])
				if !ok {
					// Compaction runs when more than half the arena is
					// waste, so the live entries fit in fewer chunks.
					panic("memory store: live records outgrew the arena in a compaction")
				}
				if src == t {
					binary.LittleEndian.PutUint32(t.slot(i), noff)
				} else {
					r.insert(t, r.addrHash(f.key), noff)
				}
				r.addOwner(r.ownerHash(f.sid, f.name), f.sid, f.name, noff)
			}
		}
	}
}

// Hashing.

// mix64 is the finalizer of SplitMix64: every input bit flips about half of
// the output bits.
func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// addrHash hashes an address in its 4- or 16-byte form.
func (r *records) addrHash(key []byte) uint64 {
	if len(key) == 4 {
		return r.addrHash4(uint64(binary.BigEndian.Uint32(key)))
	}
	return r.addrHash16(binary.BigEndian.Uint64(key[:8]), binary.BigEndian.Uint64(key[8:]))
}

// addrHash4 is addrHash of the 4-byte form of an address, read as v.
func (r *records) addrHash4(v uint64) uint64 { return mix64(r.seed^v) & r.mask }

// addrHash16 is addrHash of the 16-byte form of an address, read as the
// words hi and lo.
func (r *records) addrHash16(hi, lo uint64) uint64 { return mix64(mix64(r.seed^lo)^hi) & r.mask }

// ownerHash hashes an owner, its scope's index and its name, in plain Go:
// cheaper than maphash.String on names of tens of bytes. The scope and the
// name's length seed the state (the length tells apart the overlapping
// reads below, and names that differ in zero bytes only: mixed in at the
// end instead, it left names of zero bytes unevenly spread). The name is
// then read 16 bytes per step, each step folding a 128-bit product of two
// words, data xor key or state, into the state; the last (up to) 16 bytes
// are read as two words that may overlap, so no byte outside the name is
// read. The keys are random per store and every factor holds one of them
// or the state they seeded, so names chosen to collide would have to be
// chosen knowing the keys. (wyhash's construction, which Go's maps use
// where AES is missing.)
func (r *records) ownerHash(sid uint32, name string) uint64 {
	k0, k1 := r.ownerKeys[0], r.ownerKeys[1]
	b := unsafe.Slice(unsafe.StringData(name), len(name))
	n := len(b)
	h := mulFold(k0^(uint64(sid)<<32|uint64(uint32(n))), k1)
	var x, y uint64
	switch {
	case n > 16:
		for rest := b; len(rest) > 16; rest = rest[16:] {
			h = mulFold(binary.LittleEndian.Uint64(rest)^k1, binary.LittleEndian.Uint64(rest[8:])^h)
		}
		x, y = binary.LittleEndian.Uint64(b[n-16:]), binary.LittleEndian.Uint64(b[n-8:])
	case n >= 8:
		x, y = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[n-8:])
	case n >= 4:
		x, y = uint64(binary.LittleEndian.Uint32(b)), uint64(binary.LittleEndian.Uint32(b[n-4:]))
	case n > 0:
		x = uint64(b[0])<<16 | uint64(b[n>>1])<<8 | uint64(b[n-1])
	}
	lo, hi := bits.Mul64(x^k1, y^h)
	return mulFold(lo^k0, hi^k1) & r.mask
}

// mulFold returns the high and low words of the product a*b xored: every
// bit of either factor moves many bits of the result.
func mulFold(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// entryHash is the hash under which the entry at off sits in t.
func (r *records) entryHash(t *offTable, off uint32) uint64 {
	f := r.parse(off)
	if t.owner() {
		return r.ownerHash(f.sid, f.name)
	}
	return r.addrHash(f.key)
}

// Tables.

// offTable is a Robin Hood hash table of arena offsets. An entry's home slot
// is the high word of hash*size, and the entries are kept ordered by home
// along each run of full slots, so a lookup stops at the first entry closer
// to its home than the sought one would be, and a deletion shifts the
// entries after it back by one until one is at home.
//
// The slots are interleaved in one byte array, so a probe touches one cache
// line, not one per field: slotBytes each, the arena offset (4 bytes,
// little endian; 0 marks a free slot), then the distance of the entry from
// its home slot (1 byte), then the low byte of its hash (the tag) so that a
// lookup reads from the arena almost only the entries it wants. The
// distance saturates: 255 means 255 or more, and
// the true one is then computed from the entry's hash; only an owner with
// hundreds of addresses, all in one run, or forced collisions make such
// distances.
type offTable struct {
	slots  []byte
	size   int  // slots
	n      int  // entries
	full   int  // entries at the load bound: size*num/den of maxLoad
	owners bool // keyed by owner, not by address
}

// slotBytes is the size of a slot: offset, distance, tag.
const slotBytes = 6

// Load bounds: an address table holds at most half as many entries as it
// has slots, the owner table two thirds, and a table that reaches its
// bound grows by a quarter. An allocation inserts into an address table at
// a random place and its release deletes there, and each moves the entries
// from there to the next free slot: about 5 of them at 3/4, about 1.5 at
// 1/2, which keeps them on the line the lookup already loaded, for 4.4
// more bytes per record (bench/BENCHMARKS.md has the numbers). The owner
// table keeps 2/3, not 1/2: one IPv6 address scattered in a /64 costs
// ~97 B with index and owner at 1M (95 at 3/4), near the 100 B we allow;
// past 2/3 its probe clusters grew fast (at 3/4, 200 more instructions
// per allocate + release in a full /12).
const (
	addrLoadNum, addrLoadDen   = 1, 2
	ownerLoadNum, ownerLoadDen = 2, 3
	minTableSize               = 8
)

// maxLoad returns t's load bound as num/den.
func (t *offTable) maxLoad() (num, den int) {
	if t.owners {
		return ownerLoadNum, ownerLoadDen
	}
	return addrLoadNum, addrLoadDen
}

// sizeFor returns the size of a table of the kind of t for n entries: the
// size at which it would just have grown.
func (t *offTable) sizeFor(n int) int {
	num, den := t.maxLoad()
	return max(minTableSize, n*den/num*5/4)
}

func newTable(owners bool, size int) offTable {
	slots := make([]byte, slotBytes*size)
	adviseHugePages(slots)
	t := offTable{slots: slots, size: size, owners: owners}
	num, den := t.maxLoad()
	t.full = size * num / den
	return t
}

// hugeAdviceMin is the smallest allocation advised to use huge pages: two
// of them, so that it holds at least one whole aligned one.
const hugeAdviceMin = 4 << 20

func (t *offTable) owner() bool { return t.owners }

func (t *offTable) slot(i int) []byte {
	p := i * slotBytes
	return t.slots[p : p+slotBytes : p+slotBytes]
}

func (t *offTable) off(i int) uint32 { return binary.LittleEndian.Uint32(t.slot(i)) }

// set fills slot i.
func (t *offTable) set(i int, off uint32, d int, tag uint8) {
	s := t.slot(i)
	binary.LittleEndian.PutUint32(s, off)
	s[4] = uint8(min(d, 255))
	s[5] = tag
}

// A slot as a word: the offset in the low 32 bits, the distance in the
// next 8, the tag in the 8 above.
const (
	distOne  = 1 << 32
	distMask = 0xff << 32
)

// word returns slot i as a word.
func (t *offTable) word(i int) uint64 { return slotWord(t.slot(i)) }

// slotWord returns the slot s as a word.
func slotWord(s []byte) uint64 {
	return uint64(binary.LittleEndian.Uint32(s)) | uint64(binary.LittleEndian.Uint16(s[4:]))<<32
}

// setSlotWord fills the slot s from a word.
func setSlotWord(s []byte, w uint64) {
	binary.LittleEndian.PutUint32(s, uint32(w))
	binary.LittleEndian.PutUint16(s[4:], uint16(w>>32))
}

func (t *offTable) next(i int) int {
	if i++; i == t.size {
		return 0
	}
	return i
}

// reserve makes room in t for one more entry.
func (r *records) reserve(t *offTable) {
	if t.n < t.full { // that is, (n+1)/size <= num/den
		return
	}
	r.rehash(t, max(minTableSize, t.size+t.size/4))
}

// rehash moves the entries of t to a new table of size slots. Finding an
// entry's hash reads the arena. When the arena holds no deleted entries,
// every entry in it is live, and they are read in order, which is fast;
// otherwise the old table is walked, and the hashes of a batch of entries
// are found before inserting them, the arena reads of a batch first loaded
// all at once (see arena.touch).
func (r *records) rehash(t *offTable, size int) {
	old := *t
	*t = newTable(old.owners, size)
	var offs [64]uint32
	var hs [64]uint64
	n := 0
	// The owner table holds one slot per owner, not per entry: it is
	// always rebuilt from its own slots.
	if r.arena.waste == 0 && !t.owner() {
		a := &r.arena
		for ci, c := range a.chunks {
			p := 0
			if ci == 0 {
				p = 1 // the pad byte
			}
			for p < len(c) {
				f := parseBytes(c[p:], r.base)
				if t.owner() || (len(f.key) == 16) == (t == &r.v6) {
					offs[n] = uint32(ci)<<chunkBits | uint32(p)
					if t.owner() {
						hs[n] = r.ownerHash(f.sid, f.name)
					} else {
						hs[n] = r.addrHash(f.key)
					}
					if n++; n == len(offs) {
						r.insertBatch(t, hs[:], offs[:])
						n = 0
					}
				}
				p += f.size
			}
		}
		r.insertBatch(t, hs[:n], offs[:n])
		if t.n != old.n {
			panic("memory store: records lost in a rehash")
		}
		return
	}
	flush := func() {
		r.arena.touch(offs[:n])
		for k := range n {
			hs[k] = r.entryHash(&old, offs[k])
		}
		r.insertBatch(t, hs[:n], offs[:n])
		n = 0
	}
	for i := range old.size {
		if off := old.off(i); off != 0 {
			offs[n] = off
			if n++; n == len(offs) {
				flush()
			}
		}
	}
	flush()
}

func (r *records) home(t *offTable, h uint64) int {
	hi, _ := bits.Mul64(h, uint64(t.size))
	return int(hi)
}

// dist is the distance of the entry in slot i from its home.
func (r *records) dist(t *offTable, i int) int { return r.slotDist(t, i, t.slot(i)) }

// slotDist is dist for a probe loop that has slot i as s already: small
// enough to inline, as a call per probed slot costs more than the probe,
// it reads the distance byte and calls trueDist only when it is saturated.
func (r *records) slotDist(t *offTable, i int, s []byte) int {
	if d := s[4]; d < 255 {
		return int(d)
	}
	return r.trueDist(t, i)
}

// trueDist is the distance of the entry in slot i from its home, found
// from its hash: for a saturated distance byte.
func (r *records) trueDist(t *offTable, i int) int {
	h := r.home(t, r.entryHash(t, t.off(i)))
	if i < h {
		i += t.size
	}
	return i - h
}

// insert adds the entry at off, whose hash is h, to t, which has room.
//
// Robin Hood: the entry goes before the first entry nearer its home than
// it would be there, and that entry and the ones after it, up to a free
// slot, move one slot on, keeping their order by home slot.
func (r *records) insert(t *offTable, h uint64, off uint32) {
	i, d, tag := r.home(t, h), 0, uint8(h)
	for {
		s := t.slot(i)
		if binary.LittleEndian.Uint32(s) == 0 {
			t.set(i, off, d, tag)
			t.n++
			return
		}
		rd := r.slotDist(t, i, s)
		if rd < d {
			break
		}
		i = t.next(i)
		d++
	}
	t.shiftIn(i, off, d, tag)
}

// shiftIn puts the entry (off, d, tag) in slot i, where a probe for it
// stopped, and moves the entries from there up to a free slot one slot on,
// one farther from home (a saturated distance stays so), slot by slot: the
// run is mostly a few slots, shorter than a memmove's setup, and the loop
// wraps around the end like any probe.
func (t *offTable) shiftIn(i int, off uint32, d int, tag uint8) {
	moved := t.word(i)
	t.set(i, off, d, tag)
	t.n++
	for uint32(moved) != 0 {
		i = t.next(i)
		s := t.slot(i)
		cur := slotWord(s)
		if moved&distMask != distMask {
			moved += distOne
		}
		setSlotWord(s, moved)
		moved = cur
	}
}

// insertBatch inserts offs[k] under hash hs[k] into t, first loading the
// home slots all at once (see arena.touch).
func (r *records) insertBatch(t *offTable, hs []uint64, offs []uint32) {
	var x byte
	for _, h := range hs {
		x |= t.slots[r.home(t, h)*slotBytes]
	}
	r.arena.sink |= x
	for k, h := range hs {
		r.insert(t, h, offs[k])
	}
}

// find returns the slot of address a in its table t, or -1.
func (r *records) find(t *offTable, a netip.Addr) int {
	if t.n == 0 {
		return -1
	}
	// The address as two words, compared with an entry's key in place of
	// its bytes: no copy of the key, and no call to compare them. The
	// table of a family holds entries of that family only.
	var hi, lo, h uint64
	is6 := !a.Is4()
	if is6 {
		// No record has an address CreateAddresses refuses, and the key
		// below would map a zoned or zero address onto the record of
		// another.
		if !a.IsValid() || a.Zone() != "" {
			return -1
		}
		k := a.As16()
		hi, lo = binary.BigEndian.Uint64(k[:8]), binary.BigEndian.Uint64(k[8:])
		h = r.addrHash16(hi, lo)
	} else {
		k := a.As4()
		lo = uint64(binary.BigEndian.Uint32(k[:]))
		h = r.addrHash4(lo)
	}
	i, tag := r.home(t, h), uint8(h)
	for d := 0; ; d++ {
		s := t.slot(i)
		off := binary.LittleEndian.Uint32(s)
		if off == 0 {
			return -1
		}
		rd := r.slotDist(t, i, s)
		if rd < d {
			return -1
		}
		if rd == d && s[5] == tag { // same home and tag: maybe a's
			// The entry's key follows its header, mostly one byte.
			b, p := r.arena.bytes(off), 1
			if b[0] >= 0x80 {
				_, p = uvarintLong(b, 0)
			}
			if is6 && binary.BigEndian.Uint64(b[p:]) == hi && binary.BigEndian.Uint64(b[p+8:]) == lo ||
				!is6 && uint64(binary.BigEndian.Uint32(b[p:])) == lo {
				return i
			}
		}
		i = t.next(i)
	}
}

// removeAt empties slot i of t, shifting the entries after it back: those
// up to a free slot or an entry at its home move back one slot, one nearer
// home, slot by slot (mostly none or a few; a free slot is all zeros,
// distance included), wrapping around the end like a probe.
func (r *records) removeAt(t *offTable, i int) {
	// Mostly nothing moves: the next slot is free or its entry at home.
	if t.slots[t.next(i)*slotBytes+4] == 0 {
		clear(t.slot(i))
		t.n--
		return
	}
	to := t.slot(i)
	for {
		i = t.next(i)
		s := t.slot(i)
		d := s[4]
		if d == 0 {
			break
		}
		w := slotWord(s)
		if d < 255 || r.trueDist(t, i) == 255 { // else it stays saturated
			w -= distOne
		}
		setSlotWord(to, w)
		to = s
	}
	setSlotWord(to, 0)
	t.n--
}

// Entries.

// fields are the decoded fields of an arena entry. key and name point into
// the arena.
type fields struct {
	key     []byte // the address, 4 or 16 bytes
	name    string
	rev     uint64
	sid     uint32
	created uint32
	size    int // bytes of the whole entry
}

func (f fields) addr() netip.Addr {
	if len(f.key) == 4 {
		return netip.AddrFrom4([4]byte(f.key))
	}
	return netip.AddrFrom16([16]byte(f.key))
}

func (r *records) parse(off uint32) fields { return parseBytes(r.arena.bytes(off), r.base) }

// parseBytes decodes the entry at the start of b.
func parseBytes(b []byte, base uint32) fields {
	hdr, p := uvarintAt(b, 0)
	kl := 4 + 12*int(hdr&1)
	key := b[p : p+kl : p+kl]
	rev, p := uvarintAt(b, p+kl)
	cd, p := uvarintAt(b, p)
	nl, p := uvarintAt(b, p)
	var name string
	if nl > 0 {
		// Not a copy: valid only until the entry is deleted (its bytes
		// are then reused), so it must not leave the store; recordOf
		// copies it.
		name = unsafe.String(&b[p], int(nl))
	}
	return fields{key: key, name: name, rev: rev, sid: uint32(hdr >> 1), created: base + uint32(cd), size: p + int(nl)}
}

// uvarintAt decodes the uvarint at b[p:] and returns it and the position
// after it. Entries are written by the store, so b holds a whole uvarint.
// Most values here are one byte, which is decoded inline.
func uvarintAt(b []byte, p int) (uint64, int) {
	if c := b[p]; c < 0x80 {
		return uint64(c), p + 1
	}
	return uvarintLong(b, p)
}

func uvarintLong(b []byte, p int) (uint64, int) {
	v, n := binary.Uvarint(b[p:])
	return v, p + n
}

// ownerOf decodes only the owner and the size of the entry at the start of
// b, the delete path's needs: by hand, with no calls for one-byte values,
// and into registers rather than a fields struct.
func ownerOf(b []byte) (sid uint32, name string, size int) {
	hdr, p := uint64(b[0]), 1
	if hdr >= 0x80 {
		hdr, p = uvarintLong(b, 0)
	}
	p += 4 + 12*int(hdr&1)
	for b[p] >= 0x80 { // revision
		p++
	}
	p++
	for b[p] >= 0x80 { // created
		p++
	}
	p++
	nl, q := uint64(b[p]), p+1
	if nl >= 0x80 {
		nl, q = uvarintLong(b, p)
	}
	if nl > 0 {
		name = unsafe.String(&b[q], int(nl)) // valid until the entry is deleted
	}
	return uint32(hdr >> 1), name, q + int(nl)
}

func uvarintLen(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// arena stores entries back to back in chunks, so it never copies what it
// holds when it grows. An entry never spans two chunks, and its offset is
// its chunk's index in the high 10 bits and its position in the low
// chunkBits: 1024 chunks, about 4 GiB of entries at most. Full-size chunks
// are 4 MiB so that each holds a whole aligned huge page (see
// adviseHugePages).
//
// A deleted entry's bytes go to a free list of their size, and the next
// entry of exactly that size takes them: an allocator that allocates and
// releases at a steady size writes in place and never compacts. (Entries
// of one store mostly share a few sizes: the same scope, address family
// and name length.) Bytes on free lists still count as waste until reused.
// Entries over maxReusedSize, which no valid owner name makes, are left
// to compaction: the lists are indexed by size, and one list per byte up
// to a huge size would cost far more than the entry.
type arena struct {
	// limit is the most chunks the arena may have: maxChunks, the most
	// its offsets can name, unless a test lowers it; 0 means maxChunks.
	// An entry that would need one more is refused (add reports false).
	limit  int
	chunks [][]byte
	free   [][]uint32 // offsets of deleted entries, by entry size
	live   int        // bytes of entries still referenced
	waste  int        // bytes of deleted entries
	sink   byte
}

const (
	maxReusedSize = 512 // a 253-byte name in an IPv6 entry takes under 300
	chunkBits     = 22  // 4 MiB chunks, after smaller first ones
	firstChunkLog = 12  // the first chunk is 4 KiB; each next one doubles
	maxChunks     = 1 << (32 - chunkBits)
)

// alloc returns the chunk index and position of size fresh bytes, which
// the caller appends to that chunk at once, or false when they would take
// a chunk past the limit.
func (a *arena) alloc(size int) (int, int, bool) {
	n := len(a.chunks)
	if n == 0 || cap(a.chunks[n-1])-len(a.chunks[n-1]) < size {
		if n == maxChunks || n == a.limit && a.limit > 0 {
			return 0, 0, false
		}
		c := make([]byte, 0, max(1<<min(firstChunkLog+n, chunkBits), size+1))
		adviseHugePages(c[:cap(c)])
		if n == 0 {
			c = append(c, 0) // offset 0 is no entry: it marks a free slot
		}
		a.chunks = append(a.chunks, c)
		n++
	}
	a.live += size
	return n - 1, len(a.chunks[n-1]), true
}

// add stores an entry and returns its offset, or false if the arena is
// full.
func (a *arena) add(hdr uint64, key []byte, rev uint64, created uint32, name string) (uint32, bool) {
	var buf [64]byte // most entries fit: no allocation
	b := binary.AppendUvarint(buf[:0], hdr)
	// The key as words, not a call to copy 4 or 16 bytes.
	if len(key) == 4 {
		b = binary.LittleEndian.AppendUint32(b, binary.LittleEndian.Uint32(key))
	} else {
		b = binary.LittleEndian.AppendUint64(b, binary.LittleEndian.Uint64(key[:8]))
		b = binary.LittleEndian.AppendUint64(b, binary.LittleEndian.Uint64(key[8:16]))
	}
	b = binary.AppendUvarint(b, rev)
	b = binary.AppendUvarint(b, uint64(created))
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
	if size := len(b); size < len(a.free) {
		if list := a.free[size]; len(list) > 0 {
			off := list[len(list)-1]
			a.free[size] = list[:len(list)-1]
			copy(a.bytes(off), b)
			a.waste -= size
			a.live += size
			return off, true
		}
	}
	return a.addRaw(b)
}

func (a *arena) addRaw(b []byte) (uint32, bool) {
	ci, pos, ok := a.alloc(len(b))
	if !ok {
		return 0, false
	}
	a.chunks[ci] = append(a.chunks[ci], b...)
	return uint32(ci)<<chunkBits | uint32(pos), true
}

// bytes returns the arena from the entry at off to the end of its chunk.
func (a *arena) bytes(off uint32) []byte {
	return a.chunks[off>>chunkBits][off&(1<<chunkBits-1):]
}

// touch loads the first byte of each entry at offs, a loop so short that
// the processor has all the loads in flight at once: the entries are then in
// cache for what follows, instead of missing one after the other.
func (a *arena) touch(offs []uint32) {
	var x byte
	for _, off := range offs {
		x |= a.chunks[off>>chunkBits][off&(1<<chunkBits-1)]
	}
	a.sink = x
}

// release puts the entry of size bytes at off on its free list.
func (a *arena) release(off uint32, size int) {
	a.live -= size
	a.waste += size
	if size > maxReusedSize {
		return
	}
	if size >= len(a.free) {
		a.free = append(a.free, make([][]uint32, size+1-len(a.free))...)
	}
	a.free[size] = append(a.free[size], off)
}
