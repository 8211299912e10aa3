package cputime

import (
	"runtime"
	"testing"
	"time"
)

// Spinning must show as CPU time. On a loaded machine the spin may get
// only a part of the core, so it spins until 10 ms are counted; a minute
// of spinning without that is a failure, not a slow host.
func TestProcessGrowsWithWork(t *testing.T) {
	if !Measured {
		t.Skip("CPU time is not read on", runtime.GOOS)
	}
	start := Process()
	for hang := time.Now().Add(time.Minute); Process()-start < 10*time.Millisecond; {
		if time.Now().After(hang) {
			t.Fatalf("a minute of spinning counted as %v of CPU", Process()-start)
		}
	}
}
