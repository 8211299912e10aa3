#!/usr/bin/env bash
# Runs the netipam vs Kubernetes allocator comparison and prints benchstat
# tables. Raw `go test -bench` output goes to results/*.txt (the machine and
# commit to results/env.txt), the tables to results/benchstat.txt, the plot
# to results/fill.svg and the targets summary to results/summary.md.
#
#   bench/run.sh                 # full run, COUNT=6 samples per benchmark
#   COUNT=10 bench/run.sh        # more samples
#   ONLY="alloc heap" bench/run.sh      # only some groups (names below;
#                                       # scale: the core module's scale benchmarks)
#
# The full run sets NETIPAM_BENCH_FULL=1: 10M-address fixtures (several GB
# of heap), the IPAddress allocator on 64k-address ranges, 1M-address cold
# start, memory and finalizer fixtures. It takes about 25 minutes on 2 cores.
# CI instead runs every benchmark once, reduced:
#   go test -run '^$' -bench . -benchtime 1x ./...
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-6}
ONLY=${ONLY:-alloc large ops finalizer heap floor calibrate scale}
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da # golang.org/x/perf
export NETIPAM_BENCH_FULL=1

mkdir -p results
commit=${NETIPAM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "commit: $commit"
	go version
	grep -m1 'model name' /proc/cpuinfo
	echo "cores: $(nproc)"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee results/env.txt
go test -c -o results/bench.test .
trap 'rm -f results/bench.test' EXIT

# Each group of benchmarks gets its own raw file. -count repeats each
# sub-benchmark back to back, so a fixture (10M addresses, say) is built once
# per sub-benchmark, not once per sample. benchstat needs 6 samples for a
# confidence interval.
groups=(
	"alloc:^BenchmarkAllocRelease\$"
	"large:^BenchmarkAllocReleaseLarge\$"
	"ops:^Benchmark(FillRange|AllocateNextFull|AllocateStatic|ParallelAllocRelease)\$"
	"finalizer:^Benchmark(FinalizerDecision|ColdStart)\$"
	"heap:^BenchmarkHeapPerAddr\$"
	"floor:^BenchmarkAllocReleaseFloor\$"
	"calibrate:^BenchmarkCalibrate\$"
)
for g in "${groups[@]}"; do
	IFS=: read -r name re <<<"$g"
	[[ " $ONLY " == *" $name "* ]] || continue
	echo "== $name: $re, count $COUNT" >&2
	start=$SECONDS
	./results/bench.test -test.run '^$' -test.bench "$re" -test.count "$COUNT" \
		-test.timeout 0 >"results/$name.txt"
	grep -E '^Benchmark' "results/$name.txt" >&2 || true
	echo "== $name took $(( SECONDS - start ))s" >&2
done

# Scale in owners and CIDRs: benchmarks of the core module's own packages
# (netipam alone, no peer), for the report's "Scale in owners and CIDRs".
scale_re='^Benchmark(RecordsHeavyOwner|AllocateNextReleaseManyCIDRs|AllocateNextReleaseBesideFullCIDRs|CIDRChangeManyCIDRs|ReleaseInTerminatingCIDR|ReleaseUnderABlockedSupernet|BesideBlockedCIDRs)$'
if [[ " $ONLY " == *" scale "* ]]; then
	echo "== scale: $scale_re, count $COUNT" >&2
	start=$SECONDS
	(cd .. && go test -run '^$' -bench "$scale_re" -count "$COUNT" -timeout 0 ./allocator/ ./store/memory/) >results/scale.txt
	grep -E '^Benchmark' results/scale.txt >&2 || true
	echo "== scale took $(( SECONDS - start ))s" >&2
fi

# Tables: one column per implementation, the other keys as rows.
raw=()
for f in results/alloc.txt results/large.txt results/ops.txt results/finalizer.txt results/heap.txt results/floor.txt results/calibrate.txt; do
	if [[ -s $f ]]; then raw+=("$f"); fi
done
{
	for f in "${raw[@]}"; do
		echo "### $(basename "$f" .txt)"
		go run "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION" -col /impl "$f"
		echo
	done
	if [[ -s results/scale.txt ]]; then
		echo "### scale"
		go run "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION" results/scale.txt
		echo
	fi
} | tee results/benchstat.txt

if ((${#raw[@]})); then
	go run ./cmd/plot -o results/fill.svg "${raw[@]}" | tee results/summary.md
fi
