package allocator

import (
	"context"
	"errors"
	"net/netip"
	"slices"

	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/store"
)

// CIDRs returns the CIDRs the allocator knows, sorted by name.
func (a *Allocator) CIDRs() []cidrset.CIDR {
	if a.mu == nil {
		return nil // not made by New
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	all := a.index.All()
	out := make([]cidrset.CIDR, len(all))
	for i, c := range all {
		out[i] = c.Clone()
	}
	return out
}

// GetCIDR returns the CIDR named name, as the allocator knows it.
func (a *Allocator) GetCIDR(name string) (cidrset.CIDR, error) {
	if a.mu == nil {
		return cidrset.CIDR{}, &NotFoundError{Kind: "CIDR", Name: name} // not made by New
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.index.Get(name)
	if !ok {
		return cidrset.CIDR{}, &NotFoundError{Kind: "CIDR", Name: name}
	}
	return c.Clone(), nil
}

// NotFoundError names what was not found. It matches ErrNotFound. Every
// call that names a CIDR (GetCIDR, Usage, UpdateCIDR, DeleteCIDR and the
// dry run's) returns one for a CIDR that does not exist.
type NotFoundError struct{ Kind, Name string }

// Error reads "KIND NAME not found".
func (e *NotFoundError) Error() string { return e.Kind + " " + e.Name + " not found" }

// Is matches ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }

// cidrError is err, the store's answer to a call on the CIDR named name,
// with a missing CIDR made a *NotFoundError and a taken name an
// *ExistsError, as GetCIDR, Usage and the dry run give them: one type
// whichever call finds it. An answer that may not hold (ErrOutcomeUnknown)
// is returned as is.
func cidrError(name string, err error) error {
	switch {
	case err == nil, errors.Is(err, store.ErrOutcomeUnknown):
		return err
	case isNotFound(err):
		return &NotFoundError{Kind: "CIDR", Name: name}
	case errors.Is(err, store.ErrExists):
		return &ExistsError{Kind: "CIDR", Name: name}
	}
	return err
}

// CreateCIDR creates a CIDR serving prefixes (one, or one per family). It
// may overlap, or equal, existing CIDRs: addresses stay unique across all.
// A new CIDR may unblock the deletion of a Terminating one it covers.
//
// It returns once the allocator's index shows the CIDR, so that the
// allocator serves from it at once; but once the store has the CIDR, the
// call has succeeded: if ctx ends while the index lags, it returns the
// CIDR and nil, and WaitRevision(ctx, c.Revision) waits for the index.
func (a *Allocator) CreateCIDR(ctx context.Context, name string, prefixes ...netip.Prefix) (cidrset.CIDR, error) {
	if err := a.checkOpen(); err != nil {
		return cidrset.CIDR{}, err
	}
	c := cidrset.CIDR{Name: name, Prefixes: prefixes}
	if err := c.Validate(); err != nil {
		return cidrset.CIDR{}, err
	}
	if err := a.admitCIDR(ctx, nil, c); err != nil {
		return cidrset.CIDR{}, err
	}
	created, err := a.st.CreateCIDR(ctx, c)
	if err != nil {
		return cidrset.CIDR{}, cidrError(name, err)
	}
	a.cfg.logger.Info("CIDR created", "cidr", name, "prefixes", prefixes)
	return created, a.settleWrite(ctx, created)
}

// settleWrite waits for the index to show c, just written, and re-checks
// the Terminating CIDRs it may unblock. The write stands whatever happens
// here: an ended ctx is no error of the call (the watch, applying c, has
// the background reconciler re-check them); Close is, as documented.
func (a *Allocator) settleWrite(ctx context.Context, c cidrset.CIDR) error {
	if err := a.WaitRevision(ctx, c.Revision); err != nil {
		if errors.Is(err, ErrClosed) {
			return err
		}
		return nil
	}
	a.reconcileCoveredBy(ctx, c)
	return nil
}

func (a *Allocator) admitCIDR(ctx context.Context, old *cidrset.CIDR, c cidrset.CIDR) error {
	for _, check := range a.cfg.admit {
		if err := check(ctx, old, c); err != nil {
			return err
		}
	}
	return nil
}

// UpdateCIDR changes the prefixes of a CIDR. The only change allowed is
// single-stack to dual-stack with the first prefix unchanged
// (cidrset.ValidateUpdate). As CreateCIDR, it succeeds once the store has
// the change, if ctx ends while the index lags.
func (a *Allocator) UpdateCIDR(ctx context.Context, name string, prefixes ...netip.Prefix) (cidrset.CIDR, error) {
	if err := a.checkOpen(); err != nil {
		return cidrset.CIDR{}, err
	}
	for {
		old, err := a.st.GetCIDR(ctx, name)
		if err != nil {
			return cidrset.CIDR{}, cidrError(name, err)
		}
		got, err := a.updateCIDRFrom(ctx, old, prefixes)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		return got, err
	}
}

// updateCIDRFrom gives old, as read from the store, prefixes, if it is
// still at old's revision: an error matching store.ErrConflict if it
// changed since, for the caller to read it again and decide anew.
func (a *Allocator) updateCIDRFrom(ctx context.Context, old cidrset.CIDR, prefixes []netip.Prefix) (cidrset.CIDR, error) {
	upd, err := a.checkUpdate(ctx, old, prefixes)
	if err != nil {
		return cidrset.CIDR{}, err
	}
	got, err := a.st.UpdateCIDR(ctx, upd)
	if err != nil {
		return cidrset.CIDR{}, cidrError(old.Name, err)
	}
	return got, a.settleWrite(ctx, got)
}

// checkUpdate returns old given prefixes, to be stored, if UpdateCIDR may
// make it so: the change cidrset.ValidateUpdate allows, and the admission
// checks admit. UpdateCIDR and its dry run decide by it alike.
func (a *Allocator) checkUpdate(ctx context.Context, old cidrset.CIDR, prefixes []netip.Prefix) (cidrset.CIDR, error) {
	upd := old.Clone()
	upd.Prefixes = slices.Clone(prefixes)
	if err := cidrset.ValidateUpdate(old, upd); err != nil {
		return cidrset.CIDR{}, err
	}
	if err := a.admitCIDR(ctx, &old, upd); err != nil {
		return cidrset.CIDR{}, err
	}
	return upd, nil
}

// DeleteCIDR requests the deletion of a CIDR: it is marked Terminating at
// once (from then on it serves no new allocation, in this or any allocator
// sharing the store) and removed as soon as no address would be orphaned.
// It returns nil when the CIDR is gone, or a *DeletionBlockedError (matching
// ErrDeletionBlocked) naming the addresses that hold it; the CIDR then stays
// Terminating and is removed by the allocator once they are released or a
// covering CIDR appears. The CIDR it marked may be removed, and another of
// that name created, before it decides: that is nil too. When it marked
// the CIDR but could not decide (ctx ended, the store did not answer), it
// returns a *DeletionPendingError: the mark stands, and the allocator
// decides in the background.
func (a *Allocator) DeleteCIDR(ctx context.Context, name string) error {
	if err := a.checkOpen(); err != nil {
		return err
	}
	var marked cidrset.CIDR // the CIDR Terminating, as the store last gave it
	for {
		c, err := a.st.GetCIDR(ctx, name)
		if err != nil {
			return cidrError(name, err)
		}
		if c.Terminating {
			marked = c
			break
		}
		c.Terminating = true
		marked, err = a.st.UpdateCIDR(ctx, c)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return cidrError(name, err)
		}
		a.cfg.logger.Info("CIDR terminating", "cidr", name)
		break
	}
	res, err := a.reconcile(ctx, name)
	if err != nil {
		// The watch, applying the mark, has the background reconciler
		// decide; this call cannot wait for it.
		return &DeletionPendingError{CIDR: name, Err: err}
	}
	if res.Removed {
		if res.CIDR.Revision == 0 {
			// Removed by another writer first: the index may still hold
			// the copy marked, which the store no longer does.
			a.forgetRemoved(marked)
		}
		a.cfg.logger.Info("CIDR removed", "cidr", name)
		return nil
	}
	if !res.CIDR.Terminating {
		// No one clears the mark: the CIDR marked above is gone, and
		// another writer has created one of that name since.
		a.cfg.logger.Info("CIDR removed, and created again since", "cidr", name)
		return nil
	}
	return &DeletionBlockedError{CIDR: name, Blocking: res.Blocking, More: res.More}
}

// reconcileCoveredBy re-checks now the Terminating CIDRs that c, just
// created or given a prefix, overlaps: no other can be unblocked by it.
func (a *Allocator) reconcileCoveredBy(ctx context.Context, c cidrset.CIDR) {
	a.mu.Lock()
	names := a.terminatingOverlappingLocked(c)
	a.mu.Unlock()
	for _, name := range names {
		res, err := a.reconcile(ctx, name)
		switch {
		case err != nil:
			a.cfg.logger.Warn("reconciling terminating CIDR", "cidr", name, "err", err)
			a.recheckLater(name)
		case res.Removed:
			a.cfg.logger.Info("CIDR removed", "cidr", name)
		}
	}
}

// terminatingOverlappingLocked returns the names of the Terminating CIDRs
// that overlap a prefix of c, sorted, c itself left out.
func (a *Allocator) terminatingOverlappingLocked(c cidrset.CIDR) []string {
	var out []string
	for _, p := range c.Prefixes {
		for _, o := range a.index.Overlapping(p) {
			if o.Terminating && o.Name != c.Name {
				out = append(out, o.Name)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// EnsureDefault makes sure the default CIDR (cidrset.DefaultName) exists
// with prefixes, creating it if missing. The one change it makes to an
// existing default CIDR is single- to dual-stack, when the configuration
// adds the other family and the first prefix matches; any other difference
// is ErrDefaultMismatch and the stored CIDR is kept. Prefixes that could
// not make a CIDR (two of one family, say) are ErrInvalid, whatever is
// stored. A default CIDR being deleted is returned as it is, Terminating,
// serving nothing: SPEC §5 asks only that it exist. Once its deletion
// completes, EnsureDefault creates it again.
func (a *Allocator) EnsureDefault(ctx context.Context, prefixes ...netip.Prefix) (cidrset.CIDR, error) {
	if err := a.checkOpen(); err != nil {
		return cidrset.CIDR{}, err
	}
	if err := (cidrset.CIDR{Name: cidrset.DefaultName, Prefixes: prefixes}).Validate(); err != nil {
		return cidrset.CIDR{}, err
	}
	for {
		cur, err := a.st.GetCIDR(ctx, cidrset.DefaultName)
		if isNotFound(err) {
			c, err := a.CreateCIDR(ctx, cidrset.DefaultName, prefixes...)
			if errors.Is(err, store.ErrExists) {
				continue // another allocator created it first
			}
			return c, err
		}
		if err != nil {
			return cidrset.CIDR{}, err
		}
		if cur.Terminating || slices.Equal(cur.Prefixes, prefixes) {
			return cur, nil
		}
		if len(cur.Prefixes) == 1 && len(prefixes) == 2 && cur.Prefixes[0] == prefixes[0] {
			// From cur, not read again: changed since (made dual-stack by
			// another allocator, say), it is decided anew above, where a
			// configuration it no longer matches is ErrDefaultMismatch.
			c, err := a.updateCIDRFrom(ctx, cur, prefixes)
			if isNotFound(err) || errors.Is(err, store.ErrConflict) {
				continue // removed or changed since it was read
			}
			if err != nil {
				return cidrset.CIDR{}, err
			}
			return c, nil
		}
		return cur, ErrDefaultMismatch
	}
}
