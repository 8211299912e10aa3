package allocator

import (
	"context"
	"net/netip"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/finalizer"
	"github.com/netipam/netipam/ipaddress"
)

// DryRun answers what an operation would do, writing nothing. Answers are
// as of the allocator's current index: a later real call may differ if the
// store changes in between. The zero value is the dry run of a closed
// allocator: every method fails with ErrClosed.
type DryRun struct{ a *Allocator }

// DryRun returns the dry-run view of a.
func (a *Allocator) DryRun() DryRun { return DryRun{a} }

// checkOpen returns ErrClosed for the zero DryRun, and once its allocator
// was closed.
func (d DryRun) checkOpen() error {
	if d.a == nil {
		return ErrClosed
	}
	return d.a.checkOpen()
}

// AllocateNext returns the address AllocateNext would choose now. With a
// random strategy the real call may choose another.
func (d DryRun) AllocateNext(ctx context.Context, f ipaddress.Family, owner ipaddress.ParentRef) (netip.Addr, error) {
	if err := d.checkOpen(); err != nil {
		return netip.Addr{}, err
	}
	var out results
	err := d.a.allocate(ctx, owner, []request{{family: f}}, true, &out)
	return out[0].Addr, err
}

// EnsureNext returns the address EnsureNext would return now: the one of
// family f owner holds (of lowest revision), or else the one AllocateNext
// would choose.
func (d DryRun) EnsureNext(ctx context.Context, f ipaddress.Family, owner ipaddress.ParentRef) (netip.Addr, error) {
	if err := d.checkOpen(); err != nil {
		return netip.Addr{}, err
	}
	rec, held, err := d.a.heldOf(ctx, f, owner)
	if err != nil || held {
		return rec.Addr, err
	}
	return d.AllocateNext(ctx, f, owner)
}

// AllocateDualStack returns the pair AllocateDualStack would allocate now,
// or the error it would give, and then both addresses are zero. A static
// address is refused as the real call refuses it; one the store holds
// already is ErrAllocated. With a random strategy the real call may choose
// other addresses.
func (d DryRun) AllocateDualStack(ctx context.Context, owner ipaddress.ParentRef, v4, v6 netip.Addr) (ipv4, ipv6 netip.Addr, err error) {
	if err := d.checkOpen(); err != nil {
		return ipv4, ipv6, err
	}
	reqs := []request{{family: ipaddress.IPv4, addr: v4}, {family: ipaddress.IPv6, addr: v6}}
	if err := validateStatic(reqs); err != nil {
		return ipv4, ipv6, err
	}
	var out results
	if err := d.a.allocate(ctx, owner, reqs, true, &out); err != nil {
		return ipv4, ipv6, err
	}
	// The index may not know yet of a record the store holds, which the
	// store would refuse to create again.
	for _, r := range reqs {
		if !r.addr.IsValid() {
			continue
		}
		if _, err := d.a.st.GetAddress(ctx, r.addr); err == nil {
			return ipv4, ipv6, ErrAllocated
		} else if !isNotFound(err) {
			return ipv4, ipv6, err
		}
	}
	return out[0].Addr, out[1].Addr, nil
}

// EnsureDualStack returns the pair EnsureDualStack would return now: of
// each family owner holds, its address of lowest revision; for the family
// it lacks, the one AllocateNext would choose; when it holds neither, the
// pair AllocateDualStack would choose. Should the family it lacks fail,
// the one it holds is returned with the error; on any other error both
// are zero. With a random strategy the real call may choose others.
func (d DryRun) EnsureDualStack(ctx context.Context, owner ipaddress.ParentRef) (ipv4, ipv6 netip.Addr, err error) {
	if err := d.checkOpen(); err != nil {
		return ipv4, ipv6, err
	}
	recs, err := d.a.AddressesOf(ctx, owner) // validates owner
	if err != nil {
		return ipv4, ipv6, err
	}
	held4, has4 := oldestOf(recs, ipaddress.IPv4)
	held6, has6 := oldestOf(recs, ipaddress.IPv6)
	switch {
	case has4 && has6:
		return held4.Addr, held6.Addr, nil
	case has4:
		next, err := d.AllocateNext(ctx, ipaddress.IPv6, owner)
		if err != nil {
			return held4.Addr, ipv6, lackingError(owner, held4.Addr, ipaddress.IPv6, err)
		}
		return held4.Addr, next, nil
	case has6:
		next, err := d.AllocateNext(ctx, ipaddress.IPv4, owner)
		if err != nil {
			return ipv4, held6.Addr, lackingError(owner, held6.Addr, ipaddress.IPv4, err)
		}
		return next, held6.Addr, nil
	}
	return d.AllocateDualStack(ctx, owner, netip.Addr{}, netip.Addr{})
}

// Allocate reports whether Allocate(addr, owner) would succeed now.
func (d DryRun) Allocate(ctx context.Context, addr netip.Addr, owner ipaddress.ParentRef) error {
	if err := d.checkOpen(); err != nil {
		return err
	}
	if err := ipaddress.ValidateAddr(addr); err != nil {
		return err
	}
	var out results
	if err := d.a.allocate(ctx, owner, []request{{addr: addr}}, true, &out); err != nil {
		return err
	}
	if _, err := d.a.st.GetAddress(ctx, addr); err == nil {
		return ErrAllocated
	} else if !isNotFound(err) {
		return err
	}
	return nil
}

// CreateCIDR validates a CIDR as CreateCIDR would.
func (d DryRun) CreateCIDR(ctx context.Context, name string, prefixes ...netip.Prefix) error {
	if err := d.checkOpen(); err != nil {
		return err
	}
	c := cidrset.CIDR{Name: name, Prefixes: prefixes}
	if err := c.Validate(); err != nil {
		return err
	}
	if err := d.a.admitCIDR(ctx, nil, c); err != nil {
		return err
	}
	if _, err := d.a.st.GetCIDR(ctx, name); err == nil {
		return &ExistsError{Kind: "CIDR", Name: name}
	} else if !isNotFound(err) {
		return err
	}
	return nil
}

// UpdateCIDR returns the CIDR UpdateCIDR would store now, or the error it
// would give: a CIDR that does not exist, a change cidrset.ValidateUpdate
// refuses, or one the admission checks refuse. The CIDR returned has the
// stored one's revision, not the one the update would give it.
func (d DryRun) UpdateCIDR(ctx context.Context, name string, prefixes ...netip.Prefix) (cidrset.CIDR, error) {
	if err := d.checkOpen(); err != nil {
		return cidrset.CIDR{}, err
	}
	old, err := d.a.st.GetCIDR(ctx, name)
	if err != nil {
		return cidrset.CIDR{}, cidrError(name, err)
	}
	return d.a.checkUpdate(ctx, old, prefixes)
}

// DeleteCIDR tells whether deleting the CIDR now would remove it at once,
// and if not which addresses would hold it.
func (d DryRun) DeleteCIDR(ctx context.Context, name string) (finalizer.Decision, error) {
	if err := d.checkOpen(); err != nil {
		return finalizer.Decision{}, err
	}
	c, err := d.a.st.GetCIDR(ctx, name)
	if err != nil {
		return finalizer.Decision{}, cidrError(name, err)
	}
	if err := d.a.WaitRevision(ctx, c.Revision); err != nil {
		return finalizer.Decision{}, err
	}
	c.Terminating = true
	return finalizer.DecideIn(view{d.a}, c), nil
}

// ExistsError names what exists already. It matches ErrExists. CreateCIDR
// and its dry run return one for a name a CIDR has.
type ExistsError struct{ Kind, Name string }

// Error reads "KIND NAME already exists".
func (e *ExistsError) Error() string { return e.Kind + " " + e.Name + " already exists" }

// Is matches ErrExists.
func (e *ExistsError) Is(target error) bool { return target == ErrExists }
