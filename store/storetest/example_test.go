package storetest_test

import (
	"testing"

	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
	"github.com/netipam/netipam/store/storetest"
)

// Every store runs the suite from a test of its own package.
func ExampleRun() {
	_ = func(t *testing.T) {
		storetest.Run(t, func(*testing.T) store.Store { return memory.New() })
	}
}
