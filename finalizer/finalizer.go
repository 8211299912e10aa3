// Package finalizer decides when a CIDR being deleted may be removed, and
// applies that decision against a store.
//
// The rule (KEP-1880, with one deliberate change): a Terminating CIDR may be
// removed when no allocated address inside it would be left outside every
// live CIDR. Unlike the reference, a covering CIDR counts only if it is not
// Terminating itself, so two overlapping CIDRs deleted together never orphan
// an address; and the removal is fenced in the store on the revisions the
// decision read, so no grace period is needed.
package finalizer

import (
	"iter"
	"net/netip"
	"slices"
	"strings"

	"go4.org/netipx"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/store"
)

// MaxBlocking is how many blocking addresses a Decision lists at most.
const MaxBlocking = 16

// Decision is the outcome of Decide.
type Decision struct {
	// Remove is true when the CIDR may be removed (its finalizer released).
	Remove bool
	// Blocking lists, ascending, up to MaxBlocking allocated addresses that
	// no other live CIDR contains; empty when Remove.
	Blocking []netip.Addr
	// More is true when more addresses block than Blocking lists: they
	// must all be released (or covered) before the CIDR goes.
	More bool
	// Fences are the live CIDRs whose coverage the decision relied on: the
	// removal must be fenced on them.
	Fences []store.Fence
	// Unknown is true when the decision could not see the allocated
	// addresses (Decide without used, DecideIn without a View). Remove is
	// then false and Blocking empty, whatever covers the CIDR: an address
	// it could not see may be one that only this CIDR holds.
	Unknown bool
}

// Condition returns the Ready condition the CIDR carries while the decision
// holds.
func (d Decision) Condition(c cidrset.CIDR) cidrset.Condition {
	c.Terminating = !d.Remove || c.Terminating
	return c.Ready()
}

// Decide decides whether target may be removed. others are the other CIDRs
// (any state; Terminating ones and target itself are ignored). used yields
// the allocated addresses inside a range as ascending, disjoint ranges
// (View.Used). It is asked only about the parts of target's host ranges
// that no live CIDR covers, since only addresses there can block, and
// read only until MaxBlocking blocking addresses are found: the cost does
// not depend on how many addresses lie outside target or in its covered
// parts, and a blocked decision costs about the same however many
// addresses hold it. Addresses that are a prefix's network address or IPv4
// broadcast never block.
//
// Decide never removes what it cannot check: with a nil used, or one that
// yields a nil sequence when asked, the decision is Unknown and keeps the
// CIDR.
func Decide(target cidrset.CIDR, others []cidrset.CIDR, used func(netipx.IPRange) iter.Seq[netipx.IPRange]) Decision {
	if used == nil {
		return Decision{Unknown: true}
	}
	var live []cidrset.CIDR
	for _, o := range others {
		if !o.Terminating && o.Name != target.Name {
			live = append(live, o)
		}
	}
	var d Decision
	relied := map[string]int64{}
	// The gaps of every prefix together, in address order (IPv4 first),
	// so that Blocking ascends, a cut one keeps the lowest addresses, and
	// prefixes of one family that overlap (which a store may hold) list
	// an address once.
	var all netipx.IPSetBuilder
	for _, p := range target.Prefixes {
		host, ok := cidrset.HostRange(p)
		if !ok {
			continue
		}
		if c, ok := coveringPrefix(live, p); ok {
			relied[c.Name] = c.Revision
			continue
		}
		var gaps netipx.IPSetBuilder // host less what live CIDRs cover
		gaps.AddRange(host)
		for _, o := range live {
			for _, q := range o.Prefixes {
				if r, ok := cidrset.HostRange(q); ok && q.Overlaps(p) {
					gaps.RemoveRange(r)
					relied[o.Name] = o.Revision
				}
			}
		}
		set, _ := gaps.IPSet()
		all.AddSet(set)
	}
	set, _ := all.IPSet()
	var seen bool
	if d.Blocking, seen = appendUsed(d.Blocking, set.Ranges(), used); !seen {
		return Decision{Unknown: true}
	}
	if len(d.Blocking) > MaxBlocking {
		d.Blocking, d.More = d.Blocking[:MaxBlocking], true
	}
	if len(d.Blocking) > 0 {
		return d
	}
	d.Remove = true
	for name, rev := range relied {
		d.Fences = append(d.Fences, store.Fence{CIDR: name, Revision: rev})
	}
	slices.SortFunc(d.Fences, func(a, b store.Fence) int { return strings.Compare(a.CIDR, b.CIDR) })
	return d
}

// appendUsed appends to dst the used addresses inside gaps (ascending and
// disjoint), up to MaxBlocking+1 in all: the one past MaxBlocking tells
// that the list is cut. seen is false when used yielded a nil sequence:
// the addresses of that gap are unknown.
func appendUsed(dst []netip.Addr, gaps []netipx.IPRange, used func(netipx.IPRange) iter.Seq[netipx.IPRange]) (_ []netip.Addr, seen bool) {
	for _, g := range gaps {
		if len(dst) > MaxBlocking {
			return dst, true
		}
		seq := used(g)
		if seq == nil {
			return dst, false
		}
		for r := range seq {
			r, ok := intersect(r, g)
			if !ok {
				continue
			}
			for a := r.From(); ; a = a.Next() {
				if dst = append(dst, a); len(dst) > MaxBlocking {
					return dst, true // read no further
				}
				if a == r.To() {
					break
				}
			}
		}
	}
	return dst, true
}

// coveringPrefix returns a live CIDR with a prefix containing all of p.
func coveringPrefix(live []cidrset.CIDR, p netip.Prefix) (cidrset.CIDR, bool) {
	for _, o := range live {
		for _, q := range o.Prefixes {
			if q.Bits() <= p.Bits() && q.Contains(p.Addr()) {
				return o, true
			}
		}
	}
	return cidrset.CIDR{}, false
}

func intersect(a, b netipx.IPRange) (netipx.IPRange, bool) {
	from, to := a.From(), a.To()
	if from.Less(b.From()) {
		from = b.From()
	}
	if b.To().Less(to) {
		to = b.To()
	}
	if to.Less(from) {
		return netipx.IPRange{}, false
	}
	return netipx.IPRangeFrom(from, to), true
}
