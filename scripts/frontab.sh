#!/usr/bin/env bash
# Two builds of limiterd side by side, in alternating rounds on this
# machine: the gRPC Allow's server CPU per call (limiter-bench -call allow
# -c 50 over 100 000 keys, limit 1e9, local "default" namespace; CPU from
# /proc/<pid>/stat) and RL.REDUCE's calls/s at -P 16 (redis-benchmark -c 50
# -r 100000). A is a git revision, B the working tree. Prints each round
# and the medians. Linux only; needs redis-benchmark (redis-tools) and jq.
#
#   A=HEAD~1 bash scripts/frontab.sh                 # 3 rounds of 10 s
#   A=v1.2.0 ROUNDS=5 DURATION=20s N=400000 bash scripts/frontab.sh
set -euo pipefail
cd "$(dirname "$0")/.."

rev="${A:?A=<git revision> to compare the working tree with}"
rounds="${ROUNDS:-3}"
duration="${DURATION:-10s}"
n="${N:-200000}"
tmp="$(mktemp -d)"
pid=""
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null || true
	wait 2>/dev/null || true
	remove_ab
}
trap cleanup EXIT

. scripts/lib.sh # build_ab, remove_ab, free_port, wait_port, cpu, median
build_ab "$rev"

# round SIDE: one side's figures, "cpu_us_per_call calls_per_sec reduce_per_sec".
round() {
	local gport rport
	gport="$(free_port)"
	rport="$(free_port)"
	"$tmp/limiterd-$1" --grpc-addr "127.0.0.1:$gport" --resp-addr "127.0.0.1:$rport" --http-addr off --log-level warn &
	pid=$!
	wait_port "$gport"
	wait_port "$rport"
	"$tmp/limiter-bench" -targets "127.0.0.1:$gport" -call allow -c 50 -conns 4 -keys 100000 -limit 1e9 \
		-warmup 2s -duration 1s -progress 0 -json >/dev/null
	local before calls after
	before="$(cpu "$pid")"
	"$tmp/limiter-bench" -targets "127.0.0.1:$gport" -call allow -c 50 -conns 4 -keys 100000 -limit 1e9 \
		-warmup 0s -duration "$duration" -progress 0 -json >"$tmp/g.json"
	after="$(cpu "$pid")"
	calls="$(jq -r '.calls' "$tmp/g.json")"
	local reduce
	reduce="$(redis-benchmark -h 127.0.0.1 -p "$rport" -c 50 -n "$n" -P 16 -r 100000 -q RL.REDUCE 'key:__rand_int__' 1000000000 60 2>/dev/null |
		tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1)"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
	awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v c="$calls" -v d="${duration%s}" -v r="$reduce" \
		'BEGIN { printf "%.2f %.0f %.0f\n", t / hz / c * 1e6, c / d, r }'
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "A: $(git rev-parse --short "$rev"), B: the working tree ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', modified'))"
echo
echo "| round | side | gRPC Allow server CPU µs/call | gRPC Allow calls/s | RL.REDUCE -P 16 calls/s |"
echo "|---|---|---|---|---|"
ca=() cb=() ra=() rb=()
for k in $(seq "$rounds"); do
	order="A B"
	[ $((k % 2)) -eq 0 ] && order="B A"
	for side in $order; do
		read -r c q r <<<"$(round "$side")"
		echo "| $k | $side | $c | $q | $r |"
		if [ "$side" = A ]; then ca+=("$c") ra+=("$r"); else cb+=("$c") rb+=("$r"); fi
	done
done
echo
echo "medians: A $(median "${ca[@]}") µs/call, $(median "${ra[@]}") RL.REDUCE/s; B $(median "${cb[@]}") µs/call, $(median "${rb[@]}") RL.REDUCE/s"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
