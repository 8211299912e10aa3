package allocator

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// Errors of the allocator. Messages match the Kubernetes allocator where it
// has one. Test with errors.Is; the typed errors below add detail.
var (
	// ErrFull: no live CIDR of the family has a free address, also when
	// CIDRs of the family exist but every one is Terminating (as the
	// reference answers). A request for the next address of a full family
	// gets it whatever its owner: as in the reference, no owner is checked
	// when no address is found.
	ErrFull = errors.New("range is full")
	// ErrAllocated: the address is held already (by any owner, in any CIDR).
	ErrAllocated = errors.New("provided IP is already allocated")
	// ErrNotInRange: the address is in no live CIDR. Returned as a *RangeError.
	ErrNotInRange = errors.New("not in the valid range")
	// ErrMismatch: the family is served by no CIDR at all, for a request
	// of the next address; for a static one, by no live CIDR, and no
	// Terminating CIDR contains the address (one that does makes it a
	// *RangeError matching ErrTerminating).
	ErrMismatch = errors.New("the provided network does not match the current range")
	// ErrTerminating: the CIDR is being deleted and serves no new allocation.
	ErrTerminating = errors.New("CIDR is terminating")
	// ErrExcluded: the address lies in a range excluded from allocation.
	ErrExcluded = errors.New("address is excluded from allocation")
	// ErrNotFound: no such CIDR or address record.
	ErrNotFound = store.ErrNotFound
	// ErrExists: a CIDR of that name exists.
	ErrExists = store.ErrExists
	// ErrConflict: the object changed since the revision the caller gave.
	ErrConflict = store.ErrConflict
	// ErrInvalid: the input failed validation; errors.As to
	// *ipaddress.FieldError for the details.
	ErrInvalid = ipaddress.ErrInvalid
	// ErrDefaultMismatch: the default CIDR exists with prefixes that the
	// configuration can not change to (only single- to dual-stack is allowed).
	ErrDefaultMismatch = errors.New("default CIDR does not match the configured prefixes")
	// ErrClosed: the allocator was closed.
	ErrClosed = errors.New("allocator closed")
)

// RangeError reports an address outside every live CIDR. It matches
// ErrNotInRange, and ErrTerminating when only Terminating CIDRs contain it.
type RangeError struct {
	Addr netip.Addr
	// Valid lists the prefixes of live CIDRs of the address's family.
	Valid []netip.Prefix
	// Terminating names the Terminating CIDRs that contain Addr, if any.
	Terminating []string
}

// Error gives the reference's text, "the provided IP (ADDR) is not in the
// valid range. The range of valid IPs is PREFIXES", and names the
// Terminating CIDRs that hold the address, if any.
func (e *RangeError) Error() string {
	valid := make([]string, len(e.Valid))
	for i, p := range e.Valid {
		valid[i] = p.String()
	}
	list := strings.Join(valid, ", ")
	if list == "" {
		list = "empty"
	}
	msg := fmt.Sprintf("the provided IP (%s) is not in the valid range. The range of valid IPs is %s", e.Addr, list)
	if len(e.Terminating) > 0 {
		msg += fmt.Sprintf(" (CIDR %s is terminating)", strings.Join(e.Terminating, ", "))
	}
	return msg
}

// Is matches ErrNotInRange, and ErrTerminating when a Terminating CIDR
// contains the address.
func (e *RangeError) Is(target error) bool {
	return target == ErrNotInRange || (target == ErrTerminating && len(e.Terminating) > 0)
}

// DeletionBlockedError reports a CIDR whose removal waits for addresses to
// be released. It is not a failure of DeleteCIDR: the CIDR is Terminating and
// goes away once they are; DeleteCIDR returns it so callers see why.
type DeletionBlockedError struct {
	CIDR string
	// Blocking lists, ascending, up to finalizer.MaxBlocking of the
	// addresses that hold the CIDR; More is true when there are others.
	Blocking []netip.Addr
	More     bool
}

// DeletionPendingError reports a CIDR that DeleteCIDR marked Terminating
// but whose removal it could not decide: Err says why (its context ended,
// the store did not answer). The mark stands: the CIDR serves no new
// allocation, and the allocator removes it in the background once no
// address would be orphaned. DeleteCIDR may be called again for the
// outcome. It matches ErrTerminating, and Err.
type DeletionPendingError struct {
	CIDR string
	Err  error
}

// Error names the CIDR and why its removal is not decided.
func (e *DeletionPendingError) Error() string {
	return fmt.Sprintf("CIDR %q is terminating; its removal is not decided yet: %v", e.CIDR, e.Err)
}

// Unwrap returns Err.
func (e *DeletionPendingError) Unwrap() error { return e.Err }

// Is matches ErrTerminating.
func (e *DeletionPendingError) Is(target error) bool { return target == ErrTerminating }

// ErrDeletionBlocked is matched by *DeletionBlockedError.
var ErrDeletionBlocked = errors.New("deletion blocked")

// Error gives the reference's text for a CIDR held by addresses, then the
// blocking addresses (", and more" when cut).
func (e *DeletionBlockedError) Error() string {
	addrs := make([]string, len(e.Blocking))
	for i, a := range e.Blocking {
		addrs[i] = a.String()
	}
	if e.More {
		addrs = append(addrs, "and more")
	}
	return fmt.Sprintf("CIDR %q is terminating: There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR (%s)", e.CIDR, strings.Join(addrs, ", "))
}

// Is matches ErrDeletionBlocked and ErrTerminating.
func (e *DeletionBlockedError) Is(target error) bool {
	return target == ErrDeletionBlocked || target == ErrTerminating
}
