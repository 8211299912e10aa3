//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package bolt

import "os"

// unlockFile does nothing here: closing the file releases bbolt's lock.
func unlockFile(*os.File) error { return nil }

// syncDir does nothing here: a directory cannot be synced as a file
// (Windows), or the platform has no such call.
func syncDir(string) error { return nil }
