#!/usr/bin/env bash
# The Redis protocol front's throughput next to Redis's and gRPC's, for
# BENCHMARKS.md: one redis-server and one limiterd (local-only "default"
# namespace, --resp-addr) on free loopback ports of this machine, then
#
#   redis-benchmark -c 50 -n N -P 16 -r 100000  INCR key:__rand_int__               (Redis)
#   redis-benchmark -c 50 -n N -P 16 -r 100000  RL.REDUCE key:__rand_int__ 1e9 60   (limiterd)
#   the same two without pipelining (-P 1)
#   limiter-bench -call allow -c 50 over 100 000 keys                               (gRPC Allow)
#   limiter-bench -call allow-batch -batch 16 -c 50                                 (gRPC AllowBatch ×16)
#
# and prints requests/s for each and the ratio RL.REDUCE / INCR. Every
# tool shares the machine's cores with the servers. Needs redis-server,
# redis-benchmark (Debian's redis-tools) and jq.
#
#   bash scripts/respbench.sh              # N = 1 000 000
#   N=200000 bash scripts/respbench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

n="${N:-1000000}"
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
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		if ! grep -qx "$p" "$tmp/ports" 2>/dev/null && ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p" >>"$tmp/ports"
			echo "$p"
			return
		fi
	done
}

# wait_port PORT: until something accepts on it (10 s at most).
wait_port() {
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return
		sleep 0.1
	done
	echo "respbench: nothing listens on port $1" >&2
	exit 1
}

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
echo "redis-benchmark -c 50 -n $n -r 100000; limiter-bench -c 50 -keys 100000 -duration $duration"
echo
incr16="$(rps "$rport" 16 INCR 'key:__rand_int__')"
reduce16="$(rps "$lport" 16 RL.REDUCE 'key:__rand_int__' 1000000000 60)"
incr1="$(rps "$rport" 1 INCR 'key:__rand_int__')"
reduce1="$(rps "$lport" 1 RL.REDUCE 'key:__rand_int__' 1000000000 60)"
read -r allow _ <<<"$(grpc -call allow)"
read -r _ batch <<<"$(grpc -call allow-batch -batch 16)"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
echo "| what | requests/s (decisions/s) | / Redis INCR -P 16 |"
echo "|---|---|---|"
echo "| Redis INCR, -P 16 | $incr16 | 1.00 |"
echo "| limiterd RL.REDUCE, -P 16 | $reduce16 | $(ratio "$reduce16" "$incr16") |"
echo "| Redis INCR, -P 1 | $incr1 | $(ratio "$incr1" "$incr16") |"
echo "| limiterd RL.REDUCE, -P 1 | $reduce1 | $(ratio "$reduce1" "$incr16") |"
echo "| limiterd gRPC Allow, c 50 (sliding window, limit 1e9) | $allow | $(ratio "$allow" "$incr16") |"
echo "| limiterd gRPC AllowBatch ×16 | $batch decisions | $(ratio "$batch" "$incr16") |"
echo
echo "RL.REDUCE / INCR (-P 16): $(ratio "$reduce16" "$incr16"); without pipelining: $(ratio "$reduce1" "$incr1")"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
