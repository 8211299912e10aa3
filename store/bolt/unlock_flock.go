//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package bolt

import (
	"os"
	"syscall"
)

// unlockFile releases the flock bbolt took on f. Closing f is not enough
// while bbolt's memory mapping of it lives on.
func unlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
