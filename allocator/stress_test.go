package allocator_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/internal/stress"
	"github.com/netipam/netipam/store/memory"
)

// SPEC §3–§5 under churn: three allocators over one memory store, four
// goroutines allocating (both families, static, dual-stack), releasing and
// creating, updating and deleting overlapping CIDRs, allocators replaced
// meanwhile; checked at quiescent points and at the end (package stress).
func TestStressMemoryChurn(t *testing.T) {
	v := stress.Run(t, memory.New(), stress.Config{
		Allocators: 3, Workers: 4, Duration: stress.Duration(), Seed: stress.Seed(t),
		Excluded: stress.Excluded(), StrictBands: true, Checkpoints: 3, CloseEvery: 300 * time.Millisecond,
	})
	stress.Report(t, v)
}

// The same with observers (the general allocation path) and every policy.
func TestStressMemoryChurnObserver(t *testing.T) {
	v := stress.Run(t, memory.New(), stress.Config{
		Allocators: 3, Workers: 4, Duration: stress.Duration(), Seed: stress.Seed(t),
		Excluded: stress.Excluded(), StrictBands: true, Checkpoints: 3, CloseEvery: 300 * time.Millisecond, Observer: true,
		Policy: func(i int) allocator.Policy {
			return []allocator.Policy{allocator.OldestFirst(), allocator.MostFree(), allocator.RandomOrder()}[i%3]
		},
	})
	stress.Report(t, v)
}

// Sparse (huge IPv6) and dense pools nested in one another.
func TestStressMemoryChurnSparse(t *testing.T) {
	v := stress.Run(t, memory.New(), stress.Config{
		Allocators: 3, Workers: 4, Duration: stress.Duration(), Seed: stress.Seed(t),
		Excluded: stress.Excluded(), StrictBands: true, Checkpoints: 3, CloseEvery: 300 * time.Millisecond, Observer: true,
		V6: []netip.Prefix{
			netip.MustParsePrefix("fd00::/64"),
			netip.MustParsePrefix("fd00::/103"),
			netip.MustParsePrefix("fd00::/104"),
			netip.MustParsePrefix("fd00::/120"),
			netip.MustParsePrefix("fd00::100/120"),
			netip.MustParsePrefix("fd00::/48"),
		},
		Strategy: func(i int) allocator.Strategy {
			if i%2 == 0 {
				return allocator.Sequential()
			}
			return nil
		},
	})
	stress.Report(t, v)
}

// Few names, fast allocator replacement: CIDR lifecycle against allocation.
func TestStressMemoryLifecycle(t *testing.T) {
	v := stress.Run(t, memory.New(), stress.Lifecycle(stress.Config{
		Allocators: 3, Workers: 6, Duration: stress.Duration(), Seed: stress.Seed(t),
		Excluded: stress.Excluded(), StrictBands: true, Checkpoints: 4, CloseEvery: 30 * time.Millisecond, Observer: true,
	}))
	stress.Report(t, v)
}
