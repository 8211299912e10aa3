package etcd

import (
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/netipam/netipam/internal/stress"
)

// SPEC §3–§5 under churn over etcd, whose watch lags every write: several
// allocators on one store and client, CIDRs created, updated and deleted
// while addresses come and go; see the memory store's stress tests in the
// allocator package and bolt's.
func TestStressEtcdChurn(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	st, err := New(c.newClient(t), WithPrefix("/stress"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v := stress.Run(t, st, stress.Config{
		Allocators: 3, Workers: 4, Duration: stress.Duration(), Seed: stress.Seed(t),
		Excluded: stress.Excluded(), Checkpoints: 2, CloseEvery: 300 * time.Millisecond, Observer: true,
	})
	stress.Report(t, v)
}

// Few CIDR names and allocators replaced often, over etcd: SPEC §5's
// deletion safety (a CIDR removed only when no address would be orphaned)
// while CIDRs of the same names are created, updated and deleted between
// allocations that each allocator decides on a lagging view. The memory
// store's TestStressMemoryLifecycle found a race of this kind.
func TestStressEtcdLifecycle(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	st, err := New(c.newClient(t), WithPrefix("/lifecycle"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v := stress.Run(t, st, stress.Lifecycle(stress.Config{
		Allocators: 3, Workers: 6, Duration: stress.Duration(), Seed: stress.Seed(t),
		Excluded: stress.Excluded(), Checkpoints: 3, CloseEvery: 100 * time.Millisecond, Observer: true,
	}))
	stress.Report(t, v)
}
