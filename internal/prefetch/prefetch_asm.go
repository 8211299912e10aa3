//go:build amd64 || arm64

package prefetch

import "unsafe"

// Line starts loading the cache line that holds p into every cache level.
// p need not be valid: the hint is dropped, not faulted.
//
//go:noescape
func Line(p unsafe.Pointer)

// Lines starts loading n consecutive cache lines of 64 bytes from p, as n
// calls of Line would, in one call.
//
//go:noescape
func Lines(p unsafe.Pointer, n int)
