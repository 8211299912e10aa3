package memory_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/store/memory"
)

// Every write of a store given a clock is stamped by that clock, not only
// the first: the store's own clock, which caches its second and which
// unix reads first, must never stand in for the one given.
func TestEveryWriteIsStampedByTheGivenClock(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	st := memory.New(memory.WithClock(func() time.Time { return clock }))
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "d", Name: "x"}
	for i, a := range []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::1")} {
		clock = clock.Add(time.Hour)
		recs, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: a, Parent: owner}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := st.GetAddress(ctx, a); err != nil || !recs[0].Created.Equal(clock) || !got.Created.Equal(clock) {
			t.Errorf("write %d: created %v, read back %v (%v); want %v", i, recs[0].Created, got.Created, err, clock)
		}
		clock = clock.Add(time.Hour)
		replaced, err := st.ReplaceAddressAt(ctx, ipaddress.IPAddress{Addr: a, Parent: owner}, recs[0].Revision)
		if err != nil || !replaced.Created.Equal(clock) {
			t.Errorf("write %d, replaced: created %v (%v); want %v", i, replaced.Created, err, clock)
		}
	}
}
