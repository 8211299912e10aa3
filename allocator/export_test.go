package allocator

import "github.com/netipam/netipam/store"

// WaitingForWatch reports whether a call of a is waiting for its index to
// reach a revision (WaitRevision): for tests that hold a watch back and
// must release it only once the allocator waits, or has gone on without.
func WaitingForWatch(a *Allocator) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waiters > 0
}

// SetSparseActiveFrom has the sparse index of a keep lone addresses in
// its tables once a huge pool holds n (sparse.Index.SetActiveFrom), so
// that tests with a few addresses reach the tables.
func SetSparseActiveFrom(a *Allocator, n int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for f := range a.sparse {
		a.sparse[f].SetActiveFrom(n)
	}
}

// AsyncWatch returns st taken the remote way, its watch told from a
// goroutine of its own a little after each write, as an etcd watch is
// (asyncStore).
func AsyncWatch(st store.Store) store.Store { return asyncStore{st} }

// WaitingForInFlight reports whether a call of a is waiting for creates
// in flight in other calls to end (awaitInFlight).
func WaitingForInFlight(a *Allocator) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inFlightWaiters > 0
}
