package bolt_test

import (
	"context"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/internal/stress"
	"github.com/netipam/netipam/store/bolt"
)

// SPEC §3–§5 under churn over bolt, whose watch is not the writer's lock:
// see the memory store's stress tests in the allocator package.
func TestStressBoltChurn(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ipam.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v := stress.Run(t, st, stress.Config{
		Allocators: 3, Workers: 4, Duration: stress.Duration(), Seed: stress.Seed(t),
		Excluded: stress.Excluded(), Checkpoints: 2, CloseEvery: 300 * time.Millisecond, Observer: true,
		Revision: st.Revision,
	})
	stress.Report(t, v)
}

// One CIDR name deleted and re-created over and over under a covering
// live CIDR, with allocations fenced on it from several allocators.
func TestStressBoltRecreateSameName(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ipam.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v := stress.Run(t, st, stress.Config{
		Allocators: 2, Workers: 6, Duration: stress.Duration(), Seed: stress.Seed(t),
		Ops: []string{"next4", "release", "create", "delete"}, Names: 1,
		V4: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")},
		Setup: func(ctx context.Context, a *allocator.Allocator) error {
			_, err := a.CreateCIDR(ctx, "base", netip.MustParsePrefix("10.0.0.0/23"))
			return err
		},
		Revision: st.Revision,
	})
	stress.Report(t, v)
}

// Few CIDR names and allocators replaced often, over bolt: SPEC §5's
// deletion safety while CIDRs of the same names are created, updated and
// deleted between allocations (see TestStressMemoryLifecycle, which found
// a race of this kind, and TestStressEtcdLifecycle).
func TestStressBoltLifecycle(t *testing.T) {
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ipam.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v := stress.Run(t, st, stress.Lifecycle(stress.Config{
		Allocators: 3, Workers: 6, Duration: stress.Duration(), Seed: stress.Seed(t),
		Excluded: stress.Excluded(), Checkpoints: 3, CloseEvery: 100 * time.Millisecond, Observer: true,
		Revision: st.Revision,
	}))
	stress.Report(t, v)
}
