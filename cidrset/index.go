package cidrset

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
)

// Index is a set of CIDRs, keyed by name, that answers which CIDRs
// host-contain an address, cover a prefix or overlap it, and is changed one
// CIDR at a time.
//
// Lookups hash the query masked to each prefix length in use (at most 33 for
// IPv4, 129 for IPv6, in practice a handful), so they cost O(lengths), not
// O(CIDRs); Overlapping adds a binary search for the prefixes inside the
// query. Put and Delete update two maps and insert into, or cut from, a
// few sorted slices (a binary search and a copy of the entries after the
// place, pointers and prefixes): no rebuild.
//
// The zero value is an empty index. An Index is not safe for concurrent
// use. The slices it returns are shared with it and valid until the next
// Put or Delete: do not modify or keep them. The CIDRs they point to are
// never changed (Put stores a new one).
type Index struct {
	byName map[string]*CIDR
	sorted []*CIDR // by name
	dying  []*CIDR // the Terminating ones, by name
	// byPrefix maps each masked prefix in use to the CIDRs holding it, by
	// name.
	byPrefix map[netip.Prefix][]*CIDR
	// starts holds the keys of byPrefix per family ([0] IPv4, [1] IPv6),
	// by address then length, for the prefixes inside a query.
	starts [2][]netip.Prefix
	// lengthUses counts the keys of byPrefix per family and length;
	// lengths lists the lengths counted, ascending.
	lengthUses [2][129]int32
	lengths    [2][]int
}

// NewIndex returns an index over cidrs (copied). Names are unique: a later
// CIDR of the same name replaces an earlier one. Like every method, it
// expects valid CIDRs (CIDR.Validate): one with two prefixes of a family
// may be listed twice by Covering.
func NewIndex(cidrs []CIDR) *Index {
	x := &Index{byName: make(map[string]*CIDR, len(cidrs)), byPrefix: make(map[netip.Prefix][]*CIDR, len(cidrs))}
	for _, c := range cidrs {
		cc := c.Clone()
		x.byName[c.Name] = &cc
	}
	// One sort per list instead of a sorted insert per CIDR.
	for _, c := range x.byName {
		x.sorted = append(x.sorted, c)
	}
	slices.SortFunc(x.sorted, compareNames)
	for _, c := range x.sorted {
		if c.Terminating {
			x.dying = append(x.dying, c)
		}
		for _, p := range usablePrefixes(c) {
			if _, ok := x.byPrefix[p]; !ok {
				f := familyIndex(p.Addr())
				x.starts[f] = append(x.starts[f], p)
				x.lengthUses[f][p.Bits()]++
			}
			x.byPrefix[p] = append(x.byPrefix[p], c)
		}
	}
	for f := range x.starts {
		slices.SortFunc(x.starts[f], comparePrefixes)
		x.setLengths(f)
	}
	return x
}

func familyIndex(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

func compareNames(a, b *CIDR) int { return strings.Compare(a.Name, b.Name) }

// comparePrefixes orders prefixes of one family by address, then length.
func comparePrefixes(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return cmp.Compare(a.Bits(), b.Bits())
}

// usablePrefixes returns c's valid prefixes, masked, each once.
func usablePrefixes(c *CIDR) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(c.Prefixes))
	for _, p := range c.Prefixes {
		if p.IsValid() && !slices.Contains(out, p.Masked()) {
			out = append(out, p.Masked())
		}
	}
	return out
}

func (x *Index) setLengths(f int) {
	x.lengths[f] = x.lengths[f][:0]
	for l, n := range x.lengthUses[f] {
		if n > 0 {
			x.lengths[f] = append(x.lengths[f], l)
		}
	}
}

// Len returns the number of CIDRs.
func (x *Index) Len() int { return len(x.sorted) }

// All returns the CIDRs sorted by name.
func (x *Index) All() []*CIDR { return x.sorted }

// Terminating returns the Terminating CIDRs sorted by name.
func (x *Index) Terminating() []*CIDR { return x.dying }

// WithPrefix returns the CIDRs holding prefix p (masked), sorted by name.
func (x *Index) WithPrefix(p netip.Prefix) []*CIDR { return x.byPrefix[p.Masked()] }

// Get returns the CIDR named name. Its Prefixes is shared with the index,
// as the slices the index returns are: do not modify it (Clone the CIDR
// to change a copy).
func (x *Index) Get(name string) (CIDR, bool) {
	c, ok := x.byName[name]
	if !ok {
		return CIDR{}, false
	}
	return *c, true
}

// Put adds c (copied), or replaces the CIDR of its name.
func (x *Index) Put(c CIDR) {
	x.Delete(c.Name)
	if x.byName == nil {
		x.byName = map[string]*CIDR{}
		x.byPrefix = map[netip.Prefix][]*CIDR{}
	}
	cc := c.Clone()
	pc := &cc
	x.byName[c.Name] = pc
	x.sorted = insertByName(x.sorted, pc)
	if c.Terminating {
		x.dying = insertByName(x.dying, pc)
	}
	for _, p := range usablePrefixes(pc) {
		list, ok := x.byPrefix[p]
		if !ok {
			f := familyIndex(p.Addr())
			i, _ := slices.BinarySearchFunc(x.starts[f], p, comparePrefixes)
			x.starts[f] = slices.Insert(x.starts[f], i, p)
			if x.lengthUses[f][p.Bits()]++; x.lengthUses[f][p.Bits()] == 1 {
				x.setLengths(f)
			}
		}
		x.byPrefix[p] = insertByName(list, pc)
	}
}

// Delete removes the CIDR named name, and reports whether there was one.
func (x *Index) Delete(name string) bool {
	c, ok := x.byName[name]
	if !ok {
		return false
	}
	delete(x.byName, name)
	x.sorted = removeByName(x.sorted, c)
	if c.Terminating {
		x.dying = removeByName(x.dying, c)
	}
	for _, p := range usablePrefixes(c) {
		list := removeByName(x.byPrefix[p], c)
		if len(list) > 0 {
			x.byPrefix[p] = list
			continue
		}
		delete(x.byPrefix, p)
		f := familyIndex(p.Addr())
		if i, found := slices.BinarySearchFunc(x.starts[f], p, comparePrefixes); found {
			x.starts[f] = slices.Delete(x.starts[f], i, i+1)
		}
		if x.lengthUses[f][p.Bits()]--; x.lengthUses[f][p.Bits()] == 0 {
			x.setLengths(f)
		}
	}
	return true
}

func insertByName(list []*CIDR, c *CIDR) []*CIDR {
	i, _ := slices.BinarySearchFunc(list, c, compareNames)
	return slices.Insert(list, i, c)
}

func removeByName(list []*CIDR, c *CIDR) []*CIDR {
	if i, found := slices.BinarySearchFunc(list, c, compareNames); found {
		return slices.Delete(list, i, i+1)
	}
	return list
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
		for _, c := range x.byPrefix[p] {
			if !fn(c, p) {
				return
			}
		}
	}
}

// Covering returns the CIDRs holding a prefix that contains all of p
// (p itself included), longest prefix first.
func (x *Index) Covering(p netip.Prefix) []CIDR {
	var out []CIDR
	for _, c := range x.covering(p, nil) {
		out = append(out, *c)
	}
	return out
}

// covering appends to out the CIDRs Covering returns.
func (x *Index) covering(p netip.Prefix, out []*CIDR) []*CIDR {
	if !p.IsValid() {
		return out
	}
	p = p.Masked()
	ls := x.lengths[familyIndex(p.Addr())]
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i] > p.Bits() {
			continue
		}
		q, _ := p.Addr().Prefix(ls[i])
		out = append(out, x.byPrefix[q]...)
	}
	return out
}

// Overlapping returns the CIDRs holding a prefix that shares any address
// with p, sorted by name. Two prefixes overlap when one contains the other:
// the ones containing p are found as in Covering, the ones inside it by a
// binary search for the prefixes starting within p, so the cost is
// O(lengths + log CIDRs + found).
func (x *Index) Overlapping(p netip.Prefix) []CIDR {
	found := x.covering(p, nil)
	if !p.IsValid() {
		return nil
	}
	p = p.Masked()
	starts := x.starts[familyIndex(p.Addr())]
	i, _ := slices.BinarySearchFunc(starts, p, comparePrefixes)
	for ; i < len(starts) && p.Contains(starts[i].Addr()); i++ {
		if starts[i].Bits() > p.Bits() { // p itself is a cover, found above
			found = append(found, x.byPrefix[starts[i]]...)
		}
	}
	slices.SortFunc(found, compareNames)
	found = slices.Compact(found)
	out := make([]CIDR, len(found))
	for i, c := range found {
		out[i] = *c
	}
	return out
}
