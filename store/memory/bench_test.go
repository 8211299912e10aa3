package memory_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/memory"
)

// BenchmarkCreateDelete is the store's share of one allocation and release.
func BenchmarkCreateDelete(b *testing.B) {
	ctx := context.Background()
	st := memory.New()
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "bench"}
	// A store of realistic size: maps that empty and refill on every
	// iteration behave differently.
	fill := make([]ipaddress.IPAddress, 1<<16)
	for i := range fill {
		fill[i] = ipaddress.IPAddress{Addr: netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), Parent: ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: fmt.Sprint("svc-", i)}}
	}
	if _, err := st.CreateAddresses(ctx, fill); err != nil {
		b.Fatal(err)
	}
	recs := make([]ipaddress.IPAddress, 1)
	b.ReportAllocs()
	for b.Loop() {
		recs[0] = ipaddress.IPAddress{Addr: netip.AddrFrom4([4]byte{10, 0, 0, 1}), Parent: owner}
		if _, err := st.CreateAddresses(ctx, recs); err != nil {
			b.Fatal(err)
		}
		if _, _, err := st.DeleteAddress(ctx, recs[0].Addr); err != nil {
			b.Fatal(err)
		}
	}
}
