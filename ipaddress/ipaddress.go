// Package ipaddress defines the allocation record of one IP address (the
// IPAddress object of KEP-1880), its owner reference, and strict parsing of
// addresses into their canonical form.
//
// An address is held by at most one owner: the canonical address is the
// record's name and the unit of uniqueness in every store.
package ipaddress

import (
	"net/netip"
	"time"
)

// Labels the Kubernetes allocator sets on every IPAddress object.
const (
	LabelIPFamily      = "ipaddress.kubernetes.io/ip-family"
	LabelManagedBy     = "ipaddress.kubernetes.io/managed-by"
	ManagedByAllocator = "ipallocator.k8s.io"
)

// Family is an IP address family. The zero value means "unspecified".
type Family uint8

// The two families; their values are the IP version numbers.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// FamilyOf returns the family of a, or 0 for the zero Addr.
func FamilyOf(a netip.Addr) Family {
	switch {
	case a.Is4():
		return IPv4
	case a.Is6():
		return IPv6
	}
	return 0
}

// String returns "IPv4", "IPv6" or "unspecified".
func (f Family) String() string {
	switch f {
	case IPv4:
		return "IPv4"
	case IPv6:
		return "IPv6"
	}
	return "unspecified"
}

// Bits returns the address length in bits: 32, 128, or 0 when unspecified.
func (f Family) Bits() int {
	switch f {
	case IPv4:
		return 32
	case IPv6:
		return 128
	}
	return 0
}

// ParentRef names the owner of an address, for example the Service
// default/kubernetes. Resource and Name are required; Group and Namespace
// are optional. A record's ParentRef is never changed in place: a store
// gives an address to another owner only by writing a new record
// (store.Store.ReplaceAddressAt, for repair), with a new revision.
// The zero value is not a valid reference.
type ParentRef struct {
	Group     string
	Resource  string
	Namespace string
	Name      string
}

// ValidParentRef is a ParentRef that Validate accepted, or the zero value.
// Only this package makes one (CheckParentRef, ParentRefChecker.Check),
// and its reference cannot be changed after, so whoever holds one may rely
// on what Validate guarantees without checking again: every field is
// ASCII, and the four fields hold at most 632 bytes together. The zero
// value's reference is the zero ParentRef, which Validate refuses but which
// has no bytes at all. store.Locked takes one, so that an owner the
// allocator checked is not checked again by the store.
type ValidParentRef struct{ p ParentRef }

// ParentRef returns the reference v holds.
func (v ValidParentRef) ParentRef() ParentRef { return v.p }

// IPAddress is the allocation record of one address.
//
// On 64-bit platforms it is 128 bytes, 8 of them an unnamed pad that no
// comparison, printing (but %#v), encoding or go-cmp sees. Without the pad
// it would be 120: Go copies it in 16-byte blocks, the last overlapping
// the one before, and a copy of a fresh copy (a record returned, then
// assigned by its caller) loads a block from two overlapping stores still
// in flight, which the processor cannot forward from: it waits until they
// reach the cache. One allocation and release took 2 to 8 % longer so
// (bench/SESSIONS.md, session 29).
type IPAddress struct {
	// Addr is the allocated address, in canonical form (never IPv4-mapped, no zone).
	Addr netip.Addr
	// Parent is the owner holding Addr.
	Parent ParentRef
	// Created is when the record was stored; set by the store.
	Created time.Time
	// Revision is the store revision that wrote the record; set by the
	// store, 0 before. A record is never updated in place: a new owner of
	// the address gets a new record, with a new revision.
	Revision int64

	_ [8]byte // to 128 bytes: see the type's comment
}

// Name returns the record's name: the address in canonical form.
func (a IPAddress) Name() string { return a.Addr.String() }

// String returns the address and its owner, as "10.96.0.1
// services/default/kubernetes": what a log line or an error needs to name
// a record, without its creation time and revision.
func (a IPAddress) String() string { return a.Addr.String() + " " + a.Parent.String() }

// Family returns the family of the address.
func (a IPAddress) Family() Family { return FamilyOf(a.Addr) }

// Labels returns the labels the Kubernetes allocator sets on the record.
// They are derived from the address, never stored.
func (a IPAddress) Labels() map[string]string {
	return map[string]string{
		LabelIPFamily:  a.Family().String(),
		LabelManagedBy: ManagedByAllocator,
	}
}
