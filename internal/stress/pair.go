package stress

import (
	"context"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/store"
)

// allocatorPair returns an allocator over each of st1 and st2 (the second
// with opts), as two apiservers sharing a store, and has the first create
// CIDR name of prefixes, which the second's index has shown when it
// returns.
func allocatorPair(ctx context.Context, t *testing.T, st1, st2 store.Store, name string, prefixes []netip.Prefix, opts ...allocator.Option) (a1, a2 *allocator.Allocator) {
	t.Helper()
	a1, err := allocator.New(ctx, st1)
	if err != nil {
		t.Fatal(err)
	}
	a2, err = allocator.New(ctx, st2, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c, err := a1.CreateCIDR(ctx, name, prefixes...)
	if err != nil {
		t.Fatal(err)
	}
	if err := a2.WaitRevision(ctx, c.Revision); err != nil {
		t.Fatal(err)
	}
	return a1, a2
}
