package allocator

import "github.com/netipam/netipam/internal/u128"

// freeTree finds MostFree's choice among the pools of live, the one with
// the most free addresses (as Usage counts them: excluded ones are not) and the first in live among
// equals, at its root; a change of one pool's count costs O(log pools).
// It is a tournament over places in live: each node holds the winner of
// its subtree. Kept only under MostFree, and built anew when live
// changes.
type freeTree struct {
	leaves int         // a power of two, at least the pools
	free   []u128.U128 // per node, its winner's free count; node 1 is the root
	at     []int       // per node, its winner's place in live
}

// build makes the tree for live, with free giving a pool's free count.
func (t *freeTree) build(live []liveSource, free func(*pool) u128.U128) {
	t.leaves = 1
	for t.leaves < len(live) {
		t.leaves *= 2
	}
	t.free = append(t.free[:0], make([]u128.U128, 2*t.leaves)...)
	t.at = append(t.at[:0], make([]int, 2*t.leaves)...)
	for i := range t.leaves {
		// Past the pools, a leaf frees nothing and comes last among
		// equals, so it never wins over a pool.
		t.at[t.leaves+i] = i
		if i < len(live) {
			t.free[t.leaves+i] = free(live[i].pool)
		}
	}
	for k := t.leaves - 1; k >= 1; k-- {
		t.play(k)
	}
}

// play sets node k to the better of its two children.
func (t *freeTree) play(k int) {
	l, r := 2*k, 2*k+1
	if t.free[l].Less(t.free[r]) {
		t.free[k], t.at[k] = t.free[r], t.at[r]
	} else {
		t.free[k], t.at[k] = t.free[l], t.at[l] // the first among equals
	}
}

// update sets the free count of the pool at place i of live.
func (t *freeTree) update(i int, free u128.U128) {
	k := t.leaves + i
	t.free[k] = free
	for k /= 2; k >= 1; k /= 2 {
		t.play(k)
	}
}

// best returns the place in live of MostFree's choice; live must not be
// empty.
func (t *freeTree) best() int { return t.at[1] }

// mostFreeCountChangedLocked is countChangedLocked under MostFree: pl's
// leaf, if pl is in live, takes its new free count.
func (a *Allocator) mostFreeCountChangedLocked(pl *pool) {
	if pl.liveAt >= 0 {
		a.mostFree[pl.fam].update(pl.liveAt, a.freeLocked(pl))
	}
}
