package repair_test

import (
	"context"
	"slices"
	"testing"

	"github.com/netipam/netipam/repair"
)

// Static is a fixed set: neither the consumers given to NewStatic nor
// those List returns share their addresses with it.
func TestStaticSharesNoAddressesWithItsCallers(t *testing.T) {
	ctx := context.Background()
	given := []repair.Consumer{consumer(svc("a"), "10.0.0.5", "10.0.0.6")}
	s := repair.NewStatic(given...)
	given[0].Addrs[0] = "10.0.0.99"

	listed, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.5", "10.0.0.6"}; len(listed) != 1 || !slices.Equal(listed[0].Addrs, want) {
		t.Fatalf("after the caller changed its consumers, List = %v, want one consumer with %v", listed, want)
	}
	listed[0].Addrs[1] = "10.0.0.98"
	listed[0].Addrs = append(listed[0].Addrs[:1], "10.0.0.97")

	again, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"10.0.0.5", "10.0.0.6"}; len(again) != 1 || !slices.Equal(again[0].Addrs, want) {
		t.Fatalf("after the caller changed a listing, List = %v, want one consumer with %v", again, want)
	}
}
