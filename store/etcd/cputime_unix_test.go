//go:build unix

package etcd

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) this process has used:
// the benchmark, the clients and the embedded etcd members alike.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
