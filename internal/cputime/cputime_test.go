package cputime

import (
	"runtime"
	"testing"
	"time"
)

func TestProcessGrowsWithWork(t *testing.T) {
	if !Measured {
		t.Skip("CPU time is not read on", runtime.GOOS)
	}
	start := Process()
	for deadline := time.Now().Add(50 * time.Millisecond); time.Now().Before(deadline); {
	}
	if spent := Process() - start; spent < 10*time.Millisecond {
		t.Fatalf("50 ms of spinning counted as %v of CPU", spent)
	}
}
