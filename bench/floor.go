package bench

import (
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"

	"github.com/netipam/netipam/internal/bitmap"
	"github.com/netipam/netipam/internal/u128"
	"github.com/netipam/netipam/ipaddress"
)

// ImplFloor and ImplFloorDense name Floor's two forms in benchmark names.
const (
	ImplFloor      = "floor"
	ImplFloorDense = "floor-dense"
)

// Floor is not an allocator anyone should use: it is the least work an
// in-process allocator that records an owner per address can do, measured
// on the same machine as the others to put their numbers in scale. One
// mutex, netipam's bitmap over the usable addresses with a random start,
// and a Go map from address to owner (NewFloorDense: an array of owner ids
// indexed by address instead, which costs less). It has no store,
// revisions, fencing, owner index, validation, CIDR set or watchers, all
// of which netipam pays for on every allocation.
type Floor struct {
	mu     sync.Mutex
	first  u128.U128 // the first usable address
	is4    bool
	bits   *bitmap.Bitmap
	owners map[netip.Addr]ipaddress.ParentRef
	ring   ownerRing
	// The dense form (NewFloorDense) records owners in ids instead of
	// owners: per usable address, 0 or 1 + the owner's place in names.
	// The cycle owners take names[0:len(cycleOwners)].
	ids   []uint32
	names []ipaddress.ParentRef
}

// Floor's errors.
var (
	errFloorFull    = errors.New("floor: range full")
	errFloorOutside = errors.New("floor: address outside the range")
)

// NewFloor returns an empty Floor over the usable addresses of prefix.
func NewFloor(prefix netip.Prefix) *Floor {
	return &Floor{
		first:  u128.FromAddr(AddrAt(prefix, 0, 1)),
		is4:    prefix.Addr().Is4(),
		bits:   bitmap.New(uint64(Usable(prefix))),
		owners: make(map[netip.Addr]ipaddress.ParentRef),
	}
}

// NewFloorDense returns an empty Floor over the usable addresses of
// prefix that records owners in an array indexed by address, not a map:
// the least a record per address can cost, possible for a range small
// enough to hold an array entry per address (a /12 takes 4 MiB).
func NewFloorDense(prefix netip.Prefix) *Floor {
	f := NewFloor(prefix)
	f.owners = nil
	f.ids = make([]uint32, f.bits.Len())
	f.names = slices.Clone(cycleOwners)
	return f
}

// record notes the owner of the address at offset off, from the ring.
func (f *Floor) record(addr netip.Addr, off uint64) {
	if f.ids == nil {
		f.owners[addr] = f.ring.next()
		return
	}
	f.ids[off] = uint32(f.ring.nextIndex()) + 1
}

// forget drops the owner of the address at offset off.
func (f *Floor) forget(addr netip.Addr, off uint64) {
	if f.ids == nil {
		delete(f.owners, addr)
		return
	}
	f.ids[off] = 0
}

// offset returns addr's bit, and false if addr is not a usable address.
func (f *Floor) offset(addr netip.Addr) (uint64, bool) {
	x := u128.FromAddr(addr)
	if addr.Is4() != f.is4 || x.Less(f.first) {
		return 0, false
	}
	d := x.Sub(f.first)
	return d.Lo, d.Hi == 0 && d.Lo < f.bits.Len()
}

// AllocateNext implements Allocator.
func (f *Floor) AllocateNext() (netip.Addr, error) {
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
	addr := f.first.Add64(off).Addr(f.is4)
	f.record(addr, off)
	return addr, nil
}

// Allocate implements Allocator.
func (f *Floor) Allocate(addr netip.Addr) error {
	off, ok := f.offset(addr)
	if !ok {
		return errFloorOutside
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.bits.Set(off) {
		return errors.New("floor: address in use")
	}
	f.record(addr, off)
	return nil
}

// Release implements Allocator.
func (f *Floor) Release(addr netip.Addr) error {
	off, ok := f.offset(addr)
	if !ok {
		return errFloorOutside
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bits.Clear(off)
	f.forget(addr, off)
	return nil
}

// Fill implements Allocator.
func (f *Floor) Fill(addrs []netip.Addr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range addrs {
		off, ok := f.offset(a)
		if !ok || !f.bits.Set(off) {
			return errors.New("floor: fill address outside the range or in use")
		}
		if f.ids == nil {
			f.owners[a] = Owner(len(f.owners))
			continue
		}
		f.names = append(f.names, Owner(len(f.names)))
		f.ids[off] = uint32(len(f.names))
	}
	return nil
}

// Close implements Allocator.
func (f *Floor) Close() error { return nil }

func (f *Floor) cycleRing() *ownerRing { return &f.ring }
