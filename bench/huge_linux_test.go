//go:build linux

package bench

import (
	"syscall"
	"unsafe"
)

// hugePagesAdvisable is true where hugeInts can ask for huge pages.
const hugePagesAdvisable = true

// hugeInts returns n ints on fresh memory advised to use huge pages (this
// host's transparent huge pages are set to "madvise"), and a function that
// frees it. The memory comes straight from mmap: Go heap memory may have
// been touched already, on 4 KiB pages, and advice would then not take
// effect at once.
func hugeInts(n int) ([]int, func()) {
	size := n * int(unsafe.Sizeof(int(0)))
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		panic(err)
	}
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE) // advice only
	return unsafe.Slice((*int)(unsafe.Pointer(unsafe.SliceData(b))), n), func() { _ = syscall.Munmap(b) }
}
