package repair_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
)

// KEP-1880, the finalizer: a Terminating CIDR stays while an address
// needs it. A pass gives a consumer's unrecorded address its record
// "also inside a Terminating CIDR, which then waits for them"; its own
// cleanup of the CIDR's last record (a leak, or a wrong reference) must
// not let the CIDR go first and leave that address in no range.
func TestRepairKeepsATerminatingCIDRAConsumerAddressStillNeeds(t *testing.T) {
	for _, tc := range []struct {
		name      string
		holder    ipaddress.ParentRef // of the record that holds the CIDR
		consumers func() []repair.Consumer
		cleanup   repair.Kind
	}{
		{
			name:   "leak",
			holder: svc("gone"),
			consumers: func() []repair.Consumer {
				return []repair.Consumer{consumer(svc("c"), "10.1.0.9")}
			},
			cleanup: repair.Leak,
		},
		{
			name:   "wrong reference",
			holder: svc("p"),
			consumers: func() []repair.Consumer {
				return []repair.Consumer{consumer(svc("p")), consumer(svc("c"), "10.1.0.9")}
			},
			cleanup: repair.WrongReference,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, map[string][]string{"old": {"10.1.0.0/24"}})
			e.allocate("10.1.0.5", tc.holder)
			if err := e.a.DeleteCIDR(e.ctx, "old"); !errors.Is(err, allocator.ErrDeletionBlocked) {
				t.Fatalf("DeleteCIDR(old) = %v, want blocked by 10.1.0.5", err)
			}
			e.clock.Advance(time.Hour) // past the grace

			dry := e.run(true, tc.consumers()...)
			rep := e.run(false, tc.consumers()...)

			if _, ok := e.record("10.1.0.5"); ok {
				t.Errorf("10.1.0.5 of %s still recorded", tc.holder)
			}
			if r, ok := e.record("10.1.0.9"); !ok || r.Parent != svc("c") {
				t.Errorf("10.1.0.9 = %+v, %v; want recorded for %s", r, ok, svc("c"))
			}
			if _, err := e.st.GetCIDR(e.ctx, "old"); err != nil {
				t.Fatalf("CIDR old after the pass: %v, want it kept, Terminating, for 10.1.0.9", err)
			}
			kinds := func(r repair.Report) []repair.Kind {
				var ks []repair.Kind
				for _, ev := range r.Events {
					ks = append(ks, ev.Kind)
				}
				return ks
			}
			want := []repair.Kind{repair.Repaired, tc.cleanup}
			if got := kinds(rep); !slices.Equal(got, want) {
				t.Errorf("pass: events %v, want %v", got, want)
			}
			if got := kinds(dry); !slices.Equal(got, want) {
				t.Errorf("dry run: events %v, want %v, as the pass", got, want)
			}

			// The consumer's release is what lets the CIDR go.
			if err := e.a.Release(e.ctx, netip.MustParseAddr("10.1.0.9")); err != nil {
				t.Fatal(err)
			}
			if _, err := e.st.GetCIDR(e.ctx, "old"); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("CIDR old after its last address went: %v, want removed", err)
			}
		})
	}
}
