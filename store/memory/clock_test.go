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

// A nil Option, like WithClock(nil), leaves the store as New makes it: an
// option list built conditionally must not panic.
func TestNewIgnoresANilOption(t *testing.T) {
	ctx := context.Background()
	st := memory.New(nil, memory.WithClock(nil))
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "d", Name: "x"}
	if _, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.1"), Parent: owner}}); err != nil {
		t.Fatal(err)
	}
}

// A clock outside what a record keeps stamps the nearest end, 1970 or
// 2106, as WithClock says.
func TestAClockOutOfRangeStampsTheNearestEnd(t *testing.T) {
	ctx := context.Background()
	owner := ipaddress.ParentRef{Resource: "services", Namespace: "d", Name: "x"}
	for _, c := range []struct{ clock, want time.Time }{
		{time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(0, 0)},
		{time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), time.Unix(1<<32-1, 0)},
	} {
		st := memory.New(memory.WithClock(func() time.Time { return c.clock }))
		recs, err := st.CreateAddresses(ctx, []ipaddress.IPAddress{{Addr: netip.MustParseAddr("10.0.0.1"), Parent: owner}})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := st.GetAddress(ctx, recs[0].Addr); !recs[0].Created.Equal(c.want) || !got.Created.Equal(c.want) {
			t.Errorf("clock %v: created %v, read back %v; want %v", c.clock, recs[0].Created, got.Created, c.want)
		}
	}
}
