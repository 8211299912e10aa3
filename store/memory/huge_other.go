//go:build !linux

package memory

func adviseHugePages([]byte) {}
