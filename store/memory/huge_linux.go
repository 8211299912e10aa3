package memory

import "syscall"

// adviseHugePages asks the kernel to back b with huge pages where it can.
// The tables and arena of a large store are probed at random, and on 4 KiB
// pages nearly every probe of a table of millions of records misses the
// TLB as well as the cache; in a virtual machine such a miss walks two
// page tables. Systems whose transparent huge pages are set to "madvise"
// (a common default) give huge pages only to memory advised so. Advice
// only: an error changes nothing.
func adviseHugePages(b []byte) {
	if len(b) < hugeAdviceMin {
		return
	}
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
}
