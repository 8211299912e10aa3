package allocator_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
)

// AddressesOf and ReleaseOwner refuse an owner Allocate would refuse, with
// Allocate's error, and neither read nor release anything for it: even
// when the store holds a record of that owner, written past the allocator.
func TestOwnerCallsRefuseAnOwnerAllocateRefuses(t *testing.T) {
	ctx := context.Background()
	for _, bad := range []ipaddress.ParentRef{
		{},
		{Resource: "services", Namespace: "default"},
		{Resource: "Services", Namespace: "default", Name: "web"},
		{Resource: "services", Namespace: "default", Name: "Bad_Name"},
		{Resource: "services", Namespace: "default/x", Name: "web"},
		{Group: "Bad.Group", Resource: "services", Name: "web"},
		{Resource: "services", Namespace: "default", Name: strings.Repeat("n", 254)},
	} {
		a, st := newAllocator(t, []string{"c=10.0.0.0/24"})
		want := bad.Validate()
		if want == nil {
			t.Fatalf("%#v: the case is a valid owner", bad)
		}
		if _, err := a.Allocate(ctx, ip("10.0.0.5"), bad); err == nil || err.Error() != want.Error() {
			t.Fatalf("Allocate(%#v) = %v, want %v", bad, err, want)
		}
		// The store takes any owner: a record of this one, made directly.
		if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: ip("10.0.0.7"), Parent: bad}}); err != nil {
			t.Fatal(err)
		}
		var fe *ipaddress.FieldError
		recs, err := a.AddressesOf(ctx, bad)
		if !errors.Is(err, allocator.ErrInvalid) || !errors.As(err, &fe) || err.Error() != want.Error() || recs != nil {
			t.Errorf("AddressesOf(%#v) = %v, %v; want no records and %v", bad, recs, err, want)
		}
		released, err := a.ReleaseOwner(ctx, bad)
		if !errors.Is(err, allocator.ErrInvalid) || !errors.As(err, &fe) || err.Error() != want.Error() || released != nil {
			t.Errorf("ReleaseOwner(%#v) = %v, %v; want nothing released and %v", bad, released, err, want)
		}
		if rec, err := st.GetAddress(ctx, ip("10.0.0.7")); err != nil || rec.Parent != bad {
			t.Errorf("10.0.0.7 after the refusals: %+v, %v; want it still held by %#v", rec, err, bad)
		}
	}
}
