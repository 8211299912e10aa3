package allocator_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/netipam/netipam/admission"
	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
	"github.com/netipam/netipam/ipaddress"
)

// refuseUpdatesTo is an admission check that refuses to update a CIDR
// into one holding bad, and admits everything else.
func refuseUpdatesTo(bad netip.Prefix) allocator.Admission {
	return func(_ context.Context, old *cidrset.CIDR, c cidrset.CIDR) error {
		if old != nil && slices.Contains(c.Prefixes, bad) {
			return fmt.Errorf("%w: %s may not be added", admission.ErrRejected, bad)
		}
		return nil
	}
}

// The dry run of UpdateCIDR answers, CIDR or error, what the real call
// then does, and writes nothing: single- to dual-stack, the prefixes unchanged, and a
// Terminating CIDR's are allowed; a CIDR that does not exist, a changed
// prefix, dual- to single-stack, a second prefix of the same family and
// a change the admission checks refuse are not, with the same error.
func TestDryRunUpdateCIDRAnswersAsTheCallWouldAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	bad := pfx("fd00:bad::/120")
	for _, c := range []struct {
		name     string
		cidr     string
		prefixes []netip.Prefix
		want     error // nil: updated to prefixes
	}{
		{"single to dual", "c", []netip.Prefix{pfx("10.0.0.0/24"), pfx("fd00::/120")}, nil},
		{"unchanged", "d", []netip.Prefix{pfx("10.1.0.0/24"), pfx("fd00:1::/120")}, nil},
		{"a Terminating CIDR made dual", "going", []netip.Prefix{pfx("10.2.0.0/24"), pfx("fd00:2::/120")}, nil},
		{"no such CIDR", "nosuch", []netip.Prefix{pfx("10.0.0.0/24"), pfx("fd00::/120")}, allocator.ErrNotFound},
		{"the first prefix changed", "c", []netip.Prefix{pfx("10.9.0.0/24"), pfx("fd00::/120")}, ipaddress.ErrInvalid},
		{"the second prefix changed", "d", []netip.Prefix{pfx("10.1.0.0/24"), pfx("fd00:9::/120")}, ipaddress.ErrInvalid},
		{"dual to single", "d", []netip.Prefix{pfx("10.1.0.0/24")}, ipaddress.ErrInvalid},
		{"two of one family", "c", []netip.Prefix{pfx("10.0.0.0/24"), pfx("10.9.0.0/24")}, ipaddress.ErrInvalid},
		{"refused by admission", "c", []netip.Prefix{pfx("10.0.0.0/24"), bad}, admission.ErrRejected},
	} {
		// The real call changes what the next case would find: each has
		// an allocator of its own, where the real call follows its dry run.
		a, st := newAllocator(t, []string{"c=10.0.0.0/24", "d=10.1.0.0/24,fd00:1::/120", "going=10.2.0.0/24"},
			allocator.WithAdmission(refuseUpdatesTo(bad)))
		mustStatic(t, a, "10.2.0.7", "keeper")
		if err := a.DeleteCIDR(ctx, "going"); err == nil {
			t.Fatal("going was deleted, though 10.2.0.7 holds it")
		}
		before := writtenState(t, a, st, svc("keeper"))
		got, err := a.DryRun().UpdateCIDR(ctx, c.cidr, c.prefixes...)
		wroteNothing(t, c.name, before, a, st, svc("keeper"))
		stored, serr := a.GetCIDR(c.cidr)
		real, rerr := a.UpdateCIDR(ctx, c.cidr, c.prefixes...)
		sameError(t, c.name, err, rerr, c.want)
		if c.want != nil {
			if got.Name != "" || got.Prefixes != nil {
				t.Errorf("%s: the dry run answered %+v with %v; want no CIDR", c.name, got, err)
			}
			continue
		}
		if serr != nil {
			t.Fatal(serr)
		}
		// As the real call stores it, but at the stored revision.
		if got.Revision != stored.Revision {
			t.Errorf("%s: the dry run answered revision %d; the CIDR is at %d", c.name, got.Revision, stored.Revision)
		}
		got.Revision = real.Revision
		if !slices.Equal(got.Prefixes, c.prefixes) || got.Name != real.Name || !slices.Equal(got.Prefixes, real.Prefixes) ||
			got.Terminating != real.Terminating || !got.Created.Equal(real.Created) {
			t.Errorf("%s: the dry run answered %+v; the real call then stored %+v", c.name, got, real)
		}
	}
}
