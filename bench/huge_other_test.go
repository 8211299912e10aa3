//go:build !linux

package bench

const hugePagesAdvisable = false

func hugeInts(n int) ([]int, func()) { return make([]int, n), func() {} }
