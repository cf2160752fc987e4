#!/usr/bin/env bash
# Compares a package's benchmarks at two revisions: the test binaries of
# BASE and of the work tree run in alternation, RUNS times each (default
# 10), and benchstat compares them. Alternating spreads the machine's
# drift over both sides.
#
#   BASE=58cbc2a bash scripts/benchab.sh ./node/ 'IncrementAt|AllowAt' [benchtime]
set -euo pipefail
cd "$(dirname "$0")/.."

pkg="${1:?usage: BASE=rev bash scripts/benchab.sh PKG BENCH-REGEXP [BENCHTIME]}"
bench="${2:?usage: BASE=rev bash scripts/benchab.sh PKG BENCH-REGEXP [BENCHTIME]}"
benchtime="${3:-1s}"
base="${BASE:?set BASE to the revision to compare with}"
runs="${RUNS:-10}"

tmp="$(mktemp -d)"
trap 'git worktree remove --force "$tmp/base" 2>/dev/null || true; rm -rf "$tmp"' EXIT

go test -c -o "$tmp/head.test" "$pkg"
git worktree add -q --detach "$tmp/base" "$base"
(cd "$tmp/base" && go test -c -o "$tmp/base.test" "$pkg")
for run in $(seq "$runs"); do
	for side in base head; do
		GOGC=400 "$tmp/$side.test" -test.run '^$' -test.bench "$bench" \
			-test.benchtime "$benchtime" -test.benchmem | grep '^Benchmark' >>"$tmp/$side.txt"
	done
	echo "benchab.sh: run $run of $runs done" >&2
done
go tool benchstat "base=$tmp/base.txt" "head=$tmp/head.txt"
