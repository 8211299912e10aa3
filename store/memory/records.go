package memory

import (
	"hash/maphash"
	"net/netip"
	"slices"
	"time"

	"github.com/netipam/netipam/ipaddress"
)

// records holds the address records in pointer-free maps, so the garbage
// collector never scans them and a record costs tens of bytes, not
// hundreds: owner names live in a chunked byte arena, the group, resource
// and namespace of an owner (its scope, shared by many owners) are interned,
// and the owner index maps an owner's hash to its address.
type records struct {
	byAddr map[addrKey]entry
	// byOwner maps an owner hash to one address of it; further addresses
	// (dual-stack owners, hash collisions) go to moreOwner.
	byOwner   map[uint64]addrKey
	moreOwner map[uint64][]addrKey
	seed      maphash.Seed
	scopes    []scope
	scopeIDs  map[scope]uint32
	last      uint32 // the scope looked up last: most writes repeat it
	arena     arena
}

// addrKey is an address in 16-byte form; IPv4-mapped addresses are never
// stored, so IPv4 addresses cannot collide with IPv6 ones.
type addrKey [16]byte

func keyOf(a netip.Addr) addrKey { return a.As16() }

func (k addrKey) addr() netip.Addr { return netip.AddrFrom16(k).Unmap() }

type scope struct{ group, resource, namespace string }

// entry is one record without its address. Created is kept in Unix
// seconds, the precision of a Kubernetes creationTimestamp.
type entry struct {
	rev     int64
	name    uint32 // arena offset of the owner's name
	scope   uint32
	created uint32
	nameLen uint16
}

func newRecords() *records {
	return &records{
		byAddr:    map[addrKey]entry{},
		byOwner:   map[uint64]addrKey{},
		moreOwner: map[uint64][]addrKey{},
		seed:      maphash.MakeSeed(),
		scopeIDs:  map[scope]uint32{},
	}
}

func (r *records) len() int { return len(r.byAddr) }

func unixTime(sec int64) time.Time { return time.Unix(sec, 0) }

func (r *records) has(a netip.Addr) bool {
	_, ok := r.byAddr[keyOf(a)]
	return ok
}

func (r *records) scopeID(p ipaddress.ParentRef) uint32 {
	s := scope{p.Group, p.Resource, p.Namespace}
	if len(r.scopes) > 0 && r.scopes[r.last] == s {
		return r.last
	}
	id, ok := r.scopeIDs[s]
	if !ok {
		id = uint32(len(r.scopes))
		r.scopes = append(r.scopes, s)
		r.scopeIDs[s] = id
	}
	r.last = id
	return id
}

func (r *records) ownerHash(scopeID uint32, name string) uint64 {
	// Mixing the scope in after hashing the name keeps this one
	// maphash.String call: a streaming maphash.Hash costs several times more.
	return maphash.String(r.seed, name) ^ (uint64(scopeID)+1)*0x9e3779b97f4a7c15
}

// put stores a record; the caller checked the address is free.
func (r *records) put(a netip.Addr, p ipaddress.ParentRef, created, rev int64) {
	k := keyOf(a)
	sid := r.scopeID(p)
	off := r.arena.add(p.Name)
	r.byAddr[k] = entry{rev: rev, name: off, scope: sid, created: uint32(created), nameLen: uint16(len(p.Name))}
	h := r.ownerHash(sid, p.Name)
	if _, taken := r.byOwner[h]; taken {
		r.moreOwner[h] = append(r.moreOwner[h], k)
	} else {
		r.byOwner[h] = k
	}
}

func (r *records) get(a netip.Addr) (ipaddress.IPAddress, bool) {
	e, ok := r.byAddr[keyOf(a)]
	if !ok {
		return ipaddress.IPAddress{}, false
	}
	return r.record(a, e), true
}

func (r *records) record(a netip.Addr, e entry) ipaddress.IPAddress {
	s := r.scopes[e.scope]
	return ipaddress.IPAddress{
		Addr:     a,
		Parent:   ipaddress.ParentRef{Group: s.group, Resource: s.resource, Namespace: s.namespace, Name: string(r.arena.bytes(e.name, e.nameLen))},
		Created:  unixTime(int64(e.created)),
		Revision: e.rev,
	}
}

// delete removes the record of a and returns it.
func (r *records) delete(a netip.Addr) (ipaddress.IPAddress, bool) {
	k := keyOf(a)
	e, ok := r.byAddr[k]
	if !ok {
		return ipaddress.IPAddress{}, false
	}
	rec := r.record(a, e)
	delete(r.byAddr, k)
	h := r.ownerHash(e.scope, rec.Parent.Name)
	more := r.moreOwner[h]
	switch {
	case r.byOwner[h] == k && len(more) == 0:
		delete(r.byOwner, h)
	case r.byOwner[h] == k:
		r.byOwner[h] = more[len(more)-1]
		more = more[:len(more)-1]
	default:
		more = slices.DeleteFunc(more, func(x addrKey) bool { return x == k })
	}
	if len(more) == 0 {
		delete(r.moreOwner, h)
	} else {
		r.moreOwner[h] = more
	}
	r.arena.free(int(e.nameLen))
	if r.arena.wasteful() {
		r.compact()
	}
	return rec, true
}

// of returns the records owned by p.
func (r *records) of(p ipaddress.ParentRef) []ipaddress.IPAddress {
	sid, ok := r.scopeIDs[scope{p.Group, p.Resource, p.Namespace}]
	if !ok {
		return nil
	}
	h := r.ownerHash(sid, p.Name)
	first, ok := r.byOwner[h]
	if !ok {
		return nil
	}
	var out []ipaddress.IPAddress
	for _, k := range append([]addrKey{first}, r.moreOwner[h]...) {
		e := r.byAddr[k]
		if e.scope == sid && string(r.arena.bytes(e.name, e.nameLen)) == p.Name {
			out = append(out, r.record(k.addr(), e))
		}
	}
	return out
}

// all calls fn for every record, in no order.
func (r *records) all(fn func(netip.Addr, entry)) {
	for k, e := range r.byAddr {
		fn(k.addr(), e)
	}
}

// compact copies the live names into a fresh arena, dropping the space of
// deleted ones: O(records), run when at least half the arena is waste.
func (r *records) compact() {
	var fresh arena
	for k, e := range r.byAddr {
		e.name = fresh.add(string(r.arena.bytes(e.name, e.nameLen)))
		r.byAddr[k] = e
	}
	r.arena = fresh
}

// arena stores names back to back in fixed-size chunks, so it never copies
// what it holds when it grows. A name never spans two chunks.
type arena struct {
	chunks [][]byte
	live   int // bytes of names still referenced
	waste  int // bytes of deleted names
}

const chunkBits = 20 // 1 MiB chunks

func (a *arena) add(s string) uint32 {
	n := len(a.chunks)
	if n == 0 || len(a.chunks[n-1])+len(s) > 1<<chunkBits {
		a.chunks = append(a.chunks, make([]byte, 0, 1<<chunkBits))
		n++
	}
	c := a.chunks[n-1]
	off := uint32(n-1)<<chunkBits | uint32(len(c))
	a.chunks[n-1] = append(c, s...)
	a.live += len(s)
	return off
}

func (a *arena) bytes(off uint32, n uint16) []byte {
	c := a.chunks[off>>chunkBits]
	start := off & (1<<chunkBits - 1)
	return c[start : start+uint32(n)]
}

func (a *arena) free(n int) {
	a.live -= n
	a.waste += n
}

func (a *arena) wasteful() bool { return a.waste > 1<<chunkBits && a.waste > a.live }
