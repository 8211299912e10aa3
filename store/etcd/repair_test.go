package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

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
		prefix := fmt.Sprintf("/repair-%d", trial)
		st1, err := New(c.newClient(t), WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		st2, err := New(c.newClient(t), WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		return st1, st2, func() { st1.Close(); st2.Close() }
	})
}

// SPEC §6 / the package doc: with DryRun a pass reports the same findings
// and changes nothing; over etcd the store's revision must not move, with
// leaks, wrong references, missing records in a live and in a Terminating
// CIDR.
func TestRepairDryRunOverEtcdWritesNothing(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := c.newClient(t)
	st, err := New(cli, WithPrefix("/dry"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, err := allocator.New(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
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
