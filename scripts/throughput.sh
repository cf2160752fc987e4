#!/usr/bin/env bash
# Throughput table for docs/benchmarks.md: one Redis, three limiterd nodes
# (namespace "default": 1s and 60s windows, sync_rate 0.1 on Redis; or
# SYNC_RATE=-1, local only), and limiter-bench on the same machine, calling
# over KEYS keys (default 1000, uniform). Prints one Markdown table: the gRPC
# health check as the floor, unary Allow and Increment against one node and
# against all three, and the batch calls; calls/s, p50, p99 and the nodes'
# and Redis's CPU per call (from /proc/<pid>/stat); the floor is measured first and
# last. Linux only; needs redis-server, curl and jq.
#
#   bash scripts/throughput.sh            # 10s per row after a 2s warm-up
#   DURATION=20s WARMUP=3s SYNC_RATE=1 KEYS=10000 bash scripts/throughput.sh
#   WINDOWS='"60s"' WINDOW=60s KEYS=10000 bash scripts/throughput.sh   # 60 s windows only
set -euo pipefail
cd "$(dirname "$0")/.."

duration="${DURATION:-10s}"
warmup="${WARMUP:-2s}"
sync_rate="${SYNC_RATE:-0.1}"
keys="${KEYS:-1000}"
windows="${WINDOWS:-\"1s\", \"60s\"}" # the namespace's window sizes
window="${WINDOW:-1s}"                    # Allow's limit, one of them
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
# not handed out yet (it is remembered in $tmp/ports, as $(...) runs in a
# subshell).
. scripts/lib.sh # free_port

rport="$(free_port)"
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
pids+=($!)
rpid=$!

cat >"$tmp/limiterd.yaml" <<YAML
stores:
  main: {type: redis, addrs: ["127.0.0.1:$rport"]}
namespaces:
  - name: default
    window_sizes: [$windows]
    sync_rate: $sync_rate
    store: main
YAML
if awk "BEGIN { exit !($sync_rate < 0) }"; then
	sed -i '/store: main$/d' "$tmp/limiterd.yaml" # local only: the store goes unused
fi

grpc=() http=() npids=()
for i in 0 1 2; do
	g="127.0.0.1:$(free_port)" h="127.0.0.1:$(free_port)"
	"$tmp/limiterd" --config "$tmp/limiterd.yaml" --grpc-addr "$g" --http-addr "$h" \
		--node-name "node-$i" --log-level info >"$tmp/node-$i.log" 2>&1 &
	pids+=($!) npids+=($!) grpc+=("$g") http+=("$h")
done
# Server CPU is the nodes' plus Redis's: what a periodic namespace costs
# includes its store.
npids+=("$rpid")
for h in "${http[@]}"; do
	for _ in $(seq 100); do
		curl -fs "http://$h/readyz" >/dev/null && break
		sleep 0.1
	done
	curl -fs "http://$h/readyz" >/dev/null || { echo "limiterd at $h not ready" >&2; cat "$tmp"/node-*.log >&2; exit 1; }
done

all="$(IFS=,; echo "${grpc[*]}")"
allpids="$(IFS=,; echo "${npids[*]}")"
one="${npids[0]},$rpid" # node 0 and Redis

echo "machine: $(nproc) cores; sync_rate $sync_rate; $keys keys; $duration per row after $warmup warm-up; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| call | nodes | calls/s | decisions/s | p50 | p99 | server + Redis CPU µs/call | client CPU µs/call | errors |"
echo "|---|---|---|---|---|---|---|---|---|"

# row LABEL NODES TARGETS PIDS ARGS...: one limiter-bench run, one table row.
row() {
	local label="$1" nodes="$2" targets="$3" pidlist="$4"
	shift 4
	"$tmp/limiter-bench" -targets "$targets" -pids "$pidlist" -c 50 -keys "$keys" -limit 1e9 -window "$window" \
		-warmup "$warmup" -duration "$duration" -progress 0 -json "$@" >"$tmp/row.json"
	jq -r --arg name "$label" --arg nodes "$nodes" '
		def ms: if . >= 1000 then "\(. / 1000 * 100 | round / 100) ms" else "\(. | round) µs" end;
		"| \($name) | \($nodes) | \(.calls_per_sec | round) | \(.decisions_per_sec | round) | \(.latency_us.p50 | ms) | \(.latency_us.p99 | ms) | \(.server_cpu_us_per_call * 10 | round / 10) | \(.client_cpu_us_per_call * 10 | round / 10) | \(.errors | add // 0) |"' "$tmp/row.json"
}

row "health (floor)" 1 "${grpc[0]}" "$one" -call health -conns 4
row "Allow" 1 "${grpc[0]}" "$one" -call allow -conns 4
row "Increment" 1 "${grpc[0]}" "$one" -call increment -conns 4
row "Allow" 3 "$all" "$allpids" -call allow -conns 2
row "Increment" 3 "$all" "$allpids" -call increment -conns 2
row "AllowBatch ×100" 1 "${grpc[0]}" "$one" -call allow-batch -batch 100 -c 8 -conns 4
row "IncrementBatch ×100" 1 "${grpc[0]}" "$one" -call increment-batch -batch 100 -c 8 -conns 4
# The floor again: on a shared machine it drifts, and the two floor rows
# show by how much during this run.
row "health (floor, again)" 1 "${grpc[0]}" "$one" -call health -conns 4

echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
