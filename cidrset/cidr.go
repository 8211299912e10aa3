// Package cidrset defines the CIDR object (the ServiceCIDR of KEP-1880), the
// rules for which addresses a prefix offers, and an index over a set of CIDRs
// that answers containment and overlap questions without scanning.
package cidrset

import (
	"net/netip"
	"strings"
	"time"

	"github.com/netipam/netipam/ipaddress"
)

// DefaultName is the name of the default CIDR an embedder bootstraps.
const DefaultName = "kubernetes"

// Finalizer guards a CIDR that is being deleted until no address would be
// orphaned by its removal.
const Finalizer = "networking.k8s.io/service-cidr-finalizer"

// Ready condition values.
const (
	ConditionReady       = "Ready"
	ReasonTerminating    = "Terminating"
	MessageReady         = "Kubernetes Service CIDR is ready"
	MessageDefaultReady  = "Kubernetes default Service CIDR is ready"
	MessageBlockedDelete = "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR"
)

// CIDR is a named set of one or two prefixes, at most one per family.
//
// Prefixes are immutable after creation except that a single-stack CIDR may
// gain a prefix of the other family (ValidateUpdate). A CIDR with
// Terminating set serves no new allocation and is removed from its store once
// no address would be orphaned (package finalizer).
type CIDR struct {
	Name     string
	Prefixes []netip.Prefix
	// Terminating is set when deletion was requested.
	Terminating bool
	// Created is set by the store on creation.
	Created time.Time
	// Revision is the store revision of the last change; set by the store.
	// Allocations from this CIDR are fenced on it.
	Revision int64
}

// Condition is the Ready condition of a CIDR.
type Condition struct {
	Type    string // always ConditionReady
	Status  bool
	Reason  string
	Message string
}

// Ready returns the CIDR's Ready condition. A live CIDR is ready. A
// Terminating CIDR still present in a store is one whose removal is blocked
// by addresses only it contains (it is removed as soon as it is not), so it
// reports Ready=False, reason Terminating, with the reference's message.
func (c CIDR) Ready() Condition {
	switch {
	case c.Terminating:
		return Condition{Type: ConditionReady, Reason: ReasonTerminating, Message: MessageBlockedDelete}
	case c.Name == DefaultName:
		return Condition{Type: ConditionReady, Status: true, Message: MessageDefaultReady}
	}
	return Condition{Type: ConditionReady, Status: true, Message: MessageReady}
}

// Prefix returns the CIDR's prefix of family f.
func (c CIDR) Prefix(f ipaddress.Family) (netip.Prefix, bool) {
	for _, p := range c.Prefixes {
		if ipaddress.FamilyOf(p.Addr()) == f {
			return p, true
		}
	}
	return netip.Prefix{}, false
}

// String returns c's name and prefixes, as "dual [10.0.0.0/16 fd00::/108]",
// and " (Terminating)" if it is: what a log line or an error needs to
// name a CIDR, without its creation time and revision.
func (c CIDR) String() string {
	var b strings.Builder
	b.WriteString(c.Name)
	b.WriteString(" [")
	for i, p := range c.Prefixes {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(p.String())
	}
	b.WriteByte(']')
	if c.Terminating {
		b.WriteString(" (Terminating)")
	}
	return b.String()
}

// Clone returns a copy of c that shares no memory with it.
func (c CIDR) Clone() CIDR {
	c.Prefixes = append([]netip.Prefix(nil), c.Prefixes...)
	return c
}
