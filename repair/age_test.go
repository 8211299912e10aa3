package repair_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store/memory"
)

// A pass reads its clock before it lists the records: a record created in
// between, in the next whole second (an apiserver allocating while repair
// runs), has a stamp later than the pass's now, and its event reports a
// negative age ("created -…ms ago") unless it is held at zero.
// No injected clock: the store and the pass both read time.Now.
func TestARecordCreatedAfterThePassReadItsClockHasNoNegativeAge(t *testing.T) {
	ctx := context.Background()
	a, err := allocator.New(ctx, memory.New())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if _, err := a.CreateCIDR(ctx, "kubernetes", netip.MustParsePrefix("10.96.0.0/28")); err != nil {
		t.Fatal(err)
	}
	gone := ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: "gone"}
	r := &repair.Repairer{
		Allocator: a,
		Consumers: repair.NewStatic(),
		Now: func() time.Time {
			now := time.Now()
			// The interleaving: a concurrent allocation lands after the
			// pass read its clock and before it lists, past a second.
			time.Sleep(now.Truncate(time.Second).Add(time.Second + 50*time.Millisecond).Sub(now))
			if _, err := a.Allocate(ctx, netip.MustParseAddr("10.96.0.5"), gone); err != nil {
				t.Fatal(err)
			}
			return now
		},
	}
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range rep.Events {
		if ev.Age < 0 || strings.Contains(ev.Message, "created -") {
			t.Errorf("%v: Age %v, %q", ev.Kind, ev.Age, ev.Message)
		}
	}
}
