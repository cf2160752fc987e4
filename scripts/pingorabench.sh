#!/usr/bin/env bash
# The estimator beside pingora-limits (the Rust crate whose count-min
# sketch it follows), in one sitting: BenchmarkEstimatorIncrementAt (serial)
# and scripts/pingorabench (pingora-limits' Estimator::incr, and
# Rate::observe + Rate::rate) over the same 10^6 16-byte keys with the same
# sketches (4 × 65 536 and 4 × 1 024 slots), in alternation, ROUNDS times
# (default 5). Prints every run's ns/op, then each case's median and the
# estimator's ratio to pingora's. Needs cargo; the crate comes from the
# crate registry at the version Cargo.lock pins. Not run by CI.
#
#   bash scripts/pingorabench.sh            # ROUNDS=5 BENCHTIME=1s
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${ROUNDS:-5}"
benchtime="${BENCHTIME:-1s}"
secs="${benchtime%s}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

(cd scripts/pingorabench && cargo build --release --locked --quiet)
go test -c -o "$tmp/node.test" ./node/
for run in $(seq "$rounds"); do
	GOGC=400 "$tmp/node.test" -test.run '^$' -test.bench 'EstimatorIncrementAt/.*/serial' \
		-test.benchtime "$benchtime" | grep '^Benchmark' | sed -E 's/^([^ \t]*)-[0-9]+/\1/' >>"$tmp/runs.txt"
	scripts/pingorabench/target/release/pingorabench "$secs" >>"$tmp/runs.txt"
	echo "pingorabench.sh: round $run of $rounds done" >&2
done
cat "$tmp/runs.txt"
echo
# Medians per case, then the ratios the benchmarks page quotes.
awk '{ v[$1] = v[$1] " " $3 }
END {
	for (k in v) {
		n = split(substr(v[k], 2), a, " ")
		for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		m[k] = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
		printf "%-48s median %8.2f ns/op (%d runs)\n", k, m[k], n
	}
	for (s in m) {
		if (s !~ /^BenchmarkEstimatorIncrementAt\//) continue
		sz = s; sub(/^BenchmarkEstimatorIncrementAt\//, "", sz); sub(/\/serial$/, "", sz)
		printf "IncrementAt/%s: %.2f× pingora incr, %.2f× observe+rate\n", sz,
			m[s] / m["BenchmarkEstimator/incr/" sz], m[s] / m["BenchmarkEstimator/observe+rate/" sz]
	}
}' "$tmp/runs.txt" | sort
