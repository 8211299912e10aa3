package allocator_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"go4.org/netipx"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/cidrset"
)

// An Option holds what it was given when it was made: a caller that
// changes its slice after, to make another Option from it, changes no
// Option made before.
func TestOptionsKeepTheirArgumentsAsGiven(t *testing.T) {
	ctx := context.Background()
	ranges := []netipx.IPRange{netipx.IPRangeFrom(ip("10.0.0.1"), ip("10.0.0.10"))}
	exclude := allocator.WithExcluded(ranges...)
	ranges[0] = netipx.IPRangeFrom(ip("10.0.0.20"), ip("10.0.0.20"))

	refuse := errors.New("refused")
	checks := []allocator.Admission{func(context.Context, *cidrset.CIDR, cidrset.CIDR) error { return nil }}
	admit := allocator.WithAdmission(checks...)
	checks[0] = func(context.Context, *cidrset.CIDR, cidrset.CIDR) error { return refuse }

	a, st := newAllocator(t, nil, exclude, admit)
	// Past the allocator, and its admission, which the last check is for.
	if _, err := st.CreateCIDR(ctx, cidrset.CIDR{Name: "c", Prefixes: []netip.Prefix{pfx("10.0.0.0/24")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Allocate(ctx, ip("10.0.0.5"), svc("x")); !errors.Is(err, allocator.ErrExcluded) {
		t.Errorf("Allocate(10.0.0.5), excluded when the Option was made: %v, want ErrExcluded", err)
	}
	if _, err := a.Allocate(ctx, ip("10.0.0.20"), svc("y")); err != nil {
		t.Errorf("Allocate(10.0.0.20), excluded only after the Option was made: %v", err)
	}
	if _, err := a.CreateCIDR(ctx, "d", pfx("10.1.0.0/24")); err != nil {
		t.Errorf("CreateCIDR with the check the Option was made with, which admits it: %v", err)
	}
}
