#!/usr/bin/env bash
# ir.sh counts the instructions one allocate + release executes, under
# valgrind's callgrind, counting only inside the benchmark loop (setup and
# fixtures excluded). Unlike ns/op, the count does not move with the load
# of the host, so a change of a few per cent shows in one run.
#
#   go test -c -o new.test .        # in bench/
#   bench/ir.sh new.test 'BenchmarkAllocRelease$/impl=netipam$/prefix=16/fill=0$'
#   TOP=30 bench/ir.sh new.test ... # and the 30 costliest functions, inclusive
#
# Each pattern must select one benchmark that runs allocRelease (the
# BenchmarkAllocRelease and BenchmarkAllocReleaseFloor families). Needs
# valgrind (Debian: apt-get install valgrind); N iterations (default 20000)
# take about a minute. With a random start or a random fill, counts differ
# by a few per cent from run to run; at fill 0 they repeat to within 0.1 %.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 BINARY PATTERN..." >&2
  exit 2
fi
bin=$1
shift
n=${N:-20000}
command -v valgrind >/dev/null || { echo "$0: valgrind is not installed" >&2; exit 1; }
tmp=$(mktemp -d)
# cpu.rdtscp=off: valgrind does not know RDTSCP, which the runtime's lock
# uses, when it waits, to time the wait; without it a run dies of SIGILL
# now and then (every time, some days). GOGC=off: a collection still
# marking the fixture during the loop (valgrind runs it ~50x slower) would
# add its write barriers to the count, in some runs and not others.
trap 'rm -rf "$tmp"' EXIT
for pat in "$@"; do
  GOGC=off GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind \
    --toggle-collect='github.com/netipam/netipam/bench.allocRelease' \
    --callgrind-out-file="$tmp/out" "$bin" -test.run '^$' -test.bench "$pat" \
    -test.benchtime "${n}x" >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  ran=$(grep -c '^Benchmark' "$tmp/log" || true)
  if [ "$ran" != 1 ]; then
    echo "$0: $pat ran $ran benchmarks, want 1" >&2
    exit 1
  fi
  total=$(grep -o 'Collected : [0-9]*' "$tmp/log" | awk '{print $3}')
  # With -benchtime Nx, b.Loop runs the body exactly n times.
  echo "$pat	$((total / n)) instructions per allocate + release"
  if [ -n "${TOP:-}" ]; then
    # Callers that hold the whole loop (the test's frames) are left out.
    callgrind_annotate --inclusive=yes "$tmp/out" 2>/dev/null | grep -v "'" | grep '\[' |
      sed 's/([^)]*)//' |
      awk -v n="$n" -v t="$total" '{gsub(",", "", $1); if ($1 + 0 >= t + 0) next; v = $1 / n; $1 = ""; printf "%7d %s\n", v, $0}' |
      sed 's| \[.*||; s|github.com/netipam/netipam/||g' | sort -rn | head -n "$TOP"
  fi
done
