#!/usr/bin/env bash
# Runs the netipam vs Kubernetes allocator comparison and prints benchstat
# tables. Raw `go test -bench` output goes to results/*.txt, the tables to
# results/benchstat.txt, the plot to results/fill.svg and the targets summary
# to results/summary.md.
#
#   bench/run.sh                 # full run, COUNT=5 samples per benchmark
#   COUNT=10 bench/run.sh        # more samples
#   ONLY="alloc heap" bench/run.sh      # only some groups (names below)
#
# The full run sets NETIPAM_BENCH_FULL=1: 10M-address fixtures (several GB
# of heap), the IPAddress allocator on 64k-address ranges, 1M-address cold
# start, memory and finalizer fixtures. It takes about an hour on 2 cores.
# CI instead runs every benchmark once, reduced:
#   go test -run '^$' -bench . -benchtime 1x ./...
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-5}
ONLY=${ONLY:-alloc large ops finalizer heap}
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da # golang.org/x/perf
export NETIPAM_BENCH_FULL=1

mkdir -p results
go test -c -o results/bench.test .
trap 'rm -f results/bench.test' EXIT

# Each group of benchmarks gets its own raw file (and count: the groups that
# build 10M-address or 1M-object fixtures per sample take fewer samples).
groups=(
	"alloc:^BenchmarkAllocRelease\$:$COUNT"
	"large:^BenchmarkAllocReleaseLarge\$:$(( COUNT < 3 ? COUNT : 3 ))"
	"ops:^Benchmark(FillRange|AllocateNextFull|AllocateStatic|ParallelAllocRelease)\$:$COUNT"
	"finalizer:^Benchmark(FinalizerDecision|ColdStart)\$:$COUNT"
	"heap:^BenchmarkHeapPerAddr\$:$(( COUNT < 3 ? COUNT : 3 ))"
)
for g in "${groups[@]}"; do
	IFS=: read -r name re count <<<"$g"
	[[ " $ONLY " == *" $name "* ]] || continue
	echo "== $name: $re, count $count" >&2
	start=$SECONDS
	./results/bench.test -test.run '^$' -test.bench "$re" -test.count "$count" \
		-test.timeout 0 >"results/$name.txt"
	grep -E '^Benchmark' "results/$name.txt" >&2 || true
	echo "== $name took $(( SECONDS - start ))s" >&2
done

# Tables: one column per implementation, the other keys as rows.
{
	for f in results/alloc.txt results/large.txt results/ops.txt results/finalizer.txt results/heap.txt; do
		[[ -s $f ]] || continue
		echo "### $(basename "$f" .txt)"
		go run "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION" -col /impl "$f"
		echo
	done
} | tee results/benchstat.txt

go run ./cmd/plot -o results/fill.svg results/*.txt | tee results/summary.md
