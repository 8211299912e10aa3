//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package bolt

import (
	"os"
	"syscall"
)

// unlockFile releases the flock bbolt took on f. Closing f is not enough
// while bbolt's memory mapping of it lives on.
func unlockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }

// syncDir makes the entries of directory dir durable: a file created in it
// survives a crash only once its entry does.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
