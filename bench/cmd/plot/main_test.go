package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkAllocRelease/impl=netipam/prefix=16/fill=0-2         	 1000	       150 ns/op
BenchmarkAllocRelease/impl=netipam/prefix=16/fill=0-2         	 1000	       170 ns/op
BenchmarkAllocRelease/impl=netipam/prefix=16/fill=0-2         	 1000	       160 ns/op
BenchmarkAllocRelease/impl=k8s-bitmap/prefix=16/fill=0-2      	 1000	      1600 ns/op
BenchmarkAllocRelease/impl=netipam/prefix=16/fill=99.9-2      	 1000	       180 ns/op
BenchmarkAllocRelease/impl=k8s-bitmap/prefix=16/fill=99.9-2   	 1000	     90000 ns/op
BenchmarkHeapPerAddr/impl=netipam/prefix=12/n=1M-2            	    1	 900000000 ns/op	       120.5 B/addr
BenchmarkAllocReleaseFloor/impl=floor/prefix=16/fill=0-2      	 1000	        80 ns/op
BenchmarkAllocReleaseFloor/impl=floor-dense/prefix=16/fill=0-2	 1000	        40 ns/op
BenchmarkAllocReleaseFloor/impl=floor-indexed/prefix=16/fill=0-2	 1000	       120 ns/op
BenchmarkAllocReleaseFloor/impl=netipam-indexed/prefix=16/fill=0-2	 1000	       180 ns/op
BenchmarkHeapPerAddr/impl=netipam-indexed/prefix=12/n=1M-2    	    1	 900000000 ns/op	        95.0 B/addr
BenchmarkAllocRelease/impl=netipam/prefix=16/fill=0	20000	2400 instr/op
BenchmarkAllocRelease/impl=k8s-bitmap/prefix=16/fill=0	20000	12000 instr/op
BenchmarkAllocRelease/impl=netipam/prefix=16/fill=99.9	20000	2000 instr/op
PASS
`

func TestParseAndSummary(t *testing.T) {
	rs := &results{byName: map[string]*result{}}
	if err := rs.parse(strings.NewReader(sample)); err != nil {
		t.Fatal(err)
	}
	if v, ok := rs.get(bench, "ns/op", "impl", "netipam", "prefix", "16", "fill", "0"); !ok || v != 160 {
		t.Fatalf("median = %v, %v; want 160", v, ok)
	}
	if v, ok := rs.get("BenchmarkHeapPerAddr", "B/addr", "impl", "netipam", "prefix", "12", "n", "1M"); !ok || v != 120.5 {
		t.Fatalf("B/addr = %v, %v; want 120.5", v, ok)
	}
	var sum strings.Builder
	summary(&sum, rs)
	for _, want := range []string{
		"| IPv4 /16 | 0 | 160 ns | – | 1.60 µs | – | 10.0× | – |",
		"| IPv4 /16 | 99.9 | 180 ns | – | 90.0 µs | – | 500× | – |",
		"| alloc+release /16, 0–99.99 % | ≤ 200 ns | 160 ns – 180 ns | met |",
		"| vs k8s bitmap, fill 99.9 % | ≥ 1000× faster | worst 500× (IPv4 /16 at 99.9 %) | missed |",
		"| heap per address, /12, 1M addresses | ≤ 100 B | 120 B | missed |",
		"| heap per address, /12, 1M addresses, owner index kept | ≤ 100 B | 95 B | met |",
		"| IPv4 /16 | 0 | 80.0 ns | 40.0 ns | 120 ns | 160 ns | 2.00× | 180 ns | 1.50× |",
		"### Instructions an alloc+release (bench/ir.sh), and how many a nanosecond this host ran\n\n" +
			"| prefix | fill % | netipam | k8s-bitmap | bitmap / netipam | netipam a ns | bitmap a ns |\n" +
			"|---|---|---|---|---|---|---|\n| IPv4 /16 | 0 | 2400 | 12000 | 5.00× | 15.0 | 7.5 |\n",
		"| IPv4 /16 | 99.9 | 2000 | – | – | 11.1 | – |",
	} {
		if !strings.Contains(sum.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, sum.String())
		}
	}
	var svgOut strings.Builder
	if err := svg(&svgOut, rs); err != nil {
		t.Fatal(err)
	}
	if s := svgOut.String(); !strings.HasPrefix(s, "<svg") || !strings.Contains(s, "<polyline") {
		t.Fatalf("not a plot: %.200s", s)
	}
}
