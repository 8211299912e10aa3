// Package strs holds string helpers of the hot paths.
package strs

import "unsafe"

// Same reports whether a == b, without comparing the bytes when the two
// are the same string (the same bytes at the same address), as repeated
// names mostly are: a caller's constants, or a string kept from the last
// call. Small enough to inline, so the common case makes no call, where
// a == b calls the runtime's comparison whenever the lengths match.
func Same(a, b string) bool {
	return len(a) == len(b) && (unsafe.StringData(a) == unsafe.StringData(b) || a == b)
}
