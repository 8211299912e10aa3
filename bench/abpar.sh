#!/usr/bin/env bash
# abpar.sh compares two test binaries (go test -c) by running them at the
# same time, one per core, each with GOMAXPROCS=1, and swapping the cores
# every round: both see the same moments of a host whose speed drifts, and
# the same cores, which can differ too. Then benchstat, old against new.
#
#	abpar.sh OLD.test NEW.test BENCH-REGEX [ROUNDS=8] [BENCHTIME=300ms]
#
# Needs two cores, taskset (util-linux) and benchstat
# (go install golang.org/x/perf/cmd/benchstat@latest).
set -euo pipefail
old=$1 new=$2 re=$3 rounds=${4:-8} bt=${5:-300ms}
out=$(mktemp -d)
for i in $(seq "$rounds"); do
	a=$((i % 2)) b=$((1 - i % 2))
	GOMAXPROCS=1 taskset -c "$a" "$old" -test.run '^$' -test.bench "$re" -test.benchtime "$bt" >"$out/o" &
	po=$!
	GOMAXPROCS=1 taskset -c "$b" "$new" -test.run '^$' -test.bench "$re" -test.benchtime "$bt" >"$out/n" &
	pn=$!
	# A binary that fails or crashes part-way would leave a comparison of
	# different sets of benchmarks: stop instead.
	ok=1
	wait "$po" || { echo "abpar: $old failed in round $i (output in $out/o)" >&2; ok=0; }
	wait "$pn" || { echo "abpar: $new failed in round $i (output in $out/n)" >&2; ok=0; }
	((ok)) || exit 1
	grep '^Benchmark' "$out/o" >>"$out/old.txt"
	grep '^Benchmark' "$out/n" >>"$out/new.txt"
done
names() { awk '{print $1}' "$1" | sort -u; }
if [[ "$(names "$out/old.txt")" != "$(names "$out/new.txt")" ]]; then
	echo "abpar: the two binaries ran different benchmarks:" >&2
	diff <(names "$out/old.txt") <(names "$out/new.txt") >&2 || true
	exit 1
fi
benchstat -filter '.unit:sec/op' "$out/old.txt" "$out/new.txt"
echo "raw results: $out"
