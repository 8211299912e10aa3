package finalizer_test

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/netipam/netipam/finalizer"
)

// A store keeps a CIDR with two prefixes of one family (written before
// validation tightened, or by another writer; see store.CheckCIDR), which
// may overlap. Its Blocking still ascends and names each address once.
func TestBlockingAscendsOnceForOverlappingPrefixesOfOneCIDR(t *testing.T) {
	target := cidr("x", 5, true, "10.0.0.0/23", "10.0.0.128/25")
	d := finalizer.Decide(target, nil, usedAt("10.0.0.5", "10.0.0.130", "10.0.1.5"))
	want := []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.130"), netip.MustParseAddr("10.0.1.5")}
	if d.Remove || !slices.Equal(d.Blocking, want) || d.More {
		t.Fatalf("Decide = %+v, want blocked by %v, in that order, once each", d, want)
	}
}
