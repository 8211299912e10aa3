package admission_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/netipam/netipam/admission"
	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/store/memory"
)

// A GKE-like policy: new Service CIDRs only inside 34.118.224.0/20, never
// over the pod network.
func Example() {
	ctx := context.Background()
	a, err := allocator.New(ctx, memory.New(), allocator.WithAdmission(
		admission.Within(netip.MustParsePrefix("34.118.224.0/20")),
		admission.NotOverlapping(netip.MustParsePrefix("34.118.228.0/22")), // pods
	))
	if err != nil {
		panic(err)
	}
	defer a.Close()

	for _, p := range []string{"34.118.224.0/24", "192.96.0.0/24", "34.118.230.0/24"} {
		_, err := a.CreateCIDR(ctx, "extra", netip.MustParsePrefix(p))
		switch {
		case err == nil:
			fmt.Println(p, "created")
			_ = a.DeleteCIDR(ctx, "extra")
		case errors.Is(err, admission.ErrRejected):
			fmt.Println(err)
		default:
			panic(err)
		}
	}
	// Output:
	// 34.118.224.0/24 created
	// admission rule Within rejected CIDR "extra": prefix 192.96.0.0/24 is not inside any of 34.118.224.0/20
	// admission rule NotOverlapping rejected CIDR "extra": prefix 34.118.230.0/24 overlaps 34.118.228.0/22
}
