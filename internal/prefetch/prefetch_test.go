package prefetch

import (
	"testing"
	"unsafe"
)

// A prefetch is a hint: of a valid line or of nil, it neither faults nor
// changes memory.
func TestLineNeverFaultsNorWrites(t *testing.T) {
	buf := make([]byte, 256)
	for i := range buf {
		buf[i] = byte(i)
	}
	for i := range buf {
		Line(unsafe.Pointer(&buf[i]))
	}
	Line(nil)
	for i, b := range buf {
		if b != byte(i) {
			t.Fatalf("buf[%d] = %d after prefetches, want %d", i, b, i)
		}
	}
}

func BenchmarkLine(b *testing.B) {
	buf := make([]byte, 1<<20)
	i := 0
	for b.Loop() {
		Line(unsafe.Pointer(&buf[i]))
		i = (i + 4096 + 64) & (len(buf) - 1)
	}
}
