package cidrset

import (
	"net/netip"
	"slices"
	"strings"
)

// Index is an immutable set of CIDRs, keyed by name, that answers which
// CIDRs host-contain an address, cover a prefix or overlap it.
//
// Lookups hash the query masked to each prefix length in use (at most 33 for
// IPv4, 129 for IPv6, in practice a handful), so they cost O(lengths), not
// O(CIDRs). The zero value is an empty index.
type Index struct {
	cidrs    []CIDR // sorted by name
	byName   map[string]int
	byPrefix map[netip.Prefix][]int
	lengths  [2][]int // prefix lengths in use, ascending; [0] IPv4, [1] IPv6
}

// NewIndex returns an index over cidrs (copied). Names are unique: a later
// CIDR of the same name replaces an earlier one.
func NewIndex(cidrs []CIDR) *Index {
	x := &Index{byName: make(map[string]int, len(cidrs)), byPrefix: make(map[netip.Prefix][]int)}
	for _, c := range cidrs {
		if i, ok := x.byName[c.Name]; ok {
			x.cidrs[i] = c.Clone()
			continue
		}
		x.byName[c.Name] = len(x.cidrs)
		x.cidrs = append(x.cidrs, c.Clone())
	}
	slices.SortFunc(x.cidrs, func(a, b CIDR) int { return strings.Compare(a.Name, b.Name) })
	for i, c := range x.cidrs {
		x.byName[c.Name] = i
		for _, p := range c.Prefixes {
			p = p.Masked()
			x.byPrefix[p] = append(x.byPrefix[p], i)
			f := familyIndex(p.Addr())
			if !slices.Contains(x.lengths[f], p.Bits()) {
				x.lengths[f] = append(x.lengths[f], p.Bits())
			}
		}
	}
	slices.Sort(x.lengths[0])
	slices.Sort(x.lengths[1])
	return x
}

func familyIndex(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

// Len returns the number of CIDRs.
func (x *Index) Len() int { return len(x.cidrs) }

// All returns the CIDRs sorted by name. The slice is shared: do not modify.
func (x *Index) All() []CIDR { return x.cidrs }

// Get returns the CIDR named name.
func (x *Index) Get(name string) (CIDR, bool) {
	i, ok := x.byName[name]
	if !ok {
		return CIDR{}, false
	}
	return x.cidrs[i], true
}

// With returns a new index with c added or replaced.
func (x *Index) With(c CIDR) *Index {
	return NewIndex(append(slices.Clone(x.cidrs), c))
}

// Without returns a new index without the CIDR named name.
func (x *Index) Without(name string) *Index {
	return NewIndex(slices.DeleteFunc(slices.Clone(x.cidrs), func(c CIDR) bool { return c.Name == name }))
}

// Containing calls fn for each CIDR and its prefix that host-contains a
// (HostContains), longest prefix first, until fn returns false.
func (x *Index) Containing(a netip.Addr, fn func(c *CIDR, p netip.Prefix) bool) {
	if !a.IsValid() {
		return
	}
	ls := x.lengths[familyIndex(a)]
	for i := len(ls) - 1; i >= 0; i-- {
		p, err := a.Prefix(ls[i])
		if err != nil || !HostContains(p, a) {
			continue
		}
		for _, ci := range x.byPrefix[p] {
			if !fn(&x.cidrs[ci], p) {
				return
			}
		}
	}
}

// Covering returns the CIDRs holding a prefix that contains all of p
// (p itself included), longest prefix first.
func (x *Index) Covering(p netip.Prefix) []CIDR {
	var out []CIDR
	p = p.Masked()
	ls := x.lengths[familyIndex(p.Addr())]
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i] > p.Bits() {
			continue
		}
		q, _ := p.Addr().Prefix(ls[i])
		for _, ci := range x.byPrefix[q] {
			out = append(out, x.cidrs[ci])
		}
	}
	return out
}

// Overlapping returns the CIDRs holding a prefix that shares any address
// with p, sorted by name.
func (x *Index) Overlapping(p netip.Prefix) []CIDR {
	var out []CIDR
	for _, c := range x.cidrs {
		for _, q := range c.Prefixes {
			if q.Overlaps(p) {
				out = append(out, c)
				break
			}
		}
	}
	return out
}
