package allocator

// WaitingForWatch reports whether a call of a is waiting for its index to
// reach a revision (WaitRevision): for tests that hold a watch back and
// must release it only once the allocator waits, or has gone on without.
func WaitingForWatch(a *Allocator) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waiters > 0
}
