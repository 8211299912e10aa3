// Package stress is a randomized concurrent-churn harness for tests: several
// allocators over one store.Store, several goroutines allocating, releasing
// and changing CIDRs, and checks of SPEC §3–§5 against a model the store's
// own watch keeps (no address handed out twice, no record outside a CIDR,
// no removable CIDR left Terminating, every allocator's usage right once
// quiescent, bands, exclusions, dual-stack both or neither).
package stress

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"go4.org/netipx"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// putKey names one record creation.
type putKey struct {
	addr netip.Addr
	rev  int64
}

// putInfo is what the recorder knew when a record was created.
type putInfo struct {
	owner ipaddress.ParentRef
	// lowerBandWithRoom: every live prefix that host-contains the address
	// has it in its lower band while that prefix's upper band had a free,
	// non-excluded address (a dynamic allocation must not return it).
	lowerBandWithRoom bool
	detail            string
}

// recorder watches the store and keeps a model of it, checking invariants
// at every event, in revision order. Apply runs under the store's own lock
// (memory, bolt): it takes only rec.mu, and nothing holding rec.mu calls
// the store.
type recorder struct {
	mu       sync.Mutex
	excluded []netipx.IPRange
	rev      int64
	resets   int
	cidrs    map[string]cidrset.CIDR
	addrs    map[netip.Addr]ipaddress.ParentRef
	puts     map[putKey]putInfo
	deletes  map[netip.Addr][]int64
	// violations found at event time, by rule name.
	violations map[string][]string
}

func newRecorder(excluded []netipx.IPRange) *recorder {
	return &recorder{
		excluded:   excluded,
		cidrs:      map[string]cidrset.CIDR{},
		addrs:      map[netip.Addr]ipaddress.ParentRef{},
		puts:       map[putKey]putInfo{},
		deletes:    map[netip.Addr][]int64{},
		violations: map[string][]string{},
	}
}

func (r *recorder) violate(rule, format string, args ...any) {
	if len(r.violations[rule]) < 20 {
		r.violations[rule] = append(r.violations[rule], fmt.Sprintf(format, args...))
	}
}

func (r *recorder) Reset(s store.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.resets++
	r.rev = s.Revision
	clear(r.cidrs)
	for _, c := range s.CIDRs {
		r.cidrs[c.Name] = c.Clone()
	}
	clear(r.addrs)
	for _, a := range s.Addrs {
		r.addrs[a] = ipaddress.ParentRef{}
	}
}

func (r *recorder) isExcluded(a netip.Addr) bool {
	for _, x := range r.excluded {
		if x.Contains(a) {
			return true
		}
	}
	return false
}

// liveHolding returns the prefixes of live CIDRs that host-contain a.
func (r *recorder) liveHolding(a netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range r.cidrs {
		if c.Terminating {
			continue
		}
		for _, p := range c.Prefixes {
			if cidrset.HostContains(p, a) && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// anyHolding returns the names of CIDRs (any state) but skip that
// host-contain a.
func (r *recorder) anyHolding(a netip.Addr, skip string) (live, dying []string) {
	for _, c := range r.cidrs {
		if c.Name == skip {
			continue
		}
		for _, p := range c.Prefixes {
			if cidrset.HostContains(p, a) {
				if c.Terminating {
					dying = append(dying, c.Name)
				} else {
					live = append(live, c.Name)
				}
				break
			}
		}
	}
	return live, dying
}

// upperHasRoom reports whether p's upper band has an address that is
// neither held nor excluded.
func (r *recorder) upperHasRoom(p netip.Prefix) bool {
	_, upper, _, ok := cidrset.Bands(p)
	if !ok {
		return false
	}
	for a := upper.From(); ; a = a.Next() {
		if _, held := r.addrs[a]; !held && !r.isExcluded(a) {
			return true
		}
		if a == upper.To() {
			return false
		}
	}
}

func inLower(p netip.Prefix, a netip.Addr) bool {
	lower, _, has, ok := cidrset.Bands(p)
	return ok && has && lower.Contains(a)
}

func (r *recorder) Apply(e store.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Revision < r.rev {
		r.violate("StoreEventsInRevisionOrder", "event %v at rev %d after rev %d", e.Kind, e.Revision, r.rev)
	}
	r.rev = e.Revision
	switch e.Kind {
	case store.AddressPut:
		a := e.Address.Addr
		if _, held := r.addrs[a]; held {
			r.violate("StoreOneRecordPerAddress", "put of held %s at rev %d", a, e.Revision)
		}
		live := r.liveHolding(a)
		if len(live) == 0 {
			_, dying := r.anyHolding(a, "")
			r.violate("RecordCreatedOnlyInsideLiveCIDR", "rev %d: %s (owner %s) created while no live CIDR host-contains it (terminating holders: %v)", e.Revision, a, e.Address.Parent, dying)
		}
		if r.isExcluded(a) {
			r.violate("NoAllocationOfExcludedAddress", "rev %d: %s created, excluded", e.Revision, a)
		}
		info := putInfo{owner: e.Address.Parent}
		if len(live) > 0 {
			bad := true
			for _, p := range live {
				if !inLower(p, a) || !r.upperHasRoom(p) {
					bad = false
					break
				}
			}
			if bad {
				info.lowerBandWithRoom = true
				info.detail = fmt.Sprintf("%s in lower band of %v whose upper band had room", a, live)
			}
		}
		r.puts[putKey{a, e.Revision}] = info
		r.addrs[a] = e.Address.Parent
	case store.AddressDeleted:
		a := e.Address.Addr
		if _, held := r.addrs[a]; !held {
			r.violate("StoreOneRecordPerAddress", "delete of free %s at rev %d", a, e.Revision)
		}
		delete(r.addrs, a)
		r.deletes[a] = append(r.deletes[a], e.Revision)
	case store.CIDRPut:
		r.cidrs[e.CIDR.Name] = e.CIDR.Clone()
	case store.CIDRDeleted:
		old, ok := r.cidrs[e.CIDR.Name]
		if !ok {
			r.violate("CIDRDeletedExisted", "rev %d: deleted unknown CIDR %q", e.Revision, e.CIDR.Name)
			break
		}
		if !old.Terminating {
			r.violate("OnlyTerminatingCIDRRemoved", "rev %d: CIDR %q removed while live", e.Revision, old.Name)
		}
		for a := range r.addrs {
			inside := false
			for _, p := range old.Prefixes {
				if cidrset.HostContains(p, a) {
					inside = true
				}
			}
			if !inside {
				continue
			}
			live, dying := r.anyHolding(a, old.Name)
			switch {
			case len(live) == 0 && len(dying) == 0:
				r.violate("NoOrphanAfterCIDRRemoval", "rev %d: removing %q %v orphans %s", e.Revision, old.Name, old.Prefixes, a)
			case len(live) == 0:
				r.violate("RemovedCIDRAddressesCoveredByLiveCIDR", "rev %d: removing %q %v leaves %s covered only by terminating %v", e.Revision, old.Name, old.Prefixes, a, dying)
			}
		}
		delete(r.cidrs, old.Name)
	}
}
