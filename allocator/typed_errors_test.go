package allocator_test

import (
	"context"
	"errors"
	"testing"

	"github.com/netipam/netipam/allocator"
)

// The typed errors are the same whichever call finds the CIDR missing or
// taken: an embedder that reaches *NotFoundError from GetCIDR, or
// *ExistsError from DryRun().CreateCIDR, reaches it from the calls that
// write too, with the same text (the dry run says what the real call
// would).
func TestCIDRNotFoundAndExistsAreTypedEverywhere(t *testing.T) {
	ctx := context.Background()
	a, _ := newAllocator(t, []string{"kubernetes=10.96.0.0/28"})

	notFound := map[string]error{}
	_, notFound["GetCIDR"] = a.GetCIDR("nope")
	_, notFound["Usage"] = a.Usage("nope")
	notFound["DeleteCIDR"] = a.DeleteCIDR(ctx, "nope")
	_, notFound["UpdateCIDR"] = a.UpdateCIDR(ctx, "nope", pfx("10.1.0.0/24"))
	_, notFound["DryRun().DeleteCIDR"] = a.DryRun().DeleteCIDR(ctx, "nope")
	for call, err := range notFound {
		var nf *allocator.NotFoundError
		if !errors.Is(err, allocator.ErrNotFound) || !errors.As(err, &nf) || nf.Kind != "CIDR" || nf.Name != "nope" {
			t.Errorf("%s of a missing CIDR: %v (%T), want a *NotFoundError for CIDR nope", call, err, err)
		} else if err.Error() != notFound["GetCIDR"].Error() {
			t.Errorf("%s of a missing CIDR: %q, GetCIDR's is %q", call, err, notFound["GetCIDR"])
		}
	}

	_, real := a.CreateCIDR(ctx, "kubernetes", pfx("10.1.0.0/24"))
	dry := a.DryRun().CreateCIDR(ctx, "kubernetes", pfx("10.1.0.0/24"))
	for call, err := range map[string]error{"CreateCIDR": real, "DryRun().CreateCIDR": dry} {
		var ee *allocator.ExistsError
		if !errors.Is(err, allocator.ErrExists) || !errors.As(err, &ee) || ee.Kind != "CIDR" || ee.Name != "kubernetes" {
			t.Errorf("%s of a taken name: %v (%T), want an *ExistsError for CIDR kubernetes", call, err, err)
		}
	}
	if real == nil || dry == nil || real.Error() != dry.Error() {
		t.Errorf("CreateCIDR of a taken name: %v; its dry run: %v", real, dry)
	}
}
