package allocator

import (
	"net/netip"

	"go4.org/netipx"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/internal/u128"
	"github.com/netipam/netipam/ipaddress"
)

// Usage counts the addresses of a prefix, a CIDR or a family. Counts are
// exact up to 2^128-1. Size counts the addresses offered (section 2 of the
// spec), Used those allocated, Free = Size - Used - excluded addresses not
// allocated. The IPv4-mapped block (::ffff:0:0/96), which some IPv6
// prefixes contain, is always excluded: no record may hold such an address.
type Usage struct {
	Size, Used, Free cidrset.Count
}

// PrefixUsage is the Usage of one prefix of a CIDR.
type PrefixUsage struct {
	Prefix netip.Prefix
	Usage
}

// CIDRUsage is the usage of each prefix of a CIDR.
type CIDRUsage struct {
	Name        string
	Terminating bool
	Prefixes    []PrefixUsage
}

// Usage returns the usage of the CIDR named name. It costs O(prefixes): the
// counters are kept as addresses come and go.
func (a *Allocator) Usage(name string) (CIDRUsage, error) {
	if a.mu == nil {
		return CIDRUsage{}, &NotFoundError{Kind: "CIDR", Name: name} // not made by New
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.index.Get(name)
	if !ok {
		return CIDRUsage{}, &NotFoundError{Kind: "CIDR", Name: name}
	}
	out := CIDRUsage{Name: name, Terminating: c.Terminating}
	for _, p := range c.Prefixes {
		pu := PrefixUsage{Prefix: p}
		if pl := a.pools[p.Masked()]; pl != nil {
			pu.Usage = a.poolUsageLocked(pl)
		}
		out.Prefixes = append(out.Prefixes, pu)
	}
	return out, nil
}

func (a *Allocator) poolUsageLocked(pl *pool) Usage {
	u := Usage{Size: cidrset.Count(pl.size), Used: cidrset.Count(pl.used)}
	free := pl.size.Sub(pl.used)
	if !pl.excluded.IsZero() {
		// Excluded addresses that are not allocated are not free either.
		for lo, hi := range a.excluded[pl.fam].Ranges(pl.first, pl.last) {
			n := hi.Sub(lo).Inc()
			free = free.Sub(n.Sub(a.usedCountLocked(pl.fam, lo, hi)))
		}
	}
	u.Free = cidrset.Count(free)
	return u
}

// FamilyUsage returns the usage of the union of the live CIDRs' prefixes of
// family f: overlapping CIDRs count each address once. Terminating CIDRs
// are left out: they offer nothing new. It costs O(CIDRs + used runs in
// them), and a word read per 64 addresses of dense pools.
func (a *Allocator) FamilyUsage(f ipaddress.Family) Usage {
	fam, ok := famOf(f)
	if !ok || a.mu == nil {
		return Usage{}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var b netipx.IPSetBuilder
	for _, c := range a.index.All() {
		if c.Terminating {
			continue
		}
		// Every prefix of the family: validation allows one, but a CIDR
		// a store holds with two is served from both (buildPoolsLocked).
		for _, p := range c.Prefixes {
			if famIndex(p.Addr()) != fam {
				continue
			}
			if r, ok := cidrset.HostRange(p); ok {
				b.AddRange(r)
			}
		}
	}
	set, _ := b.IPSet()
	var size, used, excludedFree u128.U128
	for _, r := range set.Ranges() {
		lo, hi := u128.FromAddr(r.From()), u128.FromAddr(r.To())
		size = size.Add(hi.Sub(lo).Inc())
		used = used.Add(a.usedCountLocked(fam, lo, hi))
		for elo, ehi := range a.excluded[fam].Ranges(lo, hi) {
			excludedFree = excludedFree.Add(ehi.Sub(elo).Inc().Sub(a.usedCountLocked(fam, elo, ehi)))
		}
	}
	return Usage{Size: cidrset.Count(size), Used: cidrset.Count(used), Free: cidrset.Count(size.Sub(used).Sub(excludedFree))}
}
