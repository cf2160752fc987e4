#!/usr/bin/env bash
# The Redis protocol front's throughput next to Redis's and gRPC's, for
# docs/benchmarks.md: one redis-server and one limiterd (local-only "default"
# namespace, --resp-addr) on free loopback ports of this machine, then
#
#   redis-benchmark -c 50 -n N -P 16 -r 100000  INCR key:__rand_int__               (Redis)
#   redis-benchmark -c 50 -n N -P 16 -r 100000  RL.REDUCE key:__rand_int__ 1e9 60   (limiterd)
#   the same two without pipelining (-P 1)
#   limiter-bench -call allow -c 50 over 100 000 keys                               (gRPC Allow)
#   limiter-bench -call allow-batch -batch 16 -c 50                                 (gRPC AllowBatch ×16)
#
# in ROUNDS rounds, Redis and limiterd back to back in each (the load of a
# shared machine drifts), and prints requests/s, each round's ratio
# RL.REDUCE / INCR and the medians. Every
# tool shares the machine's cores with the servers. Needs redis-server,
# redis-benchmark (Debian's redis-tools) and jq.
#
#   bash scripts/respbench.sh              # N = 1 000 000, 3 rounds
#   N=200000 ROUNDS=5 bash scripts/respbench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

n="${N:-1000000}"
rounds="${ROUNDS:-3}"
duration="${DURATION:-10s}"
tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/limiterd" ./cmd/limiterd
go build -o "$tmp/limiter-bench" ./cmd/limiter-bench

# free_port prints a loopback port nothing listens on and this script has
# not handed out yet.
. scripts/lib.sh # free_port, wait_port, median

rport="$(free_port)"
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
pids+=($!)
lport="$(free_port)"
gport="$(free_port)"
"$tmp/limiterd" --resp-addr "127.0.0.1:$lport" --grpc-addr "127.0.0.1:$gport" --http-addr off --log-level warn &
lpid=$!
pids+=($lpid)
wait_port "$rport"
wait_port "$lport"
wait_port "$gport"

# rps PORT PIPELINE COMMAND...: redis-benchmark's requests per second.
rps() {
	local port="$1" p="$2"
	shift 2
	redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -n "$n" -P "$p" -r 100000 -q "$@" 2>/dev/null |
		tr '\r' '\n' | grep -o '[0-9.]* requests per second' | tail -1 | cut -d' ' -f1
}

# grpc ARGS...: limiter-bench's calls and decisions per second.
grpc() {
	"$tmp/limiter-bench" -targets "127.0.0.1:$gport" -c 50 -conns 4 -keys 100000 -limit 1e9 \
		-warmup 2s -duration "$duration" -progress 0 -json "$@" >"$tmp/g.json"
	jq -r '"\(.calls_per_sec | round) \(.decisions_per_sec | round)"' "$tmp/g.json"
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "redis-benchmark -c 50 -n $n -r 100000, $rounds rounds (Redis and limiterd in turn); limiter-bench -c 50 -keys 100000 -duration $duration"
echo

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }

# The load on a shared machine drifts: each round runs Redis and limiterd
# back to back, and its ratio is reported with the medians.
i16=() r16=() i1=() r1=() q16=()
echo "| round | INCR -P 16 | RL.REDUCE -P 16 | ratio | INCR -P 1 | RL.REDUCE -P 1 | ratio |"
echo "|---|---|---|---|---|---|---|"
for k in $(seq "$rounds"); do
	a="$(rps "$rport" 16 INCR 'key:__rand_int__')"
	b="$(rps "$lport" 16 RL.REDUCE 'key:__rand_int__' 1000000000 60)"
	c="$(rps "$rport" 1 INCR 'key:__rand_int__')"
	d="$(rps "$lport" 1 RL.REDUCE 'key:__rand_int__' 1000000000 60)"
	i16+=("$a") r16+=("$b") i1+=("$c") r1+=("$d") q16+=("$(ratio "$b" "$a")")
	echo "| $k | $a | $b | $(ratio "$b" "$a") | $c | $d | $(ratio "$d" "$c") |"
done
read -r allow _ <<<"$(grpc -call allow)"
read -r _ batch <<<"$(grpc -call allow-batch -batch 16)"
incr16="$(median "${i16[@]}")"
echo
echo "| what (medians) | requests/s (decisions/s) | / Redis INCR -P 16 |"
echo "|---|---|---|"
echo "| Redis INCR, -P 16 | $incr16 | 1.00 |"
echo "| limiterd RL.REDUCE, -P 16 | $(median "${r16[@]}") | $(ratio "$(median "${r16[@]}")" "$incr16") |"
echo "| Redis INCR, -P 1 | $(median "${i1[@]}") | $(ratio "$(median "${i1[@]}")" "$incr16") |"
echo "| limiterd RL.REDUCE, -P 1 | $(median "${r1[@]}") | $(ratio "$(median "${r1[@]}")" "$incr16") |"
echo "| limiterd gRPC Allow, c 50 (sliding window, limit 1e9) | $allow | $(ratio "$allow" "$incr16") |"
echo "| limiterd gRPC AllowBatch ×16 | $batch decisions | $(ratio "$batch" "$incr16") |"
echo
echo "RL.REDUCE / INCR, -P 16: median of the rounds' ratios $(median "${q16[@]}")"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
