package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// EnsureNext returns an address of family f that owner holds, allocating
// the next free one, as AllocateNext does, only if it holds none: a setup
// retried for the same owner (a network plugin's ADD for one container)
// gets the address it was given the first time, not a second one.
//
// Calls for one owner, made at once in this process or in others sharing
// the store, all return the same address, and the owner keeps only it.
// Each call that holds none yet allocates, then reads the owner's records
// back; the record of lowest revision (then lowest address) is the one the
// calls agree on, and each call that lost gives its own address back. The
// read sees every write up to the call's own, so a call that saw no record
// of lower revision than its own was first: any later one sees that record
// too, of a lower revision. When the owner already holds several
// addresses of f (AllocateNext called twice), EnsureNext returns the one
// of lowest revision and allocates nothing. A call that finds the family full
// (ErrFull) reads the owner's records again: another call made at once
// may have taken the last free address, which both then return; should
// that read fail, its error is returned, not ErrFull. The owner's records
// are read through the store's owner index (AddressesOf), once, or twice
// when the call allocates or finds the family full; the read after an
// allocation is AddressesOfSince its revision over a store.SinceReader
// (store/etcd: one round trip fewer).
//
// On an error, nothing EnsureNext allocated is known to be given back: the
// owner may hold an address of f all the same, and a call again returns
// it; ReleaseOwner releases every address of the owner. Records the store
// cannot decode that might be owner's (a *store.SkippedError, matching
// store.ErrCorrupt) fail the call before it allocates, since one of them
// may be owner's address. An invalid owner or family is refused
// (ErrInvalid) before anything is read, whether the family is full or not.
func (a *Allocator) EnsureNext(ctx context.Context, f ipaddress.Family, owner ipaddress.ParentRef) (ipaddress.IPAddress, error) {
	if err := a.checkOpen(); err != nil {
		return ipaddress.IPAddress{}, err
	}
	if rec, held, err := a.heldOf(ctx, f, owner); err != nil || held {
		return rec, err
	}
	return a.ensureMissing(ctx, f, owner)
}

// ensureMissing is EnsureNext past its first read, which found owner
// holding no address of f.
func (a *Allocator) ensureMissing(ctx context.Context, f ipaddress.Family, owner ipaddress.ParentRef) (ipaddress.IPAddress, error) {
	mine, err := a.AllocateNext(ctx, f, owner)
	if errors.Is(err, ErrFull) {
		// Another call for owner, at once, may have taken the last free
		// address since the read: then owner holds it, and it is this
		// call's answer too. Unread, that is unknown, and ErrFull would
		// say owner holds none.
		rec, held, rerr := a.heldOf(ctx, f, owner)
		if rerr != nil {
			return ipaddress.IPAddress{}, fmt.Errorf("no free %s address; reading %s's addresses again: %w", f, owner, rerr)
		}
		if held {
			return rec, nil
		}
	}
	if err != nil {
		return ipaddress.IPAddress{}, err
	}
	recs, err := a.readBack(ctx, owner, mine.Revision)
	if err != nil {
		return ipaddress.IPAddress{}, fmt.Errorf("allocated %s to %s, then reading its addresses back: %w", mine.Addr, owner, err)
	}
	return a.keepFirst(ctx, owner, mine, recs)
}

// EnsureDualStack returns owner's IPv4 and IPv6 addresses, allocating the
// ones it lacks: a dual-stack setup retried for one owner gets the pair
// the first call gave. When owner holds neither, the pair is allocated as
// AllocateDualStack allocates it, both or neither. When owner holds one,
// only the other family's is allocated, as EnsureNext allocates it; should
// that fail, the one held is returned with the error and stays held (this
// call did not make it). When owner holds both, nothing is allocated; of
// several of a family, the one of lowest revision is returned.
//
// Calls for one owner made at once, here or in other processes sharing the
// store, agree as EnsureNext's do, family by family: each call that
// allocated reads the owner's records back, returns the record of lowest
// revision (then lowest address) of each family, and gives back what it
// made that is not one of them. A pair is written in one revision and read
// whole, so calls that each allocated a pair agree on one of the pairs. A
// call that finds a family full reads the owner's records again, once:
// another call at once may have taken the last free address for owner.
// Holding neither still, it answers ErrFull, and allocates no second time.
//
// On an error, both results are zero but for the one held, above, and
// nothing this call allocated is known to be given back: owner may hold
// a pair all the same, which a call again returns; ReleaseOwner releases
// all it holds. An invalid owner is refused (ErrInvalid) before anything
// is read.
func (a *Allocator) EnsureDualStack(ctx context.Context, owner ipaddress.ParentRef) (ipv4, ipv6 ipaddress.IPAddress, err error) {
	var none ipaddress.IPAddress
	if err := a.checkOpen(); err != nil {
		return none, none, err
	}
	var full error // the pair's ErrFull, once owner's records are read again
	for {
		recs, err := a.AddressesOf(ctx, owner) // validates owner
		if err != nil {
			return none, none, err
		}
		held4, has4 := oldestOf(recs, ipaddress.IPv4)
		held6, has6 := oldestOf(recs, ipaddress.IPv6)
		switch {
		case has4 && has6:
			return held4, held6, nil
		case has4:
			rec, err := a.ensureMissing(ctx, ipaddress.IPv6, owner)
			if err != nil {
				return held4, none, lackingError(owner, held4.Addr, ipaddress.IPv6, err)
			}
			return held4, rec, nil
		case has6:
			rec, err := a.ensureMissing(ctx, ipaddress.IPv4, owner)
			if err != nil {
				return none, held6, lackingError(owner, held6.Addr, ipaddress.IPv4, err)
			}
			return rec, held6, nil
		}
		if full != nil {
			// Read again after ErrFull, and owner holds nothing still.
			// Not allocated again: a second ErrFull would have no read
			// after it, and a pair another call made meanwhile for owner,
			// which that ErrFull may be owed to, would go unseen.
			return none, none, full
		}
		mine4, mine6, err := a.AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{})
		if errors.Is(err, ErrFull) {
			// Another call for owner, at once, may have taken the last
			// free address of a family since the read: then owner holds
			// it, and needs the other family's at most.
			full = err
			continue
		}
		if err != nil {
			return none, none, err
		}
		recs, err = a.readBack(ctx, owner, max(mine4.Revision, mine6.Revision))
		if err != nil {
			return none, none, fmt.Errorf("allocated %s and %s to %s, then reading its addresses back: %w", mine4.Addr, mine6.Addr, owner, err)
		}
		// The second family is settled even when the first fails: a
		// loser's address is given back whenever it can be.
		kept4, err4 := a.keepFirst(ctx, owner, mine4, recs)
		kept6, err6 := a.keepFirst(ctx, owner, mine6, recs)
		if err := errors.Join(err4, err6); err != nil {
			return none, none, err
		}
		return kept4, kept6, nil
	}
}

// lackingError is EnsureDualStack's error, and its dry run's, when owner
// holds held and allocating its address of family f failed with err.
func lackingError(owner ipaddress.ParentRef, held netip.Addr, f ipaddress.Family, err error) error {
	return fmt.Errorf("%s holds %s; allocating its %s address: %w", owner, held, f, err)
}

// readBack returns owner's records after this call wrote one of them at
// revision rev: those of every write up to rev at least, all keepFirst
// needs. A record of owner of lower revision than this call's exists at
// rev, unless it was released; of a higher one, it is not the first. Over
// a store.SinceReader that saves learning the store's current revision.
func (a *Allocator) readBack(ctx context.Context, owner ipaddress.ParentRef, rev int64) ([]ipaddress.IPAddress, error) {
	if err := a.checkOpen(); err != nil {
		return nil, err
	}
	if sr, ok := a.st.(store.SinceReader); ok {
		return sr.AddressesOfSince(ctx, owner, rev)
	}
	return a.st.AddressesOf(ctx, owner)
}

// keepFirst returns the record calls for owner at once agree on, in the
// family of mine, which this call allocated to owner: the one of lowest
// revision (then lowest address) in recs, owner's records read after the
// allocation. It gives mine back if it is not that one, unless it changed
// since (then it is no longer this call's to release).
func (a *Allocator) keepFirst(ctx context.Context, owner ipaddress.ParentRef, mine ipaddress.IPAddress, recs []ipaddress.IPAddress) (ipaddress.IPAddress, error) {
	first, ok := oldestOf(recs, ipaddress.FamilyOf(mine.Addr))
	if !ok {
		// None: mine was released since by someone else, as it could
		// have been a moment after this call returned.
		return mine, nil
	}
	if first.Addr == mine.Addr {
		// Mine, or its address given to owner again since (released and
		// allocated anew): the record owner holds, of its revision.
		return first, nil
	}
	// Another call for owner got there first.
	if err := a.ReleaseAt(ctx, mine.Addr, mine.Revision); err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrConflict) {
		return ipaddress.IPAddress{}, fmt.Errorf("%s holds %s already; giving back %s, allocated to it meanwhile: %w", owner, first.Addr, mine.Addr, err)
	}
	return first, nil
}

// EnsureAllocated is Allocate for a setup that may be retried: when owner
// holds addr already, it returns that record, and allocates nothing, where
// Allocate answers ErrAllocated. It returns the record so also when addr's
// CIDR is Terminating since, or gone: the owner holds it all the same.
// Calls at once for one owner and address, in any process sharing the
// store, all return the one record: the call that lost the create reads
// it back. Any other answer is Allocate's: ErrAllocated when another owner
// holds addr.
func (a *Allocator) EnsureAllocated(ctx context.Context, addr netip.Addr, owner ipaddress.ParentRef) (ipaddress.IPAddress, error) {
	if err := a.checkOpen(); err != nil {
		return ipaddress.IPAddress{}, err
	}
	if err := owner.Validate(); err != nil {
		return ipaddress.IPAddress{}, err
	}
	if rec, err := a.Get(ctx, addr); err == nil && rec.Parent == owner {
		return rec, nil
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		return ipaddress.IPAddress{}, err
	}
	rec, err := a.Allocate(ctx, addr, owner)
	if errors.Is(err, ErrAllocated) {
		// Another call for owner, at once, may have made it.
		if got, gerr := a.Get(ctx, addr); gerr == nil && got.Parent == owner {
			return got, nil
		}
	}
	return rec, err
}

// heldOf returns the record of family f owner holds of lowest revision, if
// it holds one, after refusing an invalid family or owner.
func (a *Allocator) heldOf(ctx context.Context, f ipaddress.Family, owner ipaddress.ParentRef) (rec ipaddress.IPAddress, held bool, err error) {
	if _, ok := famOf(f); !ok {
		return rec, false, familyError(f)
	}
	recs, err := a.AddressesOf(ctx, owner) // validates owner
	if err != nil {
		return rec, false, err
	}
	rec, held = oldestOf(recs, f)
	return rec, held, nil
}

// oldestOf returns the record of family f of lowest revision in recs, the
// lowest address among those of one revision (a batch).
func oldestOf(recs []ipaddress.IPAddress, f ipaddress.Family) (ipaddress.IPAddress, bool) {
	var best ipaddress.IPAddress
	found := false
	for _, r := range recs {
		if ipaddress.FamilyOf(r.Addr) != f {
			continue
		}
		if !found || r.Revision < best.Revision || (r.Revision == best.Revision && r.Addr.Less(best.Addr)) {
			best, found = r, true
		}
	}
	return best, found
}
