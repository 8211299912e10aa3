package memory_test

import (
	"testing"

	"github.com/netipam/netipam/store"
	"github.com/netipam/netipam/store/memory"
	"github.com/netipam/netipam/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return memory.New() })
}
