package repair

import (
	"fmt"
	"time"

	"github.com/netipam/netipam/ipaddress"
)

// Kind says what a repair pass found about one address.
type Kind string

// Kinds of findings, one per row of the repair rules (SPEC section 6), plus
// the "not yet" variants of the two deletions and Failed for errors.
const (
	// Invalid: a consumer's address does not parse (strictly: canonical
	// form, no zone, not IPv4-mapped). Reported only; a record of the
	// address it denotes under the legacy reading
	// (ipaddress.ParseAddrLegacy), whoever it names, is kept.
	Invalid Kind = "Invalid"
	// OutOfRange: a consumer's address lies in no CIDR (host containment,
	// Terminating CIDRs included). Reported only (ClusterIPOutOfRange).
	OutOfRange Kind = "OutOfRange"
	// Repaired: a consumer's address had no record of its own; one was
	// created for that consumer, or the record another owner held was
	// handed to it ("not allocated; repairing").
	Repaired Kind = "Repaired"
	// Leak: a record whose parent no longer exists, older than the grace
	// period, was deleted, or handed to the one consumer holding its
	// address, as Repaired then says ("appears to have leaked: cleaning
	// up").
	Leak Kind = "Leak"
	// LeakPending: as Leak, but the record is younger than the grace
	// period: its parent may still be on its way. Checked again later.
	LeakPending Kind = "LeakPending"
	// WrongReference: a record whose parent exists but does not hold that
	// address, older than the grace period, was deleted, or handed to the
	// one consumer holding the address, as Repaired then says ("wrong
	// reference").
	WrongReference Kind = "WrongReference"
	// WrongReferencePending: as WrongReference, but the record is younger
	// than the grace period: the parent may not have been updated yet with
	// an address just allocated to it. Checked again later.
	WrongReferencePending Kind = "WrongReferencePending"
	// Duplicate: several consumers hold one address ("already allocated").
	// Reported only: nothing about that address is changed.
	Duplicate Kind = "Duplicate"
	// Failed: the pass could not check or fix an address (a store error,
	// an excluded address, ...). Err says why. A record the store cannot
	// decode is one: Err matches store.ErrCorrupt and names its key, Addr
	// is its address (empty when the key does not tell it either), and
	// the record is left as it is. Counted as "unknown", as every error.
	Failed Kind = "Failed"
)

// Reason returns the Kubernetes event reason for the kind, as the
// reference repair loop records it.
func (k Kind) Reason() string {
	switch k {
	case Invalid:
		return "ClusterIPNotValid"
	case OutOfRange:
		return "ClusterIPOutOfRange"
	case Repaired:
		return "ClusterIPNotAllocated"
	case Leak, LeakPending:
		return "IPAddressNotAllocated"
	case WrongReference, WrongReferencePending:
		return "IPAddressWrongReference"
	case Duplicate:
		return "ClusterIPAlreadyAllocated"
	case Failed:
		return "UnknownError"
	}
	return string(k)
}

// ErrorType returns the value of the "type" label of the repair error
// counter (apiserver_clusterip_repair_ip_errors_total in Kubernetes): leak,
// repair, outOfRange, duplicate, invalid, full or unknown. Pending kinds
// count nothing (they return ""): they are counted once, when acted on.
// WrongReference counts as a leak: a record its owner does not back.
func (e Event) ErrorType() string {
	switch e.Kind {
	case Invalid:
		return "invalid"
	case OutOfRange:
		return "outOfRange"
	case Repaired:
		return "repair"
	case Leak, WrongReference:
		return "leak"
	case Duplicate:
		return "duplicate"
	case Failed:
		if e.Full {
			return "full"
		}
		return "unknown"
	}
	return ""
}

// Pending reports whether the kind is a finding the pass left for later.
func (k Kind) Pending() bool { return k == LeakPending || k == WrongReferencePending }

// Event is one finding of a repair pass.
type Event struct {
	Kind Kind
	// Addr is the address as the consumer gave it (it may not parse) or the
	// record's name.
	Addr string
	// Ref is the consumer holding the address (Invalid, OutOfRange,
	// Repaired, Duplicate: the first of the holders) or the parent the
	// record names (Leak, WrongReference).
	Ref ipaddress.ParentRef
	// Holders lists every consumer holding the address, for Duplicate.
	Holders []ipaddress.ParentRef
	// Age is the record's age as its stamp says (0 if the store stamps
	// none, or the record is younger than the pass), for Leak and
	// WrongReference and their pending variants.
	Age time.Duration
	// Message says what was found and done, in the reference's words.
	Message string
	// Err is the error behind Failed (and behind an Invalid address).
	Err error
	// Full is set on Failed when the error was "range is full".
	Full bool
	// DryRun is set when the change the message describes was not made.
	DryRun bool
}

// String prints the event as "KIND ADDR: MESSAGE", as a log line would.
func (e Event) String() string {
	return fmt.Sprintf("%s %s: %s", e.Kind, e.Addr, e.Message)
}

// Report is the outcome of one repair pass.
type Report struct {
	// Events lists the findings in the order they were made: records
	// first (pending ones, and a record handed to its consumer, followed
	// at once by that consumer's Repaired), then consumers' addresses,
	// then the records deleted (leaks, wrong references), which wait for
	// every consumer address to have its record.
	Events []Event
	// Records and Consumers count what the pass looked at; Records
	// includes the records that cannot be read.
	Records, Consumers int
	// RetryAfter is how long until the first pending record can be
	// decided; zero when nothing is pending. Run the pass again then.
	RetryAfter time.Duration
	// DryRun is set when nothing was changed.
	DryRun bool
}

// Count returns how many events of kind k the report holds.
func (r Report) Count(k Kind) int {
	n := 0
	for _, e := range r.Events {
		if e.Kind == k {
			n++
		}
	}
	return n
}

// Clean reports whether the pass found nothing at all.
func (r Report) Clean() bool { return len(r.Events) == 0 }
