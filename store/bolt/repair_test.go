package bolt_test

import (
	"testing"

	"github.com/netipam/netipam/internal/stress"
	"github.com/netipam/netipam/store"
)

// SPEC §1/§3 with §6 over bolt: see stress.RepairHandOver.
func TestRepairOverBoltNeverHandsAConsumersAddressToAnother(t *testing.T) {
	stress.RepairHandOver(t, 60, func(int) (store.Store, store.Store, func()) {
		st := mustOpen(t, tempPath(t))
		return st, st, func() { st.Close() }
	})
}

// SPEC §1/§3 with §6 over bolt: see stress.RepairRestoreRace.
func TestRepairRestoresOverBoltRacingAnotherAllocatorRecordEachAddressOnce(t *testing.T) {
	stress.RepairRestoreRace(t, 20, func(int) (store.Store, store.Store, func()) {
		st := mustOpen(t, tempPath(t))
		return st, st, func() { st.Close() }
	})
}
