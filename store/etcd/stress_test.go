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
