package bench

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"

	"github.com/netipam/netipam/internal/bitmap"
	"github.com/netipam/netipam/internal/u128"
	"github.com/netipam/netipam/ipaddress"
)

// ImplFloorIndexed names FloorIndexed in benchmark names.
const ImplFloorIndexed = "floor-indexed"

// FloorIndexed is NewFloorDense with the one thing it leaves out that
// netipam's API needs: an owner index. Every owner is interned under its
// full reference when it gets its first address and dropped with its last,
// and knows its addresses, so AddressesOf needs no scan. It is the least
// an allocator answering "which addresses does this owner hold" costs,
// still with no validation, store, revisions, fencing, CIDR set or
// watchers. Not for use.
type FloorIndexed struct {
	mu    sync.Mutex
	first u128.U128 // the first usable address
	is4   bool
	bits  *bitmap.Bitmap
	ids   []uint32 // per usable address: 0, or 1 + its owner's slot
	slots []indexedOwner
	byRef map[ipaddress.ParentRef]uint32 // owner -> slot
	free  []uint32                       // slots of dropped owners, for reuse
	ring  ownerRing
	fills int // addresses Fill gave out, each to its own Owner
}

// indexedOwner is one interned owner and the offsets of its addresses. A
// reused slot keeps its offsets' capacity, so steady churn allocates
// nothing.
type indexedOwner struct {
	ref  ipaddress.ParentRef
	offs []uint64
}

// NewFloorIndexed returns an empty FloorIndexed over the usable addresses
// of prefix (up to 2^32 of them: the array takes 4 bytes per address).
func NewFloorIndexed(prefix netip.Prefix) *FloorIndexed {
	n := uint64(Usable(prefix))
	return &FloorIndexed{
		first: u128.FromAddr(AddrAt(prefix, 0, 1)),
		is4:   prefix.Addr().Is4(),
		bits:  bitmap.New(n),
		ids:   make([]uint32, n),
		byRef: make(map[ipaddress.ParentRef]uint32),
	}
}

// offset returns addr's bit, and false if addr is not a usable address.
// It and AllocateNext repeat Floor's code on purpose: shared through one
// type, the floors measured 5–12 % slower (12 paired rounds), and a floor
// is the least work.
func (f *FloorIndexed) offset(addr netip.Addr) (uint64, bool) {
	x := u128.FromAddr(addr)
	if addr.Is4() != f.is4 || x.Less(f.first) {
		return 0, false
	}
	d := x.Sub(f.first)
	return d.Lo, d.Hi == 0 && d.Lo < f.bits.Len()
}

// hold records owner as the holder of the address at off.
func (f *FloorIndexed) hold(owner ipaddress.ParentRef, off uint64) {
	slot, ok := f.byRef[owner]
	if !ok {
		if n := len(f.free); n > 0 {
			slot, f.free = f.free[n-1], f.free[:n-1]
		} else {
			slot = uint32(len(f.slots))
			f.slots = append(f.slots, indexedOwner{})
		}
		f.slots[slot].ref = owner
		f.byRef[owner] = slot
	}
	f.slots[slot].offs = append(f.slots[slot].offs, off)
	f.ids[off] = slot + 1
}

// drop forgets the holder of the address at off, and the holder itself
// with its last address.
func (f *FloorIndexed) drop(off uint64) {
	slot := f.ids[off] - 1
	f.ids[off] = 0
	o := &f.slots[slot]
	for i, x := range o.offs {
		if x == off {
			o.offs[i] = o.offs[len(o.offs)-1]
			o.offs = o.offs[:len(o.offs)-1]
			break
		}
	}
	if len(o.offs) == 0 {
		delete(f.byRef, o.ref)
		o.ref = ipaddress.ParentRef{}
		f.free = append(f.free, slot)
	}
}

// AllocateNext implements Allocator.
func (f *FloorIndexed) AllocateNext() (netip.Addr, error) {
	owner := f.ring.next()
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.bits.Len()
	start := rand.Uint64N(n)
	off, ok := f.bits.NextClear(start, n-1)
	if !ok && start > 0 {
		off, ok = f.bits.NextClear(0, start-1)
	}
	if !ok {
		return netip.Addr{}, errFloorFull
	}
	f.bits.Set(off)
	f.hold(owner, off)
	return f.first.Add64(off).Addr(f.is4), nil
}

// Allocate implements Allocator.
func (f *FloorIndexed) Allocate(addr netip.Addr) error {
	off, ok := f.offset(addr)
	if !ok {
		return errFloorOutside
	}
	owner := f.ring.next()
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.bits.Set(off) {
		return errors.New("floor: address in use")
	}
	f.hold(owner, off)
	return nil
}

// Release implements Allocator.
func (f *FloorIndexed) Release(addr netip.Addr) error {
	off, ok := f.offset(addr)
	if !ok {
		return errFloorOutside
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.bits.Clear(off) {
		f.drop(off)
	}
	return nil
}

// AddressesOf returns the addresses owner holds, in no order.
func (f *FloorIndexed) AddressesOf(owner ipaddress.ParentRef) []netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	slot, ok := f.byRef[owner]
	if !ok {
		return nil
	}
	var out []netip.Addr
	for _, off := range f.slots[slot].offs {
		out = append(out, f.first.Add64(off).Addr(f.is4))
	}
	return out
}

// Fill implements Allocator: the i-th address filled is Owner(i)'s.
func (f *FloorIndexed) Fill(addrs []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range addrs {
		off, ok := f.offset(a)
		if !ok || !f.bits.Set(off) {
			return errors.New("floor: fill address outside the range or in use")
		}
		f.hold(Owner(f.fills), off)
		f.fills++
	}
	return nil
}

// Close implements Allocator.
func (f *FloorIndexed) Close() error { return nil }

func (f *FloorIndexed) cycleRing() *ownerRing { return &f.ring }
