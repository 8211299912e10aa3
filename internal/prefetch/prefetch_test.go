package prefetch

import (
	"testing"
	"unsafe"
)

// A prefetch is a hint: of valid lines, of nil, of no lines or of lines
// past the end of a buffer, it neither faults nor changes memory.
func TestPrefetchNeverFaultsNorWrites(t *testing.T) {
	buf := make([]byte, 256)
	for i := range buf {
		buf[i] = byte(i)
	}
	for i := range buf {
		Line(unsafe.Pointer(&buf[i]))
	}
	Line(nil)
	for _, n := range []int{-1, 0, 1, 4, 7, 8, 9, 17, 64} { // 64 lines: 4 KiB past a 256-byte buffer
		Lines(unsafe.Pointer(&buf[0]), n)
	}
	Lines(nil, 8)
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
