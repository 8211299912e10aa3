//go:build !amd64 && !arm64

package prefetch

import "unsafe"

// Line starts loading the cache line that holds p; on this architecture it
// does nothing.
func Line(p unsafe.Pointer) {}

// Lines starts loading n consecutive cache lines of 64 bytes from p; on
// this architecture it does nothing.
func Lines(p unsafe.Pointer, n int) {}
