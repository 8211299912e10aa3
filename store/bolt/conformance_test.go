package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/bolt"
	"github.com/netipam/netipam/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		st, err := bolt.Open(filepath.Join(t.TempDir(), "netipam.db"))
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}
