package allocator

import (
	"time"

	"github.com/netipam/netipam/ipaddress"
)

// Scope tells static from dynamic allocations, as the Kubernetes metrics do.
type Scope string

// Scopes.
const (
	ScopeStatic  Scope = "static"
	ScopeDynamic Scope = "dynamic"
)

// AllocationEvent is the outcome of one requested address.
type AllocationEvent struct {
	Scope  Scope
	Family ipaddress.Family
	// CIDR is the CIDR the address was (or would have been) taken from:
	// for "range is full", the one the policy would have tried first; for
	// a static address refused inside a live CIDR (excluded, taken), that
	// CIDR. Empty when no live CIDR serves the request, when the context
	// had ended before one was chosen, whatever the store, and for an
	// invalid owner's request on a range with room (the owner's error is
	// no CIDR's; on a full range the request is "range is full", above).
	CIDR     string
	Err      error
	Duration time.Duration
}

// Observer receives allocation outcomes, for metrics. Allocated is called
// after every allocation attempt whose addresses are valid (an invalid
// address is refused before it is one; dry runs and Restore are not
// reported either), from the calling goroutine, outside the
// allocator's locks; it must be safe for concurrent use. Per-CIDR usage is
// read with Usage, which costs O(CIDRs), not O(addresses).
type Observer interface {
	Allocated(AllocationEvent)
}
