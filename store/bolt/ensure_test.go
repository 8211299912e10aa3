package bolt_test

import (
	"testing"

	"github.com/netipam/netipam/internal/stress"
	"github.com/netipam/netipam/store"
)

// allocator.EnsureNext over bolt, two allocators on one store: calls at
// once for one owner agree on one address (see stress.EnsureNextAgrees).
func TestEnsureNextOverBoltCallsAtOnceAgreeOnOneAddress(t *testing.T) {
	stress.EnsureNextAgrees(t, 10, 4, func(int) (store.Store, store.Store, func()) {
		st := mustOpen(t, tempPath(t))
		return st, st, func() { st.Close() }
	})
}
