//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package bolt

import "os"

// unlockFile does nothing here: closing the file releases bbolt's lock.
func unlockFile(*os.File) error { return nil }
