#!/usr/bin/env bash
# Runs the netipam vs Kubernetes allocator comparison and prints benchstat
# tables. A full run writes into results/full-<commit>/ (OUT=dir to choose;
# relative to bench/): raw `go test -bench` output to <group>.txt, the
# machine and commit to env.txt, the tables to benchstat.txt, the plot to
# fill.svg and the targets summary to summary.md. No run overwrites an
# earlier one's files unless OUT says so.
#
#   bench/run.sh                 # full run, COUNT=6 samples per benchmark
#   COUNT=10 bench/run.sh        # more samples
#   ONLY="alloc heap" bench/run.sh      # only some groups (names below;
#                                       # scale: the core module's scale benchmarks;
#                                       # ir: instruction counts, under valgrind)
#   INTERLEAVE= bench/run.sh     # every group's samples back to back (by
#                                # default the alloc group's are taken in
#                                # rounds; see below)
#   PGO=pgo/alloc.pprof bench/run.sh    # built with profile-guided optimization
#                                       # (the profile: bench/pgo.sh; path relative
#                                       # to bench/; not applied to the scale group)
#
# A run of some groups only writes the same files to results/rerun-<commit>/
# (OUT to choose), so that its tables hold only its own numbers; an unknown
# group name is an error. Tables and the summary are built from the groups
# the run made, never from files an earlier run left.
#
# The full run sets NETIPAM_BENCH_FULL=1: 10M-address fixtures (several GB
# of heap), the IPAddress allocator on 64k-address ranges, 1M-address cold
# start, memory and finalizer fixtures. It takes 38–55 minutes on 2 cores,
# and 2–5 more for the ir group (valgrind; the run refuses to start
# without it unless ONLY leaves the group out).
# CI instead runs every benchmark once, reduced:
#   go test -run '^$' -bench . -benchtime 1x ./...
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-6}
# Groups sampled in COUNT rounds of one sample of every benchmark each,
# instead of COUNT samples of each benchmark back to back: a minute of noise
# from the host (another guest's load) then costs each benchmark one sample
# of six, instead of all six of the one or two it lands on. The alloc group
# is compared across fill levels (flatness) and against the peers (speed-ups)
# case by case, so it is sampled so. Its fixtures are filled again in each
# round, which cost no time that showed: 730 s for the group in rounds
# (session 36), about 12 minutes back to back (session 35).
INTERLEAVE=${INTERLEAVE-alloc}
all="alloc large prefetch ops finalizer heap floor calibrate ir scale"
commit=${NETIPAM_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [[ -n ${ONLY:-} ]]; then
	for name in $ONLY; do
		if [[ " $all " != *" $name "* ]]; then
			echo "run.sh: unknown group $name in ONLY (groups: $all)" >&2
			exit 2
		fi
	done
	OUT=${OUT:-results/rerun-$commit}
else
	ONLY=$all
	OUT=${OUT:-results/full-$commit}
fi
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da # golang.org/x/perf
export NETIPAM_BENCH_FULL=1

for name in $INTERLEAVE; do
	if [[ " $all " != *" $name "* || $name == scale ]]; then
		echo "run.sh: unknown group $name in INTERLEAVE (groups: ${all% scale})" >&2
		exit 2
	fi
done

if [[ " $ONLY " == *" ir "* ]] && ! command -v valgrind >/dev/null; then
	echo "run.sh: the ir group counts instructions under valgrind, which is not installed" >&2
	echo "run.sh: install it (Debian: apt-get install valgrind) or leave the group out (ONLY=...)" >&2
	exit 2
fi

mkdir -p "$OUT"
case $OUT in
/*) bin=$OUT/bench.test ;;
*) bin=./$OUT/bench.test ;;
esac
{
	echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "commit: $commit"
	go version
	grep -m1 'model name' /proc/cpuinfo
	echo "cores: $(nproc)"
	echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "samples: $COUNT; in rounds: ${INTERLEAVE:-none}"
	if [[ -n ${PGO:-} ]]; then
		echo "pgo: $PGO (sha256 $(sha256sum "$PGO" | cut -c1-12))"
	else
		echo "pgo: off"
	fi
} | tee "$OUT/env.txt"
go test -c -pgo="${PGO:-off}" -o "$bin" .
trap 'rm -f "$bin"' EXIT

# Each group of benchmarks gets its own raw file. -count repeats each
# sub-benchmark back to back, so a fixture (10M addresses, say) is built once
# per sub-benchmark, not once per sample. benchstat needs 6 samples for a
# confidence interval.
groups=(
	"alloc:^BenchmarkAllocRelease\$"
	"large:^BenchmarkAllocReleaseLarge\$"
	"prefetch:^BenchmarkPrefetch\$"
	"ops:^Benchmark(FillRange|AllocateNextFull|AllocateStatic|ParallelAllocRelease)\$"
	"finalizer:^Benchmark(FinalizerDecision|ColdStart)\$"
	"heap:^BenchmarkHeapPerAddr\$"
	"floor:^BenchmarkAllocReleaseFloor\$"
	"calibrate:^BenchmarkCalibrate\$"
)
raw=() # the raw files of this run, for the tables
for g in "${groups[@]}"; do
	IFS=: read -r name re <<<"$g"
	[[ " $ONLY " == *" $name "* ]] || continue
	echo "== $name: $re, count $COUNT" >&2
	start=$SECONDS
	if [[ " $INTERLEAVE " == *" $name "* ]]; then
		: >"$OUT/$name.txt"
		for ((round = 1; round <= COUNT; round++)); do
			echo "== $name: round $round of $COUNT" >&2
			"$bin" -test.run '^$' -test.bench "$re" -test.count 1 \
				-test.timeout 0 >>"$OUT/$name.txt"
		done
	else
		"$bin" -test.run '^$' -test.bench "$re" -test.count "$COUNT" \
			-test.timeout 0 >"$OUT/$name.txt"
	fi
	grep -E '^Benchmark' "$OUT/$name.txt" >&2 || true
	raw+=("$OUT/$name.txt")
	echo "== $name took $(( SECONDS - start ))s" >&2
done

# Instructions a cycle (ir.sh), netipam's and the bitmap's, at the fills
# of the 5x target on the targets' prefixes: unlike time, counts do not
# move with the host, and beside the alloc group's times they give how
# many instructions of each the host ran a nanosecond (the summary's
# instructions table). One count each: with a random start they differ by
# a few per cent from run to run. 10–20 s each under valgrind (139 s in all).
ir=
if [[ " $ONLY " == *" ir "* ]]; then
	echo "== ir: instructions a cycle, bench/ir.sh" >&2
	start=$SECONDS
	ir=$OUT/ir.txt
	: >"$ir"
	for p in 16 12; do
		for f in 0 50 90; do
			for impl in netipam k8s-bitmap; do
				n=$(./ir.sh "$bin" "BenchmarkAllocRelease\$/impl=$impl\$/prefix=$p\$/fill=$f\$" | cut -f2 | cut -d' ' -f1)
				if ! [[ $n =~ ^[1-9][0-9]*$ ]]; then
					# 0: valgrind saw no call of allocRelease (inlined?).
					echo "run.sh: ir.sh counted '$n' instructions for $impl /$p at $f %" >&2
					exit 1
				fi
				printf 'BenchmarkAllocRelease/impl=%s/prefix=%s/fill=%s\t%s\t%s instr/op\n' \
					"$impl" "$p" "$f" "${N:-20000}" "$n" | tee -a "$ir" >&2
			done
		done
	done
	echo "== ir took $(( SECONDS - start ))s" >&2
fi

# Scale in owners and CIDRs: benchmarks of the core module's own packages
# (netipam alone, no peer), for the report's "Scale in owners and CIDRs".
scale_re='^Benchmark(RecordsHeavyOwner|AllocateNextReleaseManyCIDRs|AllocateNextReleaseBesideFullCIDRs|CIDRChangeManyCIDRs|ReleaseInTerminatingCIDR|ReleaseUnderABlockedSupernet|BesideBlockedCIDRs)$'
scale=
if [[ " $ONLY " == *" scale "* ]]; then
	echo "== scale: $scale_re, count $COUNT" >&2
	start=$SECONDS
	scale=$OUT/scale.txt
	(cd .. && go test -run '^$' -bench "$scale_re" -count "$COUNT" -timeout 0 ./allocator/ ./store/memory/) >"$scale"
	grep -E '^Benchmark' "$scale" >&2 || true
	echo "== scale took $(( SECONDS - start ))s" >&2
fi

# Tables: one column per implementation, the other keys as rows.
{
	for f in ${raw[@]+"${raw[@]}"}; do
		echo "### $(basename "$f" .txt)"
		go run "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION" -col /impl "$f"
		echo
	done
	if [[ -n $scale ]]; then
		echo "### scale"
		go run "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION" "$scale"
		echo
	fi
} | tee "$OUT/benchstat.txt"

# The plot and the targets are drawn around the alloc group.
if [[ " $ONLY " == *" alloc "* ]]; then
	go run ./cmd/plot -o "$OUT/fill.svg" "${raw[@]}" ${ir:+"$ir"} | tee "$OUT/summary.md"
else
	echo "== no plot nor summary: they need the alloc group" >&2
fi
