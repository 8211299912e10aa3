package metrics_test

import (
	"testing"
	"time"

	"github.com/netipam/netipam/allocator"
	"github.com/netipam/netipam/metrics"
)

// BenchmarkAllocated measures what the metrics cost an allocation: one
// event of a successful dynamic allocation (a counter and the duration
// histogram), from one goroutine and from all at once.
func BenchmarkAllocated(b *testing.B) {
	m := metrics.New()
	ev := allocator.AllocationEvent{Scope: allocator.ScopeDynamic, CIDR: "kubernetes", Duration: 300 * time.Nanosecond}
	b.Run("goroutines=1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			m.Allocated(ev)
		}
	})
	b.Run("goroutines=GOMAXPROCS", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				m.Allocated(ev)
			}
		})
	})
}
