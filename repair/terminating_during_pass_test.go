package repair_test

import (
	"errors"
	"testing"
	"time"

	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
)

// SPEC §4 (a Terminating CIDR is not removed while an address inside it
// is held) with §6 (a consumer address without a record gets one): a
// CIDR that turns Terminating after the pass read the CIDRs, while the
// pass is checking a leaked record inside it, must not be removed by the
// pass's cleanup of that record before the consumer's unrecorded address
// inside it has its record. Another apiserver deleting the CIDR mid-pass
// is what every cluster renumbering does.
func TestLeakCleanupNeverRemovesACIDRTurnedTerminatingUnderAnUnrecordedConsumerAddress(t *testing.T) {
	e := newEnv(t, map[string][]string{"old": {"10.0.0.0/24"}})
	e.allocate("10.0.0.200", svc("gone")) // the only record in old: a leak
	e.clock.Advance(time.Hour)
	// svc c holds 10.0.0.5, which has no record (lost).
	r := &repair.Repairer{Allocator: e.a, Now: e.clock.Now,
		Consumers: deletingOnExists{repair.NewStatic(consumer(svc("c"), "10.0.0.5")), e.a, "old"}}
	rep, err := r.Run(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range rep.Events {
		t.Log(ev)
	}
	_, recorded := e.record("10.0.0.5")
	_, cerr := e.st.GetCIDR(e.ctx, "old")
	if errors.Is(cerr, store.ErrNotFound) || !recorded {
		t.Fatalf("after the pass: CIDR old removed=%v (%v), 10.0.0.5 of %s recorded=%v: the pass let old go under a consumer address it had not recorded yet",
			errors.Is(cerr, store.ErrNotFound), cerr, svc("c"), recorded)
	}
}
