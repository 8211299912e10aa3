package etcd

import (
	"fmt"
	"testing"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/netipam/netipam/internal/stress"
	"github.com/netipam/netipam/store"
)

// allocator.EnsureNext over etcd, two allocators on two clients, as two
// nodes' plugins: calls at once for one owner agree on one address (see
// stress.EnsureNextAgrees).
func TestEnsureNextOverEtcdCallsAtOnceAgreeOnOneAddress(t *testing.T) {
	c := startCluster(t, 1, func(cfg *embed.Config) { cfg.UnsafeNoFsync = true })
	stress.EnsureNextAgrees(t, 10, 4, func(trial int) (store.Store, store.Store, func()) {
		return c.twoStores(t, fmt.Sprintf("/ensure-%d", trial))
	})
}
