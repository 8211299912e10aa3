package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/netipam/netipam/store"
)

// A CreateCIDR that fails with an error other than store.ErrOutcomeUnknown
// has created nothing, whenever its ctx ends: the store's own writes keep
// that rule (an answer lost in flight is ErrOutcomeUnknown), and the
// allocator's call must keep it too, also when its ctx ends after the
// write, while it waits for its watch to show it.
func TestACreateCIDRThatFailsWithItsContextCreatedNothing(t *testing.T) {
	ctx := testCtx(t, 3*time.Minute)
	c := startCluster(t, 1)
	a := newAllocators(t, ctx, c, "/cidrwrite", 1, nil)[0]
	var untold []string
	for i := range 300 {
		name := fmt.Sprintf("c-%d", i)
		cctx, cancel := context.WithTimeout(ctx, tinyTimeout(i))
		_, err := a.CreateCIDR(cctx, name, netip.MustParsePrefix("10.0.0.0/24"))
		cancel()
		if err == nil || errors.Is(err, store.ErrOutcomeUnknown) {
			continue
		}
		if _, gerr := a.Store().GetCIDR(ctx, name); gerr == nil {
			untold = append(untold, fmt.Sprintf("%s (%v)", name, err))
		}
	}
	if len(untold) > 0 {
		t.Errorf("%d CreateCIDR calls failed with neither ErrOutcomeUnknown nor nothing written; first: %s", len(untold), untold[0])
	}
}
