package etcd

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/storetest"
)

// TestConformance runs the store conformance suite against one member; each
// subtest gets a store with a fresh key prefix.
func TestConformance(t *testing.T) {
	c := startCluster(t, 1)
	cli := c.newClient(t)
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := New(cli, WithPrefix(fmt.Sprintf("/conformance/%d", n.Add(1))))
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
