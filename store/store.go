// Package store defines where CIDR objects and address records live: the
// Store interface, its errors, and the watch that keeps allocators sharing a
// store current. The store is the single source of truth; allocators keep
// only indexes rebuilt from it.
//
// Implementations: store/memory (in-process, the default), store/bolt (one
// file, one node) and the etcd store in its own module. Every implementation
// runs the conformance suite in store/storetest.
package store

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
)

// Errors returned by every Store. Implementations wrap them with detail;
// test with errors.Is.
var (
	// ErrNotFound: no CIDR or address record of that name.
	ErrNotFound = errors.New("not found")
	// ErrExists: a CIDR of that name, or a record of that address, exists.
	ErrExists = errors.New("already exists")
	// ErrConflict: the object changed since the revision the caller read.
	ErrConflict = errors.New("object has been modified")
	// ErrFenced: a CIDR named in a Fence changed or disappeared since the
	// caller read it, so the write was refused.
	ErrFenced = errors.New("fenced: CIDR changed since it was read")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("store closed")
	// ErrCorrupt: a stored value could not be decoded.
	ErrCorrupt = errors.New("stored value cannot be decoded")
	// ErrReadOnly: a write to a store that takes none (a bolt file opened
	// read-only). Retrying does not help.
	ErrReadOnly = errors.New("store opened read-only")
	// ErrNoSpace: the store has no room for the records of a write, and
	// wrote none of them unless the error matches ErrOutcomeUnknown too:
	// the memory store's arena of records is full at 4 GiB, or a bolt file
	// is at its bound (bolt.WithMaxSize) or on a full disk, and deleting
	// records makes room again; or etcd's space quota is exceeded, and
	// etcd takes no write until an operator compacts, defragments and
	// disarms its alarm (it reports the quota crossed by a write it
	// applied as well, hence ErrOutcomeUnknown).
	ErrNoSpace = errors.New("no space left for records")
	// ErrOutcomeUnknown: a write was sent and its answer lost (the
	// connection broke, the server timed out, the caller's ctx ended while
	// it was in flight). It may have been applied, or be applied later,
	// or never: a caller must read before assuming either way. A retry
	// of a create with the same owner may leave that owner two records,
	// and a retried delete may report ErrNotFound for its own deletion.
	// The error also matches its cause (a ctx error, the store's
	// transport error, ErrClosed). The records of a create that committed
	// unseen belong to an owner told nothing: a repair pass (package
	// repair) deletes them as leaked once older than its grace.
	ErrOutcomeUnknown = errors.New("outcome unknown: the write may or may not have been applied")
)

// AddressExistsError reports which address of a create was already taken.
// It matches ErrExists.
type AddressExistsError struct {
	Addr netip.Addr
}

// Error names the address and ErrExists.
func (e *AddressExistsError) Error() string {
	return fmt.Sprintf("address %s: %v", e.Addr, ErrExists)
}

// Is makes errors.Is(err, ErrExists) true.
func (e *AddressExistsError) Is(target error) bool { return target == ErrExists }

// FencedError reports which fence failed. It matches ErrFenced.
type FencedError struct {
	Fence Fence
	// Seen is a revision of the store at which the fence shows broken, and
	// which every Watch of the store reaches: that of a change of the
	// CIDR after Fence.Revision, or of a later write to the store, no
	// later than the store's latest write when the fence was checked (0
	// if unknown). It is not a revision of something else sharing the
	// store's backend (another prefix, another application in the same
	// etcd), which a Watch never delivers. A caller that decided from a
	// view of the store can wait for its view to reach it before deciding
	// again, rather than retry on the same stale view.
	Seen int64
}

// Error names the CIDR, the revision the fence expected and ErrFenced.
func (e *FencedError) Error() string {
	return fmt.Sprintf("CIDR %q changed since revision %d: %v", e.Fence.CIDR, e.Fence.Revision, ErrFenced)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Limits of a stored CIDR, the same for every store so that what one
// stores any other can: the tightest store's (store/bolt keeps a name as a
// bbolt key, at most 32 KiB, and a CIDR's prefix count in one byte).
// cidrset.Validate, which the allocator applies, allows far less: names
// of 253 bytes and two prefixes.
const (
	MaxCIDRNameLen  = 32768 // bytes
	MaxCIDRPrefixes = 255
)

// CheckCIDR reports whether c can be stored: its name must pass
// CheckCIDRName, it may have at most MaxCIDRPrefixes prefixes, and every
// prefix must be valid, so that a store can read back what it writes. It
// is not the validation of SPEC §1 (cidrset.Validate), which the allocator
// applies before a store sees the CIDR; a Store given a CIDR directly must
// still refuse what it could not decode, or what another store could not
// keep. The error is an *ipaddress.FieldError.
//
// Every CIDR cidrset.Validate takes, CheckCIDR takes. The converse does
// not hold, on purpose, and only for these: a name that is not a DNS-1123
// subdomain (capitals, "_", past 253 bytes), no prefix or more than two,
// two prefixes of one family, a prefix with bits set past its length, an
// IPv4-mapped prefix. Within its limits a store keeps what it is given
// and reads it back unchanged; the rules of what may be created are the
// allocator's. Were a store to apply them, a CIDR written before a rule
// tightened, or by another writer, could not be updated, so not marked
// Terminating, so never deleted. The allocator tolerates such a CIDR (it
// masks its prefixes). A test of this package pins the list.
func CheckCIDR(c cidrset.CIDR) error {
	if err := CheckCIDRName(c.Name); err != nil {
		return err
	}
	if len(c.Prefixes) > MaxCIDRPrefixes {
		return &ipaddress.FieldError{Field: "spec.cidrs", Value: strconv.Itoa(len(c.Prefixes)), Detail: fmt.Sprintf("at most %d prefixes can be stored", MaxCIDRPrefixes)}
	}
	for i, p := range c.Prefixes {
		if !p.IsValid() {
			return &ipaddress.FieldError{Field: fmt.Sprintf("spec.cidrs[%d]", i), Value: p.String(), Detail: "must be a valid prefix"}
		}
	}
	return nil
}

// CheckCIDRName reports whether name can name a stored CIDR: it must not
// be empty, nor longer than MaxCIDRNameLen bytes, nor hold a "/", which
// the etcd store's keys use as a separator (such a name's key would read
// as another store's). Every store refuses it alike, so that what one
// stores any other can. No CIDR has a name it refuses: GetCIDR and
// DeleteCIDR answer ErrNotFound for one, and a Fence naming one fails.
// The error is an *ipaddress.FieldError.
func CheckCIDRName(name string) error {
	if name == "" {
		return &ipaddress.FieldError{Field: "metadata.name", Required: true}
	}
	if len(name) > MaxCIDRNameLen {
		return &ipaddress.FieldError{Field: "metadata.name", Value: name, Detail: fmt.Sprintf("at most %d bytes can be stored", MaxCIDRNameLen)}
	}
	if strings.Contains(name, "/") {
		return &ipaddress.FieldError{Field: "metadata.name", Value: name, Detail: `must not contain "/"`}
	}
	return nil
}

// MaxOwnerLen is the most bytes an owner of a stored record (its
// ipaddress.ParentRef) may have, Group, Resource, Namespace and Name
// together, the same for every store so that what one stores any other
// can. It is the tightest store's: store/bolt keys its owner index by the
// four fields, each after its length as a varint, and the address, and a
// bbolt key holds at most 32 KiB; 32742 bytes fit however they are split
// among the fields. ParentRef.Validate, which the allocator applies,
// allows 632 (two names of 253 bytes, two labels of 63).
const MaxOwnerLen = 32742

// CheckOwner reports whether p can own a stored record: its fields may
// have at most MaxOwnerLen bytes together, and each must be valid UTF-8,
// as the etcd store keeps records as JSON, which holds text only (bytes
// that are not UTF-8 would be read back as U+FFFD, another owner). Any
// other bytes are kept, NUL and control characters included, and empty
// fields too, and read back unchanged. Every store refuses what CheckOwner
// refuses, with its error, before it writes anything.
//
// Like CheckCIDR beside cidrset.Validate, it is not
// ipaddress.ParentRef.Validate, the allocator's rule of what may be
// created: every owner Validate takes, CheckOwner takes, and a store
// keeps records of owners Validate refuses (written before a rule
// tightened, or by another writer), so that they can still be found,
// released and repaired. The error is an *ipaddress.FieldError: for the
// whole owner ("spec.parentRef") if it is too long, else for the first
// field that is not UTF-8 ("spec.parentRef.group", ".resource",
// ".namespace", ".name").
func CheckOwner(p ipaddress.ParentRef) error {
	if n := len(p.Group) + len(p.Resource) + len(p.Namespace) + len(p.Name); n > MaxOwnerLen {
		return &ipaddress.FieldError{Field: "spec.parentRef", Value: p.String(), Detail: fmt.Sprintf("%d bytes in group, resource, namespace and name: at most %d can be stored", n, MaxOwnerLen)}
	}
	// This runs on every allocation: ASCII, as owners mostly are, is
	// found faster than utf8.ValidString can, which is asked only past it.
	if ascii(p.Group) && ascii(p.Resource) && ascii(p.Namespace) && ascii(p.Name) {
		return nil
	}
	switch {
	case !utf8.ValidString(p.Group):
		return notUTF8("group", p.Group)
	case !utf8.ValidString(p.Resource):
		return notUTF8("resource", p.Resource)
	case !utf8.ValidString(p.Namespace):
		return notUTF8("namespace", p.Namespace)
	case !utf8.ValidString(p.Name):
		return notUTF8("name", p.Name)
	}
	return nil
}

// ascii reports whether s holds ASCII bytes only, read eight at a time,
// and a tail of four to seven as two words of four that may overlap.
func ascii(s string) bool {
	var w uint64
	for ; len(s) >= 8; s = s[8:] {
		w |= uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	}
	if len(s) >= 4 {
		t := s[len(s)-4:]
		w |= uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(t[0]) | uint64(t[1])<<8 | uint64(t[2])<<16 | uint64(t[3])<<24
	} else {
		for i := range len(s) {
			w |= uint64(s[i])
		}
	}
	return w&0x8080808080808080 == 0
}

func notUTF8(field, value string) error {
	return &ipaddress.FieldError{Field: "spec.parentRef." + field, Value: value, Detail: "must be valid UTF-8 to be stored"}
}

// Fence is a condition of a write: the CIDR named must still exist with
// exactly this revision (a touching fence: this revision or a later one;
// see HeldAt). An allocator fences every address creation on the CIDR it
// allocated from, so marking a CIDR Terminating (which changes its
// revision) stops every allocation decided before the mark.
type Fence struct {
	CIDR     string
	Revision int64
	// Touch makes a create also give the CIDR a new revision, its content
	// unchanged, so that anything decided on the old revision fails its
	// own fence. A write recording an address inside a Terminating CIDR
	// sets it: a removal decided before the address existed then fails
	// instead of orphaning it. That needs only the new revision, not
	// the CIDR unchanged since Revision, so a touching fence holds at any
	// later revision too: creates of different addresses inside one
	// Terminating CIDR, each touching it, do not fail each other.
	Touch bool
}

// HeldAt reports whether f holds for its CIDR, which the store holds at
// revision rev: at exactly f.Revision, or for a touching fence at
// f.Revision or later. A revision of 0 or less never holds (revisions
// start at 1). Whether the CIDR exists is the caller's to check: a fence
// naming a missing CIDR fails.
func (f Fence) HeldAt(rev int64) bool {
	if f.Touch {
		return f.Revision > 0 && rev >= f.Revision
	}
	return f.Revision > 0 && rev == f.Revision
}

// Store holds CIDR objects and address records. Every write is atomic and
// gets a new revision, strictly increasing across the store. All methods are
// safe for concurrent use, also by several processes where the
// implementation is shared (etcd).
//
// A store that talks to a server may lose the answer to a write it sent.
// Its writes (CreateCIDR, UpdateCIDR, DeleteCIDR, CreateAddresses,
// DeleteAddress, DeleteAddressAt, ReplaceAddressAt) then return an error
// matching ErrOutcomeUnknown, unless it could settle the outcome itself (the
// etcd store reads a create's records back); any other error of a write
// means it was not applied. Reads never return ErrOutcomeUnknown.
// store/memory and store/bolt never return it: their writes are applied
// or not by the time they return.
type Store interface {
	// CreateCIDR stores a new CIDR; it sets Created and Revision and returns
	// the stored object. ErrExists if the name is taken; an error matching
	// ipaddress.ErrInvalid if CheckCIDR refuses it.
	CreateCIDR(ctx context.Context, c cidrset.CIDR) (cidrset.CIDR, error)
	// UpdateCIDR replaces a CIDR whose stored revision is c.Revision.
	// ErrConflict if it changed since, ErrNotFound if it is gone.
	// Created is kept from the stored object. CheckCIDR applies as in
	// CreateCIDR.
	UpdateCIDR(ctx context.Context, c cidrset.CIDR) (cidrset.CIDR, error)
	// DeleteCIDR removes the CIDR if its revision is still rev and every
	// fence holds: ErrConflict or ErrFenced otherwise, ErrNotFound if gone.
	// Revisions start at 1, so rev 0 never matches, nor does a fence of
	// revision 0 hold.
	DeleteCIDR(ctx context.Context, name string, rev int64, fences ...Fence) error
	// GetCIDR returns one CIDR.
	GetCIDR(ctx context.Context, name string) (cidrset.CIDR, error)

	// CreateAddresses stores all records or none: an *AddressExistsError
	// if any address is held, an *FencedError if a fence fails, an error
	// matching ipaddress.ErrInvalid for an address that is not storable
	// (zero, zoned, IPv4-mapped) or an owner CheckOwner refuses (its
	// error), whichever record of the batch has it. It returns the
	// records with Created and Revision set (one revision for the whole
	// batch); it may set them in recs itself and return it. A batch of no
	// records, with no touching fence, writes nothing: it checks the
	// fences and takes no revision (a revision that no watcher is told of
	// could not be waited for).
	CreateAddresses(ctx context.Context, recs []ipaddress.IPAddress, fences ...Fence) ([]ipaddress.IPAddress, error)
	// DeleteAddress removes the record of addr. It returns the record as
	// it was and the revision of the deletion, which a caller waits for
	// before it trusts a watched view to show the address free.
	DeleteAddress(ctx context.Context, addr netip.Addr) (rec ipaddress.IPAddress, deleted int64, err error)
	// DeleteAddressAt removes the record of addr only if its revision is
	// still rev, for a caller that decided on the record it read (repair):
	// ErrConflict if it was replaced since, ErrNotFound if it is gone.
	// Its results are DeleteAddress's.
	DeleteAddressAt(ctx context.Context, addr netip.Addr, rev int64) (rec ipaddress.IPAddress, deleted int64, err error)
	// ReplaceAddressAt gives the record of rec.Addr to rec.Parent, only if
	// its revision is still rev, in one write: the address stays held
	// throughout, so no allocation can take it between the old owner and
	// the new (repair hands a wrongly owned address to its consumer so).
	// ErrConflict if the record was replaced since, ErrNotFound if it is
	// gone; CheckOwner's error if it refuses rec.Parent, and then nothing
	// is written. The new record has a new revision and creation time;
	// watchers see one AddressPut of an address they know as held.
	ReplaceAddressAt(ctx context.Context, rec ipaddress.IPAddress, rev int64) (ipaddress.IPAddress, error)
	// GetAddress returns the record of addr. GetAddress, DeleteAddress and
	// DeleteAddressAt return ErrNotFound for an address CreateAddresses
	// would refuse (zero, zoned, IPv4-mapped): no record can have it.
	GetAddress(ctx context.Context, addr netip.Addr) (ipaddress.IPAddress, error)
	// AddressesOf returns the records held by owner, in address order
	// (IPv4 first), through an index. The answer is not older than the
	// call: it shows every write that completed before the call began,
	// through any client of the store, with each record at its current
	// revision. allocator.EnsureNext and EnsureDualStack rely on that to
	// make calls at once for one owner agree; an index that lags (a cache
	// fed by a watch, not brought up to the store's revision first) breaks
	// them.
	//
	// owner is not validated, as no owner of a record is: a store holds
	// what it is given within CheckOwner's limits, and
	// ipaddress.ParentRef.Validate is the allocator's to apply (as
	// cidrset.Validate is, beside CheckCIDR). Any owner is looked up field
	// for field, so a record written past the allocator for an owner it
	// would refuse is still found, and two owners that print alike stay
	// apart. An owner no record has, one CreateAddresses would refuse
	// included, has none and no error.
	//
	// A record the store holds but cannot decode, and that might be
	// owner's, does not hide owner's others: when such records are the
	// only problem, AddressesOf returns owner's other records and a
	// *SkippedError naming them (the first MaxSkipped in key order, and a
	// count of the rest). Which might be owner's is for each store to say
	// (etcd: any, as the owner is in the value). That error matches
	// ErrCorrupt, so a caller that takes any error for failure stays
	// right; one that acts on each record of owner (a release) must not
	// take those returned for all. Any other error returns no records.
	// store/memory never skips.
	AddressesOf(ctx context.Context, owner ipaddress.ParentRef) ([]ipaddress.IPAddress, error)
	// ListAddresses returns every record; for repair and tools, not hot paths.
	//
	// A record the store holds but cannot decode (a value written by
	// hand, or damaged) does not hide the others, nor stop a repair pass:
	// when such records are the only problem, ListAddresses returns every
	// other record and a *SkippedError naming them (the first MaxSkipped,
	// and a count of the rest). That error matches ErrCorrupt, so a caller
	// that takes any error for failure stays right. Any other error
	// returns no records. A record left out is still stored and its
	// address still taken; nothing is deleted. store/memory holds nothing
	// it cannot decode, and never skips.
	ListAddresses(ctx context.Context) ([]ipaddress.IPAddress, error)

	// Watch delivers the store's state to w: first w.Reset with a
	// consistent snapshot, then w.Apply with every later change, in
	// revision order, until ctx is done. It returns after the first Reset
	// was delivered, so the caller is in sync once Watch returns. If
	// changes are lost (a compacted or broken watch), it calls Reset again
	// with a fresh snapshot and resumes.
	Watch(ctx context.Context, w Watcher) error

	// Close releases the store's resources. Later calls return ErrClosed.
	Close() error
}

// Locked is implemented by in-process stores (store/memory) whose watchers
// run synchronously in the writer, under the store's lock. A watcher that
// takes that same lock for its own readers sees every write applied
// whenever it holds it, so an allocator can choose an address and create it
// in one critical section: nothing in flight to track, no lost race to
// retry, one lock per allocation.
type Locked interface {
	Store
	// Mutex returns the lock the store holds while it writes and while it
	// calls its watchers' Reset and Apply, which therefore must not lock it.
	Mutex() *sync.Mutex
	// CreateAddressesLocked is CreateAddresses for a caller holding Mutex.
	// It sets Created and Revision in recs itself and returns recs.
	CreateAddressesLocked(recs []ipaddress.IPAddress, fences []Fence) ([]ipaddress.IPAddress, error)
	// CreateAddressLocked stores one record, as CreateAddressesLocked
	// would, for a caller that keeps an index of the store under the same
	// lock: the watcher self, the caller's own (nil for none), is not told
	// of the write, and the caller applies it to its index itself. It
	// returns the record's revision and creation time. Watchers are told
	// apart from self with ==, so a store.Locked store's Watch refuses a
	// watcher of an uncomparable type (ipaddress.ErrInvalid). The owner
	// was checked when it was made (ipaddress.CheckParentRef), and every
	// ValidParentRef meets CheckOwner: the store does not check it again.
	// (A pointer, so that the owner is not copied on the way; nil is
	// refused with an *ipaddress.FieldError for "spec.parentRef".)
	CreateAddressLocked(addr netip.Addr, owner *ipaddress.ValidParentRef, fence Fence, self Watcher) (rev int64, created time.Time, err error)
	// DeleteAddressLocked is DeleteAddress for a caller holding Mutex that
	// does not want the record back; self is as for CreateAddressLocked.
	// It returns the revision of the deletion.
	DeleteAddressLocked(addr netip.Addr, self Watcher) (deleted int64, err error)
}

// Prefetcher is implemented by a Locked store that can start loading what a
// CreateAddressLocked will read, for a caller holding Mutex that is about
// to search for the address and can guess it: the loads from memory then
// overlap the search instead of following it. The methods are hints: they
// change nothing, and a wrong guess costs only their loads. The allocator
// calls PrefetchOwnerLocked before it searches a large sparse pool (an
// IPv6 range of millions of addresses), and PrefetchAddressLocked with
// the address a large pool will most likely give: with its default
// strategy, as it draws each start, a few allocations before the start is
// used (the start itself in a sparse pool, the first free address from it
// in a dense one); with another strategy, the start of a sparse pool
// before the search, and the address a dense pool chose before the owner
// is validated. Where they are worth it: BENCHMARKS.md.
type Prefetcher interface {
	// PrefetchOwnerLocked prepares a create for owner.
	PrefetchOwnerLocked(owner ipaddress.ParentRef)
	// PrefetchAddressLocked prepares a create of addr.
	PrefetchAddressLocked(addr netip.Addr)
}

// PairLocked is implemented by a Locked store that creates a dual-stack
// pair as CreateAddressLocked creates one address, for a caller that keeps
// an index of the store under Mutex and applies the write to it itself.
// An allocator over such a store serves AllocateDualStack through it, and
// through CreateAddressesLocked over any other Locked store.
type PairLocked interface {
	// CreatePairLocked stores a record of v4, an IPv4 address, and one of
	// v6, an IPv6 address, both for owner, in one write of one revision:
	// both or neither, refused as CreateAddressesLocked would refuse the
	// two records with the fences f4 and f6 (one CIDR may be both). self
	// and owner are as for CreateAddressLocked; an address of the wrong
	// family is an *ipaddress.FieldError for "address". It returns the
	// pair's revision and creation time.
	CreatePairLocked(v4, v6 netip.Addr, owner *ipaddress.ValidParentRef, f4, f6 Fence, self Watcher) (rev int64, created time.Time, err error)
}

// SinceReader is implemented by a store whose AddressesOf must first learn
// the store's current revision, a round trip (store/etcd), for a caller
// that needs less: the writes up to a revision it knows, its own write's.
// allocator.EnsureNext and EnsureDualStack read an owner's records back so
// after they allocate: the calls at once for one owner agree on the record
// of lowest revision, and a call needs to see only those of a revision not
// above its own record's to tell whether its record is that one.
type SinceReader interface {
	// AddressesOfSince is AddressesOf at revision rev or later: the answer
	// shows every write of revision rev or lower, and may lack writes
	// completed before the call of a later revision. A rev the store has
	// not reached is an *ipaddress.FieldError for "revision", matching
	// ipaddress.ErrInvalid; a rev of 0 or less asks for no write.
	AddressesOfSince(ctx context.Context, owner ipaddress.ParentRef, rev int64) ([]ipaddress.IPAddress, error)
}

// RecordsDeleter is implemented by a store that deletes several records
// in one write, for a caller that read them (allocator.ReleaseOwner: the
// records AddressesOf returned): store/etcd, where DeleteAddressAt is a
// read and a transaction for each address and this one transaction for
// all of them, and store/bolt, one synced write for all of them.
type RecordsDeleter interface {
	// DeleteRecords deletes the records of recs, each only if the store
	// holds it as it is given (address, revision, owner and creation
	// time), all in one write of one revision, or none. It returns that
	// revision; no records is no write, and revision 0. ErrConflict if
	// any is replaced or gone since, or held in a form this call does not
	// delete, which DeleteAddressAt does (each store says which); an
	// error matching ipaddress.ErrInvalid for an address given twice or
	// more records than the store deletes at once.
	DeleteRecords(ctx context.Context, recs []ipaddress.IPAddress) (deleted int64, err error)
}

// RecordsReplacer is implemented by a store that gives several records to
// new owners in one write, for a caller that read them (repair's
// hand-overs of wrongly owned records to the consumers holding their
// addresses): store/etcd, where ReplaceAddressAt is a read and a
// transaction for each address and this one transaction for all of them,
// and store/bolt, one synced write for all of them.
type RecordsReplacer interface {
	// ReplaceRecords gives the record of recs[i], if the store holds it as
	// it is given (address, revision, owner and creation time), to owner
	// to[i], as ReplaceAddressAt does: the address is never free between
	// the two owners. All in one write of one revision, or none. It
	// returns the new records, in the order of recs; no records is no
	// write. ErrConflict if any record is replaced or gone since, or held
	// in a form this call does not replace, which ReplaceAddressAt does
	// (each store says which); an error matching ipaddress.ErrInvalid for
	// an address given twice, recs and to of different lengths, an owner
	// the store cannot hold, or more records than it writes at once.
	ReplaceRecords(ctx context.Context, recs []ipaddress.IPAddress, to []ipaddress.ParentRef) ([]ipaddress.IPAddress, error)
}

// CheckReplacements returns nil if recs and to can be a ReplaceRecords
// call's: as many owners as records, no address twice (CheckDistinct),
// every owner one CheckOwner takes. Otherwise the error matches
// ipaddress.ErrInvalid.
func CheckReplacements(recs []ipaddress.IPAddress, to []ipaddress.ParentRef) error {
	if len(to) != len(recs) {
		return &ipaddress.FieldError{Field: "owners", Value: strconv.Itoa(len(to)), Detail: fmt.Sprintf("one owner for each of %d records", len(recs))}
	}
	for _, o := range to {
		if err := CheckOwner(o); err != nil {
			return err
		}
	}
	return CheckDistinct(recs)
}

// CheckDistinct returns nil if no two records of recs have one address,
// else an *ipaddress.FieldError for "records" naming the first held twice:
// the refusal of a batch a RecordsDeleter deletes.
func CheckDistinct(recs []ipaddress.IPAddress) error {
	seen := make(map[netip.Addr]bool, len(recs))
	for _, r := range recs {
		if seen[r.Addr] {
			return &ipaddress.FieldError{Field: "records", Value: r.Addr.String(), Detail: "an address given twice"}
		}
		seen[r.Addr] = true
	}
	return nil
}

// Snapshot is the whole state of a store at one revision.
type Snapshot struct {
	Revision int64
	CIDRs    []cidrset.CIDR
	// Addrs holds every allocated address, in no particular order.
	Addrs []netip.Addr
}

// EventKind says what an Event changed.
type EventKind uint8

// Event kinds.
const (
	CIDRPut EventKind = iota + 1
	CIDRDeleted
	AddressPut
	AddressDeleted
)

// String returns the kind's name, as its constant spells it.
func (k EventKind) String() string {
	switch k {
	case CIDRPut:
		return "CIDRPut"
	case CIDRDeleted:
		return "CIDRDeleted"
	case AddressPut:
		return "AddressPut"
	case AddressDeleted:
		return "AddressDeleted"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one change. CIDR is set for CIDR events (for CIDRDeleted only its
// Name is certain), Address for address events (for AddressDeleted only its
// Addr is certain: the etcd store learns no more from a delete).
type Event struct {
	Kind     EventKind
	Revision int64
	CIDR     cidrset.CIDR
	Address  ipaddress.IPAddress
}

// Watcher receives a store's state. Calls are never concurrent and come in
// revision order. Apply may be called while the store holds internal locks:
// it must return quickly and must not call the store. Neither Reset nor
// Apply may modify what it is given (a CIDR's Prefixes, a snapshot's
// slices): a store gives the same values to all its watchers, and one that
// sorted a CIDR's prefixes in place would change what the next one (an
// allocator's index, say) reads. A watcher that needs to change them
// changes a copy (cidrset.CIDR.Clone).
type Watcher interface {
	Reset(s Snapshot)
	Apply(e Event)
}

// AddressWatcher is a Watcher that needs only the address of an address
// event. A store that calls its watchers in the writing goroutine
// (store/memory) tells such a watcher of AddressPut and AddressDeleted
// events through AddressChanged instead of Apply, so that a write builds no
// Event; the calls keep Apply's order and rules. Other stores may call Apply
// for every event: the watcher must handle both.
type AddressWatcher interface {
	Watcher
	AddressChanged(kind EventKind, addr netip.Addr, rev int64)
}
