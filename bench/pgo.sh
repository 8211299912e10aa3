#!/usr/bin/env bash
# pgo.sh records the CPU profile that `PGO=pgo/alloc.pprof bench/run.sh`
# builds the comparison with (profile-guided optimization): the
# BenchmarkAllocRelease group, every implementation (netipam and the
# Kubernetes peers alike, so each side's hot paths are in it), one sample
# of BENCHTIME (default 500ms) each, built without a profile.
#
#   bench/pgo.sh                   # writes bench/pgo/alloc.pprof
#
# An embedder gets the same from a profile of its own binary (go build
# -pgo=FILE, or default.pgo beside its main package); see BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")"
bin=$(mktemp -d)/bench.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -pgo=off -o "$bin" .
NETIPAM_BENCH_FULL= "$bin" -test.run '^$' -test.bench '^BenchmarkAllocRelease$' \
	-test.benchtime "${BENCHTIME:-500ms}" -test.timeout 0 -test.cpuprofile pgo/alloc.pprof >/dev/null
echo "wrote bench/pgo/alloc.pprof"
