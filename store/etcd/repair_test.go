package etcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/internal/stress"
	"github.com/netipam/netipam/ipaddress"
	"github.com/netipam/netipam/repair"
	"github.com/netipam/netipam/store"
)

func repairSvc(name string) ipaddress.ParentRef {
	return ipaddress.ParentRef{Resource: "services", Namespace: "default", Name: name}
}

// SPEC §1/§3 with §6 over etcd, two allocators on two clients: see
// stress.RepairHandOver.
func TestRepairOverEtcdNeverHandsAConsumersAddressToAnother(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	stress.RepairHandOver(t, 10, func(trial int) (store.Store, store.Store, func()) {
		return c.twoStores(t, fmt.Sprintf("/repair-%d", trial))
	})
}

// SPEC §1/§3 with §6 over etcd, two allocators on two clients: see
// stress.RepairRestoreRace.
func TestRepairRestoresOverEtcdRacingAnotherAllocatorRecordEachAddressOnce(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	stress.RepairRestoreRace(t, 10, func(trial int) (store.Store, store.Store, func()) {
		return c.twoStores(t, fmt.Sprintf("/restore-race-%d", trial))
	})
}

// SPEC §6 / the package doc: with DryRun a pass reports the same findings
// and changes nothing; over etcd the store's revision must not move, with
// leaks, wrong references, missing records in a live and in a Terminating
// CIDR.
func TestRepairDryRunOverEtcdWritesNothing(t *testing.T) {
	ctx, cli, _, a := newRepairRig(t, "/dry")
	for name, p := range map[string]string{"live": "10.0.0.0/24", "old": "10.1.0.0/24", "six": "fd00::/64"} {
		if _, err := a.CreateCIDR(ctx, name, netip.MustParsePrefix(p)); err != nil {
			t.Fatal(err)
		}
	}
	must := func(addr string, ref ipaddress.ParentRef) {
		if _, err := a.Allocate(ctx, netip.MustParseAddr(addr), ref); err != nil {
			t.Fatal(err)
		}
	}
	must("10.0.0.5", repairSvc("gone")) // leak
	must("10.0.0.6", repairSvc("b"))    // wrong reference, held by a
	must("10.1.0.9", repairSvc("keep")) // holds old
	must("fd00::9", repairSvc("gone6")) // leak, IPv6
	if err := a.DeleteCIDR(ctx, "old"); !errors.Is(err, allocator.ErrDeletionBlocked) {
		t.Fatal(err)
	}
	rev := func() int64 {
		resp, err := cli.Get(ctx, "/dry/none")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	before := rev()
	r := &repair.Repairer{Allocator: a, DryRun: true, LeakGrace: -1, Consumers: repair.NewStatic(
		repair.Consumer{Ref: repairSvc("a"), Addrs: []string{"10.0.0.6", "10.0.0.7", "fd00::7"}},
		repair.Consumer{Ref: repairSvc("b")},
		repair.Consumer{Ref: repairSvc("keep"), Addrs: []string{"10.1.0.9", "10.1.0.10"}},
	)}
	rep, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range rep.Events {
		t.Log(ev)
	}
	if after := rev(); after != before {
		t.Fatalf("dry run moved the store from revision %d to %d", before, after)
	}
	want := map[repair.Kind]int{repair.Leak: 2, repair.WrongReference: 1, repair.Repaired: 4}
	for k, n := range want {
		if got := rep.Count(k); got != n {
			t.Errorf("%s = %d, want %d", k, got, n)
		}
	}
	for _, ev := range rep.Events {
		if !ev.DryRun {
			t.Errorf("event not marked DryRun: %v", ev)
		}
	}
}

// SPEC §6 over a store holding records it cannot decode (values edited by
// hand): the pass reports each of them as Failed, naming its key, and goes
// on with everything else: a leak is deleted, a missing record restored.
// The unreadable records stay byte for byte as they were, at the same
// revision, and their addresses stay taken; a consumer holding one gets no
// record of its own and no "already allocated", but a Failed saying the
// record cannot be read. Also for a record past the ones the store names
// (store.MaxSkipped), which the pass meets only when it would restore it,
// in a dry run too.
func TestRepairGoesOnBesideRecordsItCannotRead(t *testing.T) {
	ctx, cli, st, a := newRepairRig(t, "/unreadable")
	if _, err := a.CreateCIDR(ctx, "live", netip.MustParsePrefix("10.0.0.0/16")); err != nil {
		t.Fatal(err)
	}
	for addr, ref := range map[string]string{"10.0.0.5": "gone", "10.0.0.9": "c", "10.0.0.10": "d"} {
		if _, err := a.Allocate(ctx, netip.MustParseAddr(addr), repairSvc(ref)); err != nil {
			t.Fatal(err)
		}
	}
	// c's record edited by hand (a space: not what the store writes); d's
	// overwritten with garbage, d being gone too.
	corrupt := map[string]string{
		st.addrKey(netip.MustParseAddr("10.0.0.9")):  `{"v":2, "resource":"services","namespace":"default","name":"c","created":0}`,
		st.addrKey(netip.MustParseAddr("10.0.0.10")): "garbage",
	}
	raw := func() map[string]string {
		out := map[string]string{}
		for key := range corrupt {
			resp, err := cli.Get(ctx, key)
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("reading %s: %v, %v", key, resp, err)
			}
			out[key] = fmt.Sprintf("%q@%d", resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
		}
		return out
	}
	for key, val := range corrupt {
		if _, err := cli.Put(ctx, key, val); err != nil {
			t.Fatal(err)
		}
	}
	before := raw()
	consumers := []repair.Consumer{
		{Ref: repairSvc("a"), Addrs: []string{"10.0.0.6"}}, // missing
		{Ref: repairSvc("c"), Addrs: []string{"10.0.0.9"}}, // unreadable
	}
	pass := func(dry bool) repair.Report {
		t.Helper()
		r := &repair.Repairer{Allocator: a, DryRun: dry, LeakGrace: -1, Consumers: repair.NewStatic(consumers...)}
		rep, err := r.Run(ctx)
		if err != nil {
			t.Fatalf("pass over unreadable records: %v", err)
		}
		for _, ev := range rep.Events {
			t.Log(ev)
		}
		return rep
	}
	// checkUnreadable checks the Failed events of the pass: one per
	// unreadable address of want (address → consumer holding it, or ""),
	// saying it cannot be read, its Err naming the key and counted as an
	// unknown error; and nothing else about those addresses.
	checkUnreadable := func(rep repair.Report, want map[string]string) {
		t.Helper()
		got := map[string]bool{}
		for _, ev := range rep.Events {
			if _, ok := want[ev.Addr]; !ok {
				continue
			}
			if ev.Kind != repair.Failed || got[ev.Addr] || !strings.Contains(ev.Message, "cannot be read") || !strings.Contains(ev.Message, want[ev.Addr]) ||
				!strings.Contains(ev.Message, "left as it is") || ev.ErrorType() != "unknown" {
				t.Errorf("about an unreadable record: %v (type %q)", ev, ev.ErrorType())
			}
			var ce *CorruptError
			if !errors.As(ev.Err, &ce) || !errors.Is(ev.Err, store.ErrCorrupt) || ce.Key != st.addrKey(netip.MustParseAddr(ev.Addr)) {
				t.Errorf("%s: Err %v, want the *CorruptError of its key", ev.Addr, ev.Err)
			}
			got[ev.Addr] = true
		}
		if len(got) != len(want) {
			t.Errorf("unreadable records reported: %v, want %v", got, want)
		}
	}

	dry := pass(true)
	checkUnreadable(dry, map[string]string{"10.0.0.9": "services/default/c", "10.0.0.10": ""})
	if dry.Count(repair.Leak) != 1 || dry.Count(repair.Repaired) != 1 || dry.Count(repair.Failed) != 2 || len(dry.Events) != 4 || dry.Records != 3 {
		t.Fatalf("dry run: %d records, %v; want 3 (2 unreadable) and one Leak, one Repaired, two Failed", dry.Records, dry.Events)
	}

	rep := pass(false)
	checkUnreadable(rep, map[string]string{"10.0.0.9": "services/default/c", "10.0.0.10": ""})
	if rep.Count(repair.Leak) != 1 || rep.Count(repair.Repaired) != 1 || rep.Count(repair.Failed) != 2 || len(rep.Events) != 4 {
		t.Fatalf("pass: %v; want one Leak, one Repaired, two Failed", rep.Events)
	}
	if _, err := st.GetAddress(ctx, netip.MustParseAddr("10.0.0.5")); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the leak 10.0.0.5: %v, want it deleted", err)
	}
	if r, err := st.GetAddress(ctx, netip.MustParseAddr("10.0.0.6")); err != nil || r.Parent != repairSvc("a") {
		t.Errorf("the missing 10.0.0.6: %+v, %v; want a's", r, err)
	}
	if after := raw(); !maps.Equal(after, before) {
		t.Fatalf("unreadable records changed: %v, were %v", after, before)
	}
	for _, addr := range []string{"10.0.0.9", "10.0.0.10"} {
		if _, err := a.Allocate(ctx, netip.MustParseAddr(addr), repairSvc("new")); !errors.Is(err, allocator.ErrAllocated) {
			t.Errorf("allocating the address of an unreadable record, %s: %v, want ErrAllocated", addr, err)
		}
	}
	// Nothing else is left to do.
	again := pass(false)
	if again.Count(repair.Failed) != 2 || len(again.Events) != 2 {
		t.Errorf("second pass: %v, want the two unreadable records only", again.Events)
	}

	// Past the records a listing names: 10.0.1.x, the last held by a
	// consumer, which the pass reports when it would restore it.
	n := store.MaxSkipped + 2
	var last string
	for i := range n {
		last = fmt.Sprintf("10.0.1.%d", i+1)
		if _, err := a.Allocate(ctx, netip.MustParseAddr(last), repairSvc("late")); err != nil {
			t.Fatal(err)
		}
		key := st.addrKey(netip.MustParseAddr(last))
		if _, err := cli.Put(ctx, key, "x"); err != nil {
			t.Fatal(err)
		}
		corrupt[key] = "x"
	}
	before = raw()
	consumers = append(consumers, repair.Consumer{Ref: repairSvc("late"), Addrs: []string{last}})
	for _, dry := range []bool{true, false} {
		rep := pass(dry)
		more, late := 0, 0
		for _, ev := range rep.Events {
			switch {
			case ev.Addr == last:
				late++
				var ce *CorruptError
				if ev.Kind != repair.Failed || ev.Ref != repairSvc("late") || !strings.Contains(ev.Message, "has a record that cannot be read") ||
					!errors.As(ev.Err, &ce) || ce.Key != st.addrKey(netip.MustParseAddr(last)) {
					t.Errorf("dry run %v: the unnamed unreadable record held by late: %v", dry, ev)
				}
			case ev.Kind == repair.Failed && ev.Addr == "":
				more++
				if !strings.Contains(ev.Message, "4 more records cannot be read") || ev.ErrorType() != "unknown" || !errors.Is(ev.Err, store.ErrCorrupt) {
					t.Errorf("dry run %v: the records past the named ones: %v", dry, ev)
				}
			case ev.Kind != repair.Failed:
				t.Errorf("dry run %v: unexpected: %v", dry, ev)
			}
		}
		if late != 1 || more != 1 || rep.Count(repair.Failed) != store.MaxSkipped+2 || rep.Records != 1+2+n {
			t.Errorf("dry run %v: %d records, %d Failed, %d about late's, %d about those unnamed; want %d, %d, 1, 1", dry, rep.Records, rep.Count(repair.Failed), late, more, 1+2+n, store.MaxSkipped+2)
		}
	}
	if after := raw(); !maps.Equal(after, before) {
		t.Fatalf("unreadable records changed: %v, were %v", after, before)
	}
}

// newRepairRig starts a one-member cluster and returns a context of a
// minute, a client, a store on prefix and an allocator over it, all ended
// with the test.
func newRepairRig(t *testing.T, prefix string) (context.Context, *clientv3.Client, *Store, *allocator.Allocator) {
	t.Helper()
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	ctx := testCtx(t, time.Minute)
	cli := c.newClient(t)
	st, err := New(cli, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return ctx, cli, st, a
}
