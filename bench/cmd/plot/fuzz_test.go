package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
)

// FuzzParse: benchmark output of any shape never panics the parser, the
// plot or the summary, and every parsed result has the keys of its name.
func FuzzParse(f *testing.F) {
	f.Add("BenchmarkAllocRelease/impl=netipam/prefix=16/fill=90-2  1000  1234 ns/op  64 B/op  2 allocs/op\n")
	f.Add("BenchmarkHeapPerAddr/impl=netipam/prefix=12-2 1 5.0 ns/op 196.2 B/addr\nPASS\n")
	f.Add("Benchmark-2 x y z\nBenchmarkA/=/==-x 1 NaN ns/op\n")
	f.Fuzz(func(t *testing.T, in string) {
		rs := &results{byName: map[string]*result{}}
		if err := rs.parse(strings.NewReader(in)); err != nil {
			return // a line longer than the scanner's buffer
		}
		for _, name := range rs.order {
			res := rs.byName[name]
			if res == nil || res.keys["bench"] != strings.Split(name, "/")[0] {
				t.Fatalf("result %q has keys %v", name, res)
			}
		}
		var out bytes.Buffer
		_ = svg(&out, rs)
		summary(io.Discard, rs)
	})
}
