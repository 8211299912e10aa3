// Package cputime reads the process's CPU time, for benchmarks that report
// the CPU an operation costs, background goroutines included, beside its
// wall time.
package cputime
