#!/usr/bin/env bash
# abrounds.sh compares test binaries (go test -c) by taking their samples
# in rounds: each round runs every binary once, one after the other, for
# one sample of each selected benchmark. A host whose speed drifts over
# minutes then spreads the drift over all of them, where samples taken
# back to back would give it to whichever ran during it. Unlike abpar.sh,
# each binary has the whole machine while it runs, and any number of
# binaries can be compared. Then benchstat, the first binary as the base.
#
#	abrounds.sh BENCH-REGEX ROUNDS BENCHTIME NAME=BINARY...
#	abrounds.sh 'BenchmarkAllocRelease$/impl=netipam$/prefix=16$/fill=50$' 10 1s old=old.test new=new.test
#
# OUT=dir keeps the raw samples there (NAME.txt, and benchstat.txt);
# otherwise they go to a temporary directory, which is printed.
set -euo pipefail
if [ $# -lt 5 ]; then
	echo "usage: $0 BENCH-REGEX ROUNDS BENCHTIME NAME=BINARY NAME=BINARY..." >&2
	exit 2
fi
re=$1 rounds=$2 bt=$3
shift 3
if ! [[ $rounds =~ ^[1-9][0-9]*$ ]]; then
	echo "abrounds: ROUNDS must be a positive number, not $rounds" >&2
	exit 2
fi
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da # golang.org/x/perf, as run.sh
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
names=() bins=()
for nb in "$@"; do
	name=${nb%%=*} bin=${nb#*=}
	if [[ $nb != *=* || -z $name || ! -x $bin ]]; then
		echo "abrounds: $nb is not NAME=BINARY with an executable binary" >&2
		exit 2
	fi
	if [[ " ${names[*]} " == *" $name "* ]]; then
		echo "abrounds: the name $name is given twice" >&2
		exit 2
	fi
	names+=("$name") bins+=("$bin")
	: >"$out/$name.txt"
done
for ((r = 1; r <= rounds; r++)); do
	for i in "${!names[@]}"; do
		# A binary that fails part-way would leave a comparison of
		# different sets of benchmarks: stop instead.
		if ! "${bins[i]}" -test.run '^$' -test.bench "$re" -test.benchtime "$bt" -test.count 1 >"$out/last" 2>&1; then
			echo "abrounds: ${bins[i]} failed in round $r (output in $out/last)" >&2
			exit 1
		fi
		grep '^Benchmark' "$out/last" >>"$out/${names[i]}.txt" || true
	done
done
benchmarks() { awk '{print $1}' "$1" | sort -u; }
first=$(benchmarks "$out/${names[0]}.txt")
if [[ -z $first ]]; then
	echo "abrounds: no benchmark matched $re" >&2
	exit 1
fi
for name in "${names[@]:1}"; do
	if [[ "$(benchmarks "$out/$name.txt")" != "$first" ]]; then
		echo "abrounds: ${names[0]} and $name ran different benchmarks:" >&2
		diff <(echo "$first") <(benchmarks "$out/$name.txt") >&2 || true
		exit 1
	fi
done
(cd "$out" && go run "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION" -filter '.unit:sec/op' "${names[@]/%/.txt}") | tee "$out/benchstat.txt"
echo "raw results: $out"
