//go:build !unix

package etcd

import "time"

// processCPU is not measured here: CPU per operation is reported as 0.
func processCPU() time.Duration { return 0 }
