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
	"github.com/netipam/netipam/internal/strs"
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
// address (but for the records of IPv4 /16s and IPv6 /112s that hold
// many, which a block per prefix indexes by address instead: see
// denseBlock), owners by owner (scope and name), one slot per record, so
// an owner with several addresses (dual-stack, or hundreds) has several
// slots, all with the same hash (up to ownerSlots; see more). The tables
// probe groups of 7 slots, SwissTable's way (see offTable): a slot is its
// offset (4 bytes) and a control byte that holds 7 more bits of the hash
// (so a lookup reads the arena of almost only the entry it wants), and the
// control bytes of a group are one word, matched all at once; the word's
// eighth byte counts the entries that probed past the group, so that a
// deletion leaves no tombstone (F14's way). The owner slot of a record
// being deleted is found by its offset, without reading the arena.
//
// The owner table (with more) is built by the first lookup by owner, from
// every record, and kept by every write from then on (indexOwners), as the
// etcd store's owner index is: a store never asked by owner hashes no owner
// and keeps no owner slot. Keeping it is about a tenth of an allocation and
// release (the owner's hash on both, a slot written and emptied), 9 bytes a
// record; building it, about 0.14 s at a million records, with the store
// locked (BenchmarkRecordsIndexOwners).
//
// The number of groups is any integer, not a power of two (the home group
// of a hash h is h*groups/2^64), so that growth can be by a quarter: at
// most a fixed share of the slots are full (half in the address tables,
// 2/3 in the owner table; see addrLoadNum), and a table that fills grows,
// all at once, to 5/4 of its size, so the load stays within 4/5 of that
// bound and the bound whatever the number of records. Growth rehashes
// every entry, which reads its address or owner from the arena;
// amortized, that is four entries per insertion. It is done at once, not
// incrementally: at a million records the put that grows a table stalls
// for 0.1 to 0.2 s (both tables of a family may grow on the same put), in
// exchange for lookups that look in one table only. Churn at a constant
// number of records never rehashes.
//
// Per record, then: its entry, the name plus about 12 bytes for IPv4
// (header 1, address 4, revision 3 below 2^21, created 3 within 24 days of
// the first, name length 1) and 24 for IPv6, and 40/7/load bytes of slots
// in each table (a group is 40 bytes), 20 to 25 in all with the owner
// table, 11 to 14 without; a record in a block takes, instead of its
// address slot, its share of the block's 4 bytes per address (10.7 bytes
// at denseFrom records, 4 in a full /16 or /112, up to 32 as it empties
// toward denseUntil).
// An owner's records past its second take no owner slot but 4 bytes in
// more and an entry of morePos (about 10 more).
//
// Deleting a record turns its entry into waste, which the next entry of the
// same size reuses; when the waste outgrows the live entries all the same
// (many deletions, or sizes that do not come back), compact copies the live
// ones into a fresh arena and rebuilds the owner table (and shrinks the
// tables if they are mostly empty).
type records struct {
	v4, v6 offTable
	// dense holds, by /16, the blocks of the IPv4 /16s that hold many
	// records, indexed by address (see denseBlock), nil while none has
	// one; dense6 holds those of IPv6 /112s, by /112. A prefix with a
	// block has none of its records in its family's table. blocks counts
	// the blocks, denseN the records in them.
	dense  *[1 << 16]*denseBlock
	dense6 blockTable
	blocks int
	denseN int
	// sparseAt is, for v4 and v6, how many records the table held when
	// densify last counted them and gave no block (0: since it did, or
	// never counted): it counts again once the table holds twice as many,
	// or fewer.
	sparseAt [2]int
	// denseFrom is how many records of one prefix in a table give it a
	// block when the table grows; a block with fewer than denseUntil goes
	// back to the table. Tests lower both.
	denseFrom, denseUntil int
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
	// ownersIndexed is set by the first lookup by owner (of), which builds
	// owners and more from every record (indexOwners); until then they are
	// empty, and writes neither hash the owner nor index it. From then on
	// every write keeps them.
	ownersIndexed bool
	arena         arena

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
		denseFrom:   denseFrom,
		denseUntil:  denseUntil,
		scopeIDs:    map[scope]uint32{},
	}
	r.v4, r.v6 = newTable(false, 0), newTable(false, 0)
	r.owners = newTable(true, 0)
	r.more, r.morePos = map[uint64][]uint32{}, map[uint32]uint32{}
	return r
}

func (r *records) len() int { return r.v4.n + r.v6.n + r.denseN }

func unixTime(sec int64) time.Time { return time.Unix(sec, 0) }

// tableOf returns the address table of the family of k.
func (r *records) tableOf(k addrKey) *offTable {
	if k.n == 4 {
		return &r.v4
	}
	return &r.v6
}

func (r *records) has(a netip.Addr) bool {
	k, ok := keyOf(a)
	if !ok {
		return false
	}
	sp := r.spotOf(r.tableOf(k), k)
	return sp.held()
}

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
	return strs.Same(s.namespace, p.Namespace) && strs.Same(s.resource, p.Resource) && strs.Same(s.group, p.Group)
}

// lookUpScope is knownScope past the last scope: a map lookup.
func (r *records) lookUpScope(p *ipaddress.ParentRef) (uint32, bool) {
	id, ok := r.scopeIDs[scope{p.Group, p.Resource, p.Namespace}]
	if ok {
		r.last, r.lastOK = id, true
	}
	return id, ok
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
	if !r.ownersIndexed {
		return ownerKey{sid: sid}
	}
	return ownerKey{sid, r.ownerHash(sid, p.Name)}
}

// knownOwnerKey returns p's key if its scope is interned already, and
// interns nothing: for a write that may yet be refused.
func (r *records) knownOwnerKey(p *ipaddress.ParentRef) (ownerKey, bool) {
	// knownScope by hand: its call, and the copy of p it takes, cost more
	// than the common case, the last scope again.
	sid := r.last
	if !r.lastOK || !sameScope(&r.scopes[sid], p) {
		var ok bool
		if sid, ok = r.lookUpScope(p); !ok {
			return ownerKey{}, false
		}
	}
	if !r.ownersIndexed {
		return ownerKey{sid: sid}, true // no hash needed
	}
	if r.prefetchedOK { // the create after a prefetch, mostly
		r.prefetchedOK = false
		if sid == r.prefetched.sid && len(p.Name) == len(r.prefetchedName) && unsafe.StringData(p.Name) == unsafe.StringData(r.prefetchedName) {
			return r.prefetched, true // the same string: the same bytes
		}
	}
	return ownerKey{sid, r.ownerHash(sid, p.Name)}, true
}

// warm loads the owner table's home control word of k. A write calls it
// before looking the address up: in a large store both are cache misses,
// and neither depends on the other, so the processor then waits for them
// together instead of one after the other.
func (r *records) warm(k ownerKey) {
	if t := &r.owners; t.n > 0 {
		r.warmed += uint8(t.slots[r.home(t, k.h)*groupWords])
	}
}

// prefetchFrom is the size of a table, in bytes of slots, from which a
// prefetch of its slots is worth its instructions: a table this large is
// past the L2 cache of the hosts measured (512 KiB and 1 MiB), and a slot
// of it read at random mostly waits for memory.
const prefetchFrom = 1 << 20

// ownersPrefetched reports whether the owner table is large enough for
// a prefetch of its slots to matter (prefetchOwner). Apart so that it
// inlines: a store whose owners are not indexed, the common case, then
// makes no call past PrefetchOwnerLocked (which took 40 instructions of
// a cycle in a /64 holding 100k packed addresses, now 19).
func (r *records) ownersPrefetched() bool {
	t := &r.owners
	return t.size != 0 && t.bytes() >= r.prefetchMin
}

// prefetchOwner starts loading the owner table's home group of p, if p's
// scope is interned. The caller checked ownersPrefetched.
func (r *records) prefetchOwner(p *ipaddress.ParentRef) {
	t := &r.owners
	if k, ok := r.knownOwnerKey(p); ok {
		t.prefetchGroup(r.home(t, k.h))
		r.prefetched, r.prefetchedName, r.prefetchedOK = k, p.Name, true
	}
}

// prefetchGroup starts loading group g of t: its control word, which every
// probe reads, and its offsets, which a hit reads and an insert writes;
// the 40 bytes of a group span one cache line or two.
func (t *offTable) prefetchGroup(g int) {
	p := t.grp(uint(g))
	prefetch.Line(unsafe.Pointer(&p[0]))
	prefetch.Line(unsafe.Pointer(&p[groupWords-1]))
}

// prefetchAddr starts loading where the record of a would be: its entry
// of a block, or its home group in its address table when the table is
// large enough for it to matter.
func (r *records) prefetchAddr(a netip.Addr) {
	k, ok := keyOf(a)
	if !ok {
		return
	}
	if b, j := r.blockOfKey(k); b != nil {
		prefetch.Line(unsafe.Pointer(&b.offs[j]))
		return
	}
	t := r.tableOf(k)
	if t.size == 0 || t.bytes() < r.prefetchMin {
		return
	}
	t.prefetchGroup(r.home(t, r.keyHash(k)))
}

// put stores a record; the caller checked the address is free and valid
// (ipaddress.ValidateAddr). It reports false, and stores nothing, when the
// arena is full (see arena.limit).
func (r *records) put(a netip.Addr, p ipaddress.ParentRef, created, rev int64) bool {
	key := validKey(a)
	t := r.tableOf(key)
	r.reserve(t)
	b, j := r.blockOfKey(key)
	return r.putAt(t, key, &spot{b: b, j: j, i: -1}, r.ownerKeyOf(p), p.Name, created, rev)
}

// spot is where the record of an address is, or would go, as a lookup
// found it: entry j of block b; or, b nil, slot i of its table (-1: not
// there) and the address's hash h (0: not worked out).
type spot struct {
	b *denseBlock
	j uint16
	i int
	h uint64
}

// held reports whether the spot holds a record.
func (s *spot) held() bool {
	if s.b != nil {
		return s.b.offs[s.j] != 0
	}
	return s.i >= 0
}

// off returns the arena offset of the record the spot holds, in t.
func (s *spot) off(t *offTable) uint32 {
	if s.b != nil {
		return s.b.offs[s.j]
	}
	return t.off(s.i)
}

// drop removes the record the spot holds, in t: its slot or block entry,
// its owner slot and its entry.
func (r *records) drop(t *offTable, sp *spot) {
	if sp.b != nil {
		r.removeDense(sp.b, sp.j)
	} else {
		r.removeSlot(t, sp.i, sp.h)
	}
}

// spotOf looks address key up in t, its family's table.
func (r *records) spotOf(t *offTable, key addrKey) spot {
	if b, j := r.blockOfKey(key); b != nil {
		return spot{b: b, j: j}
	}
	i, h := r.findKey(t, key)
	return spot{i: i, h: h}
}

// putAt stores a record of address key, owner k (named name), at sp, a
// spot without one, found in t once t had room (reserve): a growth then
// may read every entry in the arena, and may give the address's prefix a
// block, so it comes before the lookup. It reports false, and stores
// nothing, when the arena is full.
func (r *records) putAt(t *offTable, key addrKey, sp *spot, k ownerKey, name string, created, rev int64) bool {
	sid := k.sid
	if !r.hasBase {
		r.base, r.hasBase = uint32(created), true
	}
	off, ok := r.arena.add(key.header(sid), key, uint64(rev), uint32(created)-r.base, name)
	if !ok {
		r.scopeEmptied(sid) // interned for this record, maybe: swept if empty
		return false
	}
	r.scopeLive[sid]++
	if b := sp.b; b != nil {
		b.offs[sp.j] = off
		b.n++
		r.denseN++
	} else {
		h := sp.h
		if h == 0 { // or a hash that is 0 indeed: worked out again, the same
			h = r.keyHash(key)
		}
		r.insert(t, h, off)
	}
	if r.ownersIndexed {
		r.addOwner(k.h, sid, name, off)
	}
	return true
}

// keyOf returns a as an entry stores it, or false for an address no
// record has: the zero Addr, or one with a zone (CreateAddresses refuses
// both, and as words they would be the address of another record). The
// store converts an address once an operation, here. The conversion is
// u128.FromAddr's, written out: calling it, a second call, cost a cycle
// 33 to 68 instructions more (empty /64, /16 and /12 at 90 %).
func keyOf(a netip.Addr) (addrKey, bool) {
	b := a.AsSlice()
	switch {
	case len(b) == 4:
		return addrKey{lo: uint64(binary.BigEndian.Uint32(b)), n: 4}, true
	case len(b) == 16 && a.Zone() == "":
		return addrKey{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:16]), n: 16}, true
	}
	return addrKey{}, false
}

// validKey is keyOf for an address ipaddress.ValidateAddr accepts.
func validKey(a netip.Addr) addrKey {
	k, _ := keyOf(a)
	return k
}

// header returns the header of an entry of scope sid for address k.
func (k addrKey) header(sid uint32) uint64 {
	if k.n == 4 {
		return uint64(sid) << 1
	}
	return uint64(sid)<<1 | 1
}

// addrKey is an address as an entry stores it, its n bytes (4 for IPv4,
// 16 for IPv6) in network order, held as the words they make: hi and lo,
// IPv4 in the low 32 bits of lo. Words, not an array of bytes: an array
// written a word at a time and then copied whole is a load its stores
// cannot forward to, which waits for them to reach the cache.
type addrKey struct {
	hi, lo uint64
	n      int
}

// appendTo appends the key's n bytes to b.
func (k addrKey) appendTo(b []byte) []byte {
	if k.n == 4 {
		return binary.BigEndian.AppendUint32(b, uint32(k.lo))
	}
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(b, k.hi), k.lo)
}

// keyHash is addrHash of k's bytes.
func (r *records) keyHash(k addrKey) uint64 {
	if k.n == 4 {
		return r.addrHash4(k.lo)
	}
	return r.addrHash16(k.hi, k.lo)
}

// replace gives the record of a, which exists, the owner p, created and
// rev. The new entry is written before the old one goes, so that a full
// arena refuses the change (false) with the old record as it was.
func (r *records) replace(a netip.Addr, p ipaddress.ParentRef, created, rev int64) bool {
	k := r.ownerKeyOf(p)
	key := validKey(a) // the record exists: a is valid
	off, ok := r.arena.add(key.header(k.sid), key, uint64(rev), uint32(created)-r.base, p.Name)
	if !ok {
		r.scopeEmptied(k.sid)
		return false
	}
	// The new scope counts first: dropping the old one's record must not
	// sweep a scope the new entry holds.
	r.scopeLive[k.sid]++
	t := r.tableOf(key)
	sp := r.spotOf(t, key)
	old := sp.off(t)
	sid, name, size := ownerOf(r.arena.bytes(old))
	if r.ownersIndexed {
		r.dropOwner(r.ownerHash(sid, name), old)
	}
	r.arena.release(old, size)
	r.dropScopeRecord(sid)
	if sp.b != nil {
		sp.b.offs[sp.j] = off
	} else {
		t.setOff(sp.i, off) // same address: same slot, same fragment
	}
	if r.ownersIndexed {
		r.addOwner(k.h, k.sid, p.Name, off)
	}
	r.compactIfWasteful()
	return true
}

// ownerSlots is how many records of one owner the owner table holds (a
// dual-stack owner has two); the owner's further records go to more.
const ownerSlots = 2

// addOwner indexes the entry at off under its owner (sid, name), hash h:
// in the owner table unless ownerSlots of its slots there hold the owner's
// records already, and then in more. One walk from the home of h, as far
// as a lookup goes, counts those slots (reading from the arena only the
// entries whose fragment matches h's) and finds the first free slot, where
// the entry goes.
func (r *records) addOwner(h uint64, sid uint32, name string, off uint32) {
	t := &r.owners
	if t.size == 0 {
		r.reserve(t)
	}
	// Mostly the home group holds none of the owner's records, nothing
	// homed there went further, and it has an empty slot, where the entry
	// goes: that case inlines no walk.
	g, f := r.home(t, h), fragment(h)
	if p := t.grp(uint(g)); t.n < t.full {
		if c := ctrlOf(p); matchFragment(c, f) == 0 && overflowOf(c) == 0 && matchEmpty(c) != 0 {
			t.fillIn(p, slotOf(matchEmpty(c)), f, off)
			return
		}
	}
	r.addOwnerWalk(g, h, sid, name, off)
}

// addOwnerWalk is addOwner past its common case, from the home group g:
// a lookup's walk counts the owner's slots, then an insert puts the entry
// in the first empty slot from home.
func (r *records) addOwnerWalk(g int, h uint64, sid uint32, name string, off uint32) {
	t := &r.owners
	f, n := fragment(h), 0
walk:
	for range t.groups {
		c := t.group(g)
		for m := matchFragment(c, f); m != 0; m &= m - 1 {
			if fsid, fname, _ := ownerOf(r.arena.bytes(t.off(firstSlot(g, m)))); fsid == sid && fname == name {
				if n++; n == ownerSlots {
					break walk
				}
			}
		}
		if overflowOf(c) == 0 {
			break
		}
		g = t.nextGroup(g)
	}
	if n >= ownerSlots {
		more := r.more[h]
		r.morePos[off] = uint32(len(more))
		r.more[h] = append(more, off)
		return
	}
	r.reserve(t)
	r.insert(t, h, off)
}

// dropOwner removes the entry at off, whose owner hash is h, from the
// owner index: O(1) expected from the table, and from more, where the last
// entry takes its place.
func (r *records) dropOwner(h uint64, off uint32) {
	// The owner table holds the entry if a probe for h meets off: an
	// offset names one entry, so the arena is not read.
	if t := &r.owners; t.n > 0 {
		home, f := r.home(t, h), fragment(h)
		g := home
		for range t.groups {
			p := t.grp(uint(g))
			c := ctrlOf(p)
			for m := matchFragment(c, f); m != 0; m &= m - 1 {
				if j := slotOf(m); p[2+j] == off {
					t.removeIn(p, j, g, home)
					return
				}
			}
			if overflowOf(c) == 0 {
				break // in more
			}
			g = t.nextGroup(g)
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
	k, ok := keyOf(a)
	if !ok {
		return ipaddress.IPAddress{}, false
	}
	t := r.tableOf(k)
	if sp := r.spotOf(t, k); sp.held() {
		return r.record(a, entry{sp.off(t)}), true
	}
	return ipaddress.IPAddress{}, false
}

func (r *records) record(a netip.Addr, e entry) ipaddress.IPAddress {
	return r.recordOf(a, r.parse(e.off))
}

func (r *records) recordOf(a netip.Addr, f fields) ipaddress.IPAddress {
	// A copy: the entry's bytes are reused once it is deleted.
	return r.recordNamed(a, f, strings.Clone(f.name))
}

// recordNamed is recordOf with the owner's name given, equal to f.name
// but not in the arena: an owner lookup's caller's own.
func (r *records) recordNamed(a netip.Addr, f fields, name string) ipaddress.IPAddress {
	s := r.scopes[f.sid]
	return ipaddress.IPAddress{
		Addr:     a,
		Parent:   ipaddress.ParentRef{Group: s.group, Resource: s.resource, Namespace: s.namespace, Name: name},
		Created:  unixTime(int64(f.created)),
		Revision: int64(f.rev),
	}
}

// delete removes the record of a and returns it.
func (r *records) delete(a netip.Addr) (ipaddress.IPAddress, bool) {
	k, ok := keyOf(a)
	if !ok {
		return ipaddress.IPAddress{}, false
	}
	t := r.tableOf(k)
	sp := r.spotOf(t, k)
	if !sp.held() {
		return ipaddress.IPAddress{}, false
	}
	rec := r.recordOf(a, r.parse(sp.off(t)))
	r.drop(t, &sp)
	return rec, true
}

// remove removes the record of a, reporting whether there was one. It is
// delete without the record, on a release's path: written out, not
// through spotOf and drop, which cost a cycle 37 to 54 instructions more.
func (r *records) remove(a netip.Addr) bool {
	k, ok := keyOf(a)
	if !ok {
		return false
	}
	if b, j := r.blockOfKey(k); b != nil {
		if b.offs[j] == 0 {
			return false
		}
		r.removeDense(b, j)
		return true
	}
	t := r.tableOf(k)
	i, h := r.findKey(t, k)
	if i < 0 {
		return false
	}
	r.removeSlot(t, i, h)
	return true
}

// removeSlot removes the record in slot i of t, whose address hash is h,
// its owner slot and its entry.
func (r *records) removeSlot(t *offTable, i int, h uint64) {
	off := t.off(i)
	r.removeAt(t, i, h)
	r.dropEntry(off)
}

// removeDense removes the record held in entry j of block b, its owner
// slot and its entry; a block left with fewer than denseUntil records
// goes back to its family's table.
func (r *records) removeDense(b *denseBlock, j uint16) {
	off := b.offs[j]
	b.offs[j] = 0
	b.n--
	r.denseN--
	r.dropEntry(off) // may compact, which moves b's offsets
	if b.n < r.denseUntil {
		r.undense(b)
	}
}

// dropEntry drops the entry at off, whose address slot is gone: its owner
// slot, its scope's count and its bytes.
func (r *records) dropEntry(off uint32) {
	sid, name, size := ownerOf(r.arena.bytes(off))
	if r.ownersIndexed {
		r.dropOwner(r.ownerHash(sid, name), off)
	}
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

// of returns the records owned by p, indexing every record by owner first
// if none has been.
func (r *records) of(p ipaddress.ParentRef) []ipaddress.IPAddress {
	if !r.ownersIndexed {
		r.indexOwners()
	}
	// Mostly the scope of the last write (knownScope, inline).
	sid, ok := r.last, r.lastOK && sameScope(&r.scopes[r.last], &p)
	if !ok {
		if sid, ok = r.lookUpScope(&p); !ok {
			return nil
		}
	}
	// The entries found are gathered first, so that the records go into
	// one slice of their number: most owners hold one address, or a
	// dual-stack pair.
	var first [4]fields
	found := first[:0]
	add := func(off uint32) {
		if f := r.parse(off); f.sid == sid && f.name == p.Name {
			found = append(found, f)
		}
	}
	h := r.ownerHash(sid, p.Name)
	// The table may hold none of p's records while more still does.
	if t := &r.owners; t.n > 0 {
		g, f := r.home(t, h), fragment(h)
		for range t.groups {
			c := t.group(g)
			for m := matchFragment(c, f); m != 0; m &= m - 1 {
				add(t.off(firstSlot(g, m))) // maybe p's
			}
			if overflowOf(c) == 0 {
				break
			}
			g = t.nextGroup(g)
		}
	}
	for _, off := range r.more[h] {
		add(off)
	}
	if len(found) == 0 {
		return nil
	}
	out := make([]ipaddress.IPAddress, len(found))
	for i, f := range found {
		out[i] = r.recordNamed(f.addr(), f, p.Name)
	}
	return out
}

// indexOwners builds the owner index (owners and more) from every record,
// and has every write keep it from then on. Its table is sized for the
// records at once, so it does not grow on the way. The records are taken
// by batches, as compact takes them: a batch's entries, then their home
// groups in the owner table, are loaded all at once (see arena.touch),
// and only then indexed.
func (r *records) indexOwners() {
	r.ownersIndexed = true
	r.owners = newTable(true, r.owners.sizeFor(r.len()))
	r.more, r.morePos = map[uint64][]uint32{}, map[uint32]uint32{}
	var (
		offs  [batchLen]uint32
		hs    [batchLen]uint64
		sids  [batchLen]uint32
		names [batchLen]string
	)
	index := func(offs []uint32) {
		r.arena.touch(offs)
		for k, off := range offs {
			sids[k], names[k], _ = ownerOf(r.arena.bytes(off))
			hs[k] = r.ownerHash(sids[k], names[k])
		}
		r.touchHomes(&r.owners, hs[:len(offs)])
		for k, off := range offs {
			r.addOwner(hs[k], sids[k], names[k], off)
		}
	}
	for _, t := range [...]*offTable{&r.v4, &r.v6} {
		for i, n := t.batch(0, nil, offs[:]); n > 0; i, n = t.batch(i, nil, offs[:]) {
			index(offs[:n])
		}
	}
	r.denseBatches(func(offs []uint32, _ []denseAt) { index(offs) })
}

// batchLen is how many entries the loops over a whole table (rehash,
// compact, indexOwners) take at a time: their loads are issued together.
const batchLen = 64

// batch fills offs with the offsets of t's entries from slot index i on,
// and slots, unless nil, with their slot indexes, up to len(offs) of
// them; it returns the slot index to go on from and how many it filled.
func (t *offTable) batch(i int, slots []int, offs []uint32) (next, n int) {
	for ; i < t.span() && n < len(offs); i++ {
		if off := t.off(i); off != 0 {
			if slots != nil {
				slots[n] = i
			}
			offs[n] = off
			n++
		}
	}
	return i, n
}

// all calls fn for every record, in no order.
func (r *records) all(fn func(netip.Addr, entry)) {
	for _, t := range [...]*offTable{&r.v4, &r.v6} {
		for i := range t.span() {
			if off := t.off(i); off != 0 {
				fn(r.parse(off).addr(), entry{off})
			}
		}
	}
	r.denseBatches(func(offs []uint32, at []denseAt) {
		for k, off := range offs {
			fn(at[k].addr(), entry{off})
		}
	})
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
	if r.ownersIndexed {
		osize := r.owners.size
		if small := r.owners.sizeFor(r.len()); small < osize/4 {
			osize = small
		}
		r.owners = newTable(true, osize)
		r.more, r.morePos = map[uint64][]uint32{}, map[uint32]uint32{}
	}
	var slots [batchLen]int
	var offs [batchLen]uint32
	for _, t := range [...]*offTable{&r.v4, &r.v6} {
		src := t
		if small := t.sizeFor(t.n); small < t.size/4 {
			cp := *t
			src = &cp
			*t = newTable(false, small)
		}
		for i, n := src.batch(0, slots[:], offs[:]); n > 0; i, n = src.batch(i, slots[:], offs[:]) {
			old.touch(offs[:n])
			for k, i := range slots[:n] {
				noff, key := r.copyEntry(&old, offs[k])
				if src == t {
					t.setOff(i, noff) // same address: same slot
				} else {
					r.insert(t, r.addrHash(key), noff)
				}
			}
		}
	}
	r.denseBatches(func(offs []uint32, at []denseAt) {
		old.touch(offs)
		for k, off := range offs {
			at[k].b.offs[at[k].j], _ = r.copyEntry(&old, off)
		}
	})
}

// copyEntry copies the entry at off in old, a compaction's old arena,
// into r's arena and indexes it by owner if r does; it returns its new
// offset and its address as the entry stores it (in old).
func (r *records) copyEntry(old *arena, off uint32) (uint32, []byte) {
	b := old.bytes(off)
	f := parseBytes(b, r.base)
	noff, ok := r.arena.addRaw(b[:f.size])
	if !ok {
		// Compaction runs when more than half the arena is waste, so
		// the live entries fit in fewer chunks.
		panic("memory store: live records outgrew the arena in a compaction")
	}
	if r.ownersIndexed {
		r.addOwner(r.ownerHash(f.sid, f.name), f.sid, f.name, noff)
	}
	return noff, f.key
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

// offTable is a hash table of arena offsets probed a group of slots at a
// time, in the manner of SwissTable, with F14's overflow counts in place
// of tombstones. Its slots come in groups of groupSlots; slot index i is
// slot i%8 of group i/8 (i%8 below groupSlots, so that indexes divide by
// shifting), and slot indexes are what find returns and removeAt takes.
// The home group of a hash h is the high word of h*groups, so the number
// of groups is any integer and a table grows by a quarter. A probe visits
// the groups from home on, wrapping around the end, and stops after the
// first group whose overflow count is 0.
//
// One pointer-free array, slots, holds the groups, groupWords uint32s
// each (40 bytes): the group's control word (byte j for slot j, the low
// half first), then the arena offsets of its slots (0 in an empty slot:
// the arena's offset 0 is no entry; the eighth is never used). A slot's
// control byte is ctrlEmpty or ctrlFull plus the low 7 bits of the entry's
// hash (its fragment); the word's top byte is the group's overflow count.
// A probe reads one control word per group and finds the slots whose
// fragment matches, or the empty ones, all at once with a few word
// operations (see matchFragment); only the offsets of matching slots are
// read, and from the arena only their entries (1 in 128 of the others
// match by chance). The offsets are next to their control word, so that a
// hit in a large table mostly misses the cache once before the arena, not
// twice: with two arrays, a get in a table of a million records took 22
// to 28 % longer (BenchmarkRecordsGet).
//
// Invariants: a control byte is full exactly when its offset is not 0, and
// then its fragment is that of its entry's hash. A group's overflow count
// is the number of entries whose home group is before it along the probe
// and which sit after it, that is, whose insert passed it full; it is
// exact below overflowMax, and a count that reached overflowMax stays
// there (a probe then goes on past the group) until a rehash. An insert
// takes the first empty slot from home and counts itself in every group
// it passed; a deletion empties the slot and uncounts the entry from its
// home up to its group. So a lookup may stop at a group whose count is 0:
// no entry of a hash homed at or before it lies further.
//
// With no tombstones, a deletion leaves the table as if the entry had
// never been inserted but for counts saturated on the way (none, unless
// hundreds of entries share a home): churn at a constant number of
// entries neither grows the table nor lengthens its probes, and never
// rebuilds it. (SwissTable's tombstones did: with fresh owners at 2/3
// load, about one deletion in eight left one, and a table of a million
// records was rebuilt in place every ~500k deletions, 130-155 ms each,
// some 300 ns a deletion amortized.)
type offTable struct {
	slots  []uint32 // groupWords per group: its control word, then its slots' offsets
	groups int
	size   int  // slots: groups*groupSlots
	n      int  // entries
	full   int  // entries at the load bound: size*num/den of maxLoad
	owners bool // keyed by owner, not by address
}

// Control bytes. An empty slot is 0, not the 0x80 of SwissTable, so that a
// fresh table is all zeros, as make returns it: a large one is never
// written before use (the runtime's memory from the kernel is zeroed
// already), and its pages are touched only as entries arrive.
const (
	groupSlots  = 7                  // slots per group: bytes 0 to 6 of its control word
	slotStride  = 8                  // slot indexes per group
	groupWords  = 2 + slotStride     // uint32s in a group: control word, 8 offsets (the last unused)
	ctrlEmpty   = 0x00               // an empty slot
	ctrlFull    = 0x80               // | the fragment, 7 bits of the hash
	overflowMax = 0xff               // a saturated overflow count
	overflowOne = 1 << 24            // one in the overflow count, the top byte of a group's second word
	lsbs        = 0x0101010101010101 // the low bit of each byte
	slotMsbs    = 0x0080808080808080 // the high bit of each slot's control byte
)

// fragment returns the control byte of a full slot whose entry's hash is h:
// the low bits, as home uses the high ones.
func fragment(h uint64) uint64 { return ctrlFull | h&0x7f }

// matchFragment returns the full slots of control word c whose control
// byte is f, as the high bit of their byte: every one of them, and now and
// then a slot just above one of them (a borrow of the subtraction carries
// into the next byte when it holds f^1), which the caller tells apart by
// its offset or key. Empty slots never match, nor does the overflow count.
func matchFragment(c, f uint64) uint64 {
	x := c ^ lsbs*f // 0 in a byte equal to f
	return (x - lsbs) &^ x & slotMsbs
}

// matchEmpty returns the empty slots of control word c.
func matchEmpty(c uint64) uint64 { return ^c & slotMsbs }

// overflowOf returns the overflow count in control word c.
func overflowOf(c uint64) uint64 { return c >> 56 }

// firstSlot returns the slot index of the slot of group g that the lowest
// byte set in a match names.
func firstSlot(g int, m uint64) int { return g*slotStride + int(slotOf(m)) }

// slotOf returns the index in its group of the slot that the lowest byte
// set in a match names (masked, so that indexing a group with it needs no
// bounds check).
func slotOf(m uint64) uint { return uint(bits.TrailingZeros64(m)>>3) & (slotStride - 1) }

// Load bounds: an address table holds at most half as many entries as it
// has slots, the owner table two thirds, and a table that reaches its
// bound grows by a quarter. With Robin Hood tables of 6-byte slots these
// bounds were the cheapest of those measured (an allocation and its
// release moved about 1.5 entries each at 1/2, 5 at 3/4; the owner table
// at 2/3 kept one IPv6 address scattered in a /64 near 97 B at 1M). They
// are kept for the group tables, whose slots take 40/7 bytes; other
// bounds were not measured with groups.
const (
	addrLoadNum, addrLoadDen   = 1, 2
	ownerLoadNum, ownerLoadDen = 2, 3
	minTableSize               = groupSlots
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

// newTable returns an empty table of size slots, rounded up to whole
// groups.
func newTable(owners bool, size int) offTable {
	groups := (size + groupSlots - 1) / groupSlots
	size = groups * groupSlots
	t := offTable{slots: make([]uint32, groups*groupWords), groups: groups, size: size, owners: owners}
	if size > 0 {
		adviseHugePages(unsafe.Slice((*byte)(unsafe.Pointer(&t.slots[0])), 4*len(t.slots)))
	}
	num, den := t.maxLoad()
	t.full = size * num / den // below size: an insert always finds an empty slot
	return t
}

// hugeAdviceMin is the smallest allocation advised to use huge pages: two
// of them, so that it holds at least one whole aligned one.
const hugeAdviceMin = 4 << 20

func (t *offTable) owner() bool { return t.owners }

// bytes is the memory of t's slots.
func (t *offTable) bytes() int { return len(t.slots) * 4 }

// span is the number of slot indexes of t: those of its slots, and the
// unused eighth of each group, whose offset is always 0.
func (t *offTable) span() int { return t.groups * slotStride }

// grp returns group g: its control word (two elements, the low half
// first) and its slots' offsets. (Indexes as uint: a division and
// remainder by 8 are then a shift and a mask; and one bounds check covers
// every access to the group.)
func (t *offTable) grp(g uint) *[groupWords]uint32 {
	// One bounds check, on the group's last element (g is below groups,
	// so the product does not wrap), then the group's address: the
	// conversion of a subslice costs a dozen instructions more.
	_ = t.slots[g*groupWords+groupWords-1]
	return (*[groupWords]uint32)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(t.slots)), g*groupWords*4))
}

// ctrlOf returns the control word of group p: two loads that the compiler
// makes one on a little-endian machine.
func ctrlOf(p *[groupWords]uint32) uint64 { return uint64(p[0]) | uint64(p[1])<<32 }

// group returns the control word of group g.
func (t *offTable) group(g int) uint64 { return ctrlOf(t.grp(uint(g))) }

// off returns the offset in slot i.
func (t *offTable) off(i int) uint32 { return t.grp(uint(i) / slotStride)[2+uint(i)%slotStride] }

// setOff sets the offset in slot i.
func (t *offTable) setOff(i int, off uint32) { t.grp(uint(i) / slotStride)[2+uint(i)%slotStride] = off }

// nextGroup returns the group after g, wrapping around the end.
func (t *offTable) nextGroup(g int) int {
	if g++; g == t.groups {
		return 0
	}
	return g
}

// fillIn puts the entry at off, whose fragment is f, in the empty slot j
// of group p.
func (t *offTable) fillIn(p *[groupWords]uint32, j uint, f uint64, off uint32) {
	w, sh := &p[j/4%2], j%4*8
	*w |= uint32(f) << sh
	p[2+j%slotStride] = off
	t.n++
}

// passed counts one more entry in the overflow count of group p, unless
// the count is saturated.
func passed(p *[groupWords]uint32) {
	if p[1]>>24 != overflowMax {
		p[1] += overflowOne
	}
}

// reserve makes room in t for one more entry: a growth by a quarter at the
// load bound.
func (r *records) reserve(t *offTable) {
	if t.n < t.full {
		return
	}
	r.grow(t)
}

// grow makes room in t, which is at its load bound: the records of
// prefixes that hold many go to blocks (densify), or the table grows.
func (r *records) grow(t *offTable) {
	if r.densify(t) && t.n < t.full/2 {
		// Most went to blocks: the table is sized for what is left.
		r.rehash(t, t.sizeFor(t.n+1))
		return
	}
	if t.n < t.full {
		return
	}
	r.rehash(t, max(minTableSize, t.size+t.size/4))
}

// readsArena reports whether the entries of t, an address table holding
// n of them, are best read by walking the arena in order (arenaEntries):
// when the arena holds no deleted entries, every entry in it is live, and
// reading them in order is fast, unless most are of the other family or
// in blocks (with most IPv4 records in blocks, a sequential fill of a /8
// took ten times as long).
func (r *records) readsArena(t *offTable, n int) bool {
	return r.arena.waste == 0 && !t.owner() && 2*n >= r.len()
}

// arenaEntries calls fn with the offset and the address (as the entry
// stores it) of every record of t's family that no block holds, walking
// an arena without waste in order.
func (r *records) arenaEntries(t *offTable, fn func(off uint32, key []byte)) {
	for ci, c := range r.arena.chunks {
		p := 0
		if ci == 0 {
			p = 1 // the pad byte
		}
		for p < len(c) {
			f := parseBytes(c[p:], r.base)
			if (len(f.key) == 16) == (t == &r.v6) && !r.inBlock(f.key) {
				fn(uint32(ci)<<chunkBits|uint32(p), f.key)
			}
			p += f.size
		}
	}
}

// rehash moves the entries of t to a new table of size slots. Finding an
// entry's hash reads the arena: in order if it can (readsArena; never for
// the owner table, which holds one slot per owner, not per entry);
// otherwise the old table is walked, and the hashes of a batch of entries
// are found before inserting them, the arena reads of a batch first loaded
// all at once (see arena.touch).
func (r *records) rehash(t *offTable, size int) {
	old := *t
	*t = newTable(old.owners, size)
	var offs [batchLen]uint32
	var hs [batchLen]uint64
	n := 0
	if r.readsArena(t, old.n) {
		r.arenaEntries(t, func(off uint32, key []byte) {
			offs[n] = off
			hs[n] = r.addrHash(key)
			if n++; n == len(offs) {
				r.insertBatch(t, hs[:], offs[:])
				n = 0
			}
		})
		r.insertBatch(t, hs[:n], offs[:n])
		if t.n != old.n {
			panic("memory store: records lost in a rehash")
		}
		return
	}
	for i, n := old.batch(0, nil, offs[:]); n > 0; i, n = old.batch(i, nil, offs[:]) {
		r.arena.touch(offs[:n])
		for k := range n {
			hs[k] = r.entryHash(&old, offs[k])
		}
		r.insertBatch(t, hs[:n], offs[:n])
	}
}

// home returns the home group of hash h in t.
func (r *records) home(t *offTable, h uint64) int {
	hi, _ := bits.Mul64(h, uint64(t.groups))
	return int(hi)
}

// insert adds the entry at off, whose hash is h, to t, which has room and
// does not hold it: in the first empty slot from its home group on,
// counted in the overflow of every group it passes.
func (r *records) insert(t *offTable, h uint64, off uint32) {
	g := r.home(t, h)
	for {
		p := t.grp(uint(g))
		if m := matchEmpty(ctrlOf(p)); m != 0 {
			t.fillIn(p, slotOf(m), fragment(h), off)
			return
		}
		passed(p)
		g = t.nextGroup(g)
	}
}

// insertBatch inserts offs[k] under hash hs[k] into t, first loading the
// home control words all at once (see arena.touch).
func (r *records) insertBatch(t *offTable, hs []uint64, offs []uint32) {
	r.touchHomes(t, hs)
	for k, h := range hs {
		r.insert(t, h, offs[k])
	}
}

// touchHomes loads the home control words in t of the hashes hs all at
// once (see arena.touch).
func (r *records) touchHomes(t *offTable, hs []uint64) {
	var x uint64
	for _, h := range hs {
		x |= uint64(t.slots[r.home(t, h)*groupWords])
	}
	r.arena.sink |= byte(x)
}

// findKey returns the slot of address k in t, its family's table, or -1,
// and k's hash (0 when t is empty).
func (r *records) findKey(t *offTable, k addrKey) (int, uint64) {
	if t.n == 0 {
		return -1, 0
	}
	// The address as two words, compared with an entry's key in place of
	// its bytes: no copy of the key, and no call to compare them. The
	// table of a family holds entries of that family only.
	hi, lo := k.hi, k.lo
	is6 := k.n == 16
	h := r.keyHash(k)
	g, f := r.home(t, h), fragment(h)
	for range t.groups { // a whole turn, in case every count is saturated
		gp := t.grp(uint(g))
		c := ctrlOf(gp)
		for m := matchFragment(c, f); m != 0; m &= m - 1 {
			j := slotOf(m)
			// The entry's key follows its header, mostly one byte.
			b, p := r.arena.bytes(gp[2+j]), 1
			if b[0] >= 0x80 {
				_, p = uvarintLong(b, 0)
			}
			if is6 && binary.BigEndian.Uint64(b[p:]) == hi && binary.BigEndian.Uint64(b[p+8:]) == lo ||
				!is6 && uint64(binary.BigEndian.Uint32(b[p:])) == lo {
				return g*slotStride + int(j), h
			}
		}
		if overflowOf(c) == 0 {
			break
		}
		g = t.nextGroup(g)
	}
	return -1, h
}

// removeAt empties slot i of t, whose entry has the hash h.
func (r *records) removeAt(t *offTable, i int, h uint64) {
	g := i / slotStride
	t.removeIn(t.grp(uint(g)), uint(i)%slotStride, g, r.home(t, h))
}

// removeIn empties slot j of group g (p), whose entry's home group is
// home: the groups from home up to g count one entry fewer past them.
func (t *offTable) removeIn(p *[groupWords]uint32, j uint, g, home int) {
	w, sh := &p[j/4%2], j%4*8
	*w &^= 0xff << sh
	p[2+j%slotStride] = 0
	t.n--
	for ; home != g; home = t.nextGroup(home) {
		if q := t.grp(uint(home)); q[1]>>24 != overflowMax {
			q[1] -= overflowOne
		}
	}
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
// full. The entry is encoded where it goes, its size worked out first: an
// entry built aside and then copied is read back in blocks of 16 bytes
// from the byte-and-word stores that just made it, loads the processor
// cannot forward from them, and it waits for them to reach the cache.
func (a *arena) add(hdr uint64, key addrKey, rev uint64, created uint32, name string) (uint32, bool) {
	size := uvarintSizeSmall(hdr) + key.n + uvarintSize(rev) + uvarintSize(uint64(created)) +
		uvarintSizeSmall(uint64(len(name))) + len(name)
	var off uint32
	var dst []byte
	if size < len(a.free) {
		if list := a.free[size]; len(list) > 0 {
			off = list[len(list)-1]
			a.free[size] = list[:len(list)-1]
			a.waste -= size
			a.live += size
			dst = a.bytes(off)[:0:size]
		}
	}
	if dst == nil {
		ci, pos, ok := a.alloc(size)
		if !ok {
			return 0, false
		}
		c := a.chunks[ci][:pos+size]
		a.chunks[ci] = c
		dst = c[pos:pos:len(c)]
		off = uint32(ci)<<chunkBits | uint32(pos)
	}
	// dst has room for exactly size bytes: the appends write into it.
	b := binary.AppendUvarint(dst, hdr)
	b = key.appendTo(b)
	b = binary.AppendUvarint(b, rev)
	b = binary.AppendUvarint(b, uint64(created))
	b = binary.AppendUvarint(b, uint64(len(name)))
	_ = append(b, name...)
	return off, true
}

// uvarintSize is the length of x's unsigned varint encoding.
func uvarintSize(x uint64) int { return (bits.Len64(x|1) + 6) / 7 }

// uvarintSizeSmall is uvarintSize for a value mostly below 0x80, one byte
// (a header or a name's length), without working out its bits.
func uvarintSizeSmall(x uint64) int {
	if x < 0x80 {
		return 1
	}
	return uvarintSize(x)
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
