// Package admission holds ready-made allocator.Admission checks, the
// policies a platform puts on which CIDRs may be created:
//
//   - Within: every prefix must lie inside one of the given ranges (GKE
//     accepted new Service CIDRs only inside 34.118.224.0/20);
//   - NotOverlapping: no prefix may overlap the given ranges (the pod and
//     node networks).
//
// Install them with allocator.WithAdmission; they run on CreateCIDR and
// UpdateCIDR (and DryRun().CreateCIDR). A refusal is an *Error matching
// ErrRejected.
//
// On update only the prefixes the update adds are checked: a CIDR created
// before a rule was tightened may still gain its second family.
package admission

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
)

// ErrRejected is matched (errors.Is) by every refusal of this package.
var ErrRejected = errors.New("rejected by admission")

// Rule names, as they appear in Error.Rule.
const (
	RuleWithin         = "Within"
	RuleNotOverlapping = "NotOverlapping"
)

// Error is a refusal: the CIDR's Prefix broke Rule, given Ranges.
type Error struct {
	Rule   string
	CIDR   string // name of the CIDR refused
	Prefix netip.Prefix
	Ranges []netip.Prefix // the rule's ranges (NotOverlapping: those overlapped)
}

// Error names the rule, the CIDR and prefix it refused, and its ranges
// (for NotOverlapping, those the prefix overlaps).
func (e *Error) Error() string {
	rs := make([]string, len(e.Ranges))
	for i, r := range e.Ranges {
		rs[i] = r.String()
	}
	switch e.Rule {
	case RuleWithin:
		if len(rs) == 0 {
			return fmt.Sprintf("admission rule %s rejected CIDR %q: prefix %s: no range is allowed", e.Rule, e.CIDR, e.Prefix)
		}
		return fmt.Sprintf("admission rule %s rejected CIDR %q: prefix %s is not inside any of %s", e.Rule, e.CIDR, e.Prefix, strings.Join(rs, ", "))
	case RuleNotOverlapping:
		return fmt.Sprintf("admission rule %s rejected CIDR %q: prefix %s overlaps %s", e.Rule, e.CIDR, e.Prefix, strings.Join(rs, ", "))
	}
	return fmt.Sprintf("admission rule %s rejected CIDR %q: prefix %s", e.Rule, e.CIDR, e.Prefix)
}

// Is matches ErrRejected.
func (e *Error) Is(target error) bool { return target == ErrRejected }

// added returns the prefixes of c that old does not have (all when old is nil).
func added(old *cidrset.CIDR, c cidrset.CIDR) []netip.Prefix {
	if old == nil {
		return c.Prefixes
	}
	var out []netip.Prefix
	for _, p := range c.Prefixes {
		if !slices.Contains(old.Prefixes, p) {
			out = append(out, p)
		}
	}
	return out
}

// inside reports whether p lies entirely inside r.
func inside(p, r netip.Prefix) bool {
	return r.Bits() <= p.Bits() && r.Contains(p.Addr())
}

// masked returns ranges masked, each IPv4-mapped one (::ffff:10.244.0.0/112)
// as the IPv4 range it spells (10.244.0.0/16): no CIDR holds mapped
// addresses, and read as IPv6 such a range would never meet an IPv4
// prefix, so NotOverlapping would admit what it is meant to refuse. A
// wider IPv6 range (::/80) stays IPv6.
func masked(ranges []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, len(ranges))
	for i, r := range ranges {
		if r.Addr().Is4In6() && r.Bits() >= 96 {
			r = netip.PrefixFrom(r.Addr().Unmap(), r.Bits()-96)
		}
		out[i] = r.Masked()
	}
	return out
}

// Within admits a CIDR only if each of its prefixes lies entirely inside
// one of ranges (a prefix of the other family never does). With no ranges
// it admits nothing. Ranges need not be canonical: they are masked, and
// an IPv4-mapped one is read as the IPv4 range it spells.
func Within(ranges ...netip.Prefix) allocator.Admission {
	ranges = masked(ranges)
	return func(_ context.Context, old *cidrset.CIDR, c cidrset.CIDR) error {
		for _, p := range added(old, c) {
			if !slices.ContainsFunc(ranges, func(r netip.Prefix) bool { return inside(p, r) }) {
				return &Error{Rule: RuleWithin, CIDR: c.Name, Prefix: p, Ranges: slices.Clone(ranges)}
			}
		}
		return nil
	}
}

// NotOverlapping admits a CIDR only if none of its prefixes shares an
// address with any of ranges (for example the pod and node networks).
// Ranges need not be canonical: they are masked, and an IPv4-mapped one
// is read as the IPv4 range it spells.
func NotOverlapping(ranges ...netip.Prefix) allocator.Admission {
	ranges = masked(ranges)
	return func(_ context.Context, old *cidrset.CIDR, c cidrset.CIDR) error {
		for _, p := range added(old, c) {
			var hit []netip.Prefix
			for _, r := range ranges {
				if p.Overlaps(r) {
					hit = append(hit, r)
				}
			}
			if len(hit) > 0 {
				return &Error{Rule: RuleNotOverlapping, CIDR: c.Name, Prefix: p, Ranges: hit}
			}
		}
		return nil
	}
}
