package finalizer

import (
	"context"
	"errors"
	"iter"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go4.org/netipx"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store"
)

// View is what the reconciler reads besides the store: an allocator's index
// of it.
type View interface {
	// WaitRevision blocks until the view reflects the store at revision rev
	// or later.
	WaitRevision(ctx context.Context, rev int64) error
	// Overlapping returns the CIDRs the view knows (in any state) with a
	// prefix that shares an address with p. Only these can cover p, so a
	// decision costs the same however many other CIDRs there are.
	Overlapping(p netip.Prefix) []cidrset.CIDR
	// Used yields the allocated addresses inside r as ascending, disjoint
	// ranges (adjacent ones need not be merged). A caller may stop early,
	// and the view may hold a lock while it yields: the loop must not call
	// the view.
	Used(r netipx.IPRange) iter.Seq[netipx.IPRange]
}

// DecideIn is Decide for target with the CIDRs and addresses of v: the
// same decision as over every CIDR v knows, since only the ones
// overlapping target can cover it. A nil v sees no address: the decision
// is Unknown and keeps the CIDR.
func DecideIn(v View, target cidrset.CIDR) Decision {
	if v == nil {
		return Decision{Unknown: true}
	}
	var others []cidrset.CIDR
	for _, p := range target.Prefixes {
		others = append(others, v.Overlapping(p)...)
	}
	// A dual-stack CIDR may overlap both prefixes: list it once.
	byName := func(a, b cidrset.CIDR) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(others, byName)
	others = slices.CompactFunc(others, func(a, b cidrset.CIDR) bool { return a.Name == b.Name })
	return Decide(target, others, v.Used)
}

// Reconciler applies Decide to a CIDR in a store.
type Reconciler struct {
	Store store.Store
	View  View
}

// Result is the outcome of Reconcile.
type Result struct {
	Decision
	// Removed is true when the CIDR is gone from the store (removed now, or
	// already gone).
	Removed bool
	// CIDR is the CIDR as last read; zero when it was already gone.
	CIDR cidrset.CIDR
}

// viewWait bounds how long a retry waits for the view to reach the
// revision at which the store saw a fence broken.
const viewWait = 5 * time.Second

// maxAttempts bounds retries after a fence failed because another writer
// changed a CIDR the decision read.
const maxAttempts = 20

// Reconcile removes the CIDR named name if it is Terminating and Decide
// allows it. The removal is fenced on the CIDR's revision and on every live
// CIDR the decision relied on, so an allocation or deletion racing with it
// makes it retry rather than orphan an address. A CIDR that is not
// Terminating is left alone. A Reconciler without a Store or a View
// cannot decide: it reads and removes nothing and returns an
// *ipaddress.FieldError naming the field (it matches ipaddress.ErrInvalid).
func (r Reconciler) Reconcile(ctx context.Context, name string) (Result, error) {
	switch {
	case r.Store == nil:
		return Result{}, &ipaddress.FieldError{Field: "Store", Required: true, Detail: "a Reconciler needs a store to read and remove CIDRs"}
	case r.View == nil:
		return Result{}, &ipaddress.FieldError{Field: "View", Required: true, Detail: "a Reconciler needs a view to see the allocated addresses"}
	}
	for attempt := 0; ; attempt++ {
		c, err := r.Store.GetCIDR(ctx, name)
		if errors.Is(err, store.ErrNotFound) {
			return Result{Decision: Decision{Remove: true}, Removed: true}, nil
		}
		if err != nil {
			return Result{}, err
		}
		if !c.Terminating {
			return Result{CIDR: c}, nil
		}
		if err := r.View.WaitRevision(ctx, c.Revision); err != nil {
			return Result{}, err
		}
		d := DecideIn(r.View, c)
		if !d.Remove {
			return Result{Decision: d, CIDR: c}, nil
		}
		err = r.Store.DeleteCIDR(ctx, name, c.Revision, d.Fences...)
		switch {
		case err == nil, errors.Is(err, store.ErrNotFound):
			return Result{Decision: d, Removed: true, CIDR: c}, nil
		case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrFenced):
			if attempt >= maxAttempts {
				return Result{}, err
			}
			// Another writer changed a CIDR we read; let the view catch
			// up, to where the store saw the fence broken if it says:
			// deciding again on the same view would fail the same way.
			var fe *store.FencedError
			if errors.As(err, &fe) && fe.Seen > 0 {
				// Bounded apart from ctx: a view that does not get there
				// (a broken watch) is retried as before.
				wctx, cancel := context.WithTimeout(ctx, viewWait)
				err := r.View.WaitRevision(wctx, fe.Seen)
				cancel()
				if err == nil {
					continue
				}
				if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
					return Result{}, err
				}
			}
			select {
			case <-ctx.Done():
				return Result{}, ctx.Err()
			case <-time.After(time.Duration(attempt+1) * time.Millisecond):
			}
		default:
			return Result{}, err
		}
	}
}
