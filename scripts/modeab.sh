#!/usr/bin/env bash
# Two builds of limiterd side by side, in alternating rounds on this
# machine: the gRPC Allow's server CPU per call in each mode, one
# namespace per mode ("local", "periodic" at sync_rate 0.1, "synchronous")
# over one redis-server, limiter-bench -call allow -c 50 over 100 000 keys,
# limit 1e9 (never refused), CPU from /proc/<pid>/stat. A is a git
# revision, B the working tree. Prints each round and the medians. Linux
# only; needs redis-server and jq.
#
#   A=HEAD~1 bash scripts/modeab.sh                 # 3 rounds of 10 s per mode
#   A=v1.2.0 ROUNDS=5 DURATION=20s bash scripts/modeab.sh
set -euo pipefail
cd "$(dirname "$0")/.."

rev="${A:?A=<git revision> to compare the working tree with}"
rounds="${ROUNDS:-3}"
duration="${DURATION:-10s}"
modes=(local periodic synchronous)
tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	remove_ab
}
trap cleanup EXIT

. scripts/lib.sh # build_ab, remove_ab, free_port, wait_port, cpu, median
build_ab "$rev"

redis_port="$(free_port)"
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no --daemonize no >"$tmp/redis.log" 2>&1 &
pids+=($!)
wait_port "$redis_port"
cat >"$tmp/limiterd.yaml" <<EOF
stores:
  main: {type: redis, addrs: ["127.0.0.1:$redis_port"]}
namespaces:
  - {name: local, window_sizes: [1s, 60s], sync_rate: -1}
  - {name: periodic, window_sizes: [1s, 60s], sync_rate: 0.1, store: main}
  - {name: synchronous, window_sizes: [1s, 60s], sync_rate: 0, store: main}
EOF

# round SIDE MODE: the server CPU µs per call and the calls/s of one mode.
round() {
	local port pid before after calls
	port="$(free_port)"
	"$tmp/limiterd-$1" --config "$tmp/limiterd.yaml" --grpc-addr "127.0.0.1:$port" --http-addr off --log-level warn &
	pid=$!
	pids+=("$pid")
	wait_port "$port"
	"$tmp/limiter-bench" -targets "127.0.0.1:$port" -namespace "$2" -call allow -c 50 -conns 4 -keys 100000 -limit 1e9 \
		-warmup 2s -duration 1s -progress 0 -json >/dev/null
	before="$(cpu "$pid")"
	"$tmp/limiter-bench" -targets "127.0.0.1:$port" -namespace "$2" -call allow -c 50 -conns 4 -keys 100000 -limit 1e9 \
		-warmup 0s -duration "$duration" -progress 0 -json >"$tmp/g.json"
	after="$(cpu "$pid")"
	calls="$(jq -r '.calls' "$tmp/g.json")"
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v c="$calls" -v d="${duration%s}" \
		'BEGIN { printf "%.2f %.0f\n", t / hz / c * 1e6, c / d }'
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "A: $(git rev-parse --short "$rev"), B: the working tree ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', modified'))"
echo
echo "| round | mode | side | gRPC Allow server CPU µs/call | calls/s |"
echo "|---|---|---|---|---|"
declare -A got
for k in $(seq "$rounds"); do
	order="A B"
	[ $((k % 2)) -eq 0 ] && order="B A"
	for mode in "${modes[@]}"; do
		for side in $order; do
			read -r c q <<<"$(round "$side" "$mode")"
			echo "| $k | $mode | $side | $c | $q |"
			got[$mode.$side]+="$c "
		done
	done
done
echo
for mode in "${modes[@]}"; do
	# shellcheck disable=SC2086
	echo "$mode: median µs/call A $(median ${got[$mode.A]}), B $(median ${got[$mode.B]})"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
