#!/usr/bin/env bash
# Allow over gRPC next to Allow over HTTP/JSON, same server, same load
# tool, same run: one limiterd on its default config (local only), h2load
# (Debian's nghttp2-client) sending one Allow of one key with a limit that
# never refuses, the two protocols alternating ROUNDS times. Prints one
# Markdown row per run: calls/s, mean latency and limiterd's CPU per call
# (utime + stime from /proc/<pid>/stat). 64 calls in flight either way:
# gRPC as 4 connections × 16 streams, JSON as 64 HTTP/1.1 connections.
#
#   bash scripts/jsonbench.sh
#   ROUNDS=5 DURATION=20 bash scripts/jsonbench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${ROUNDS:-3}"
duration="${DURATION:-10}"
command -v h2load >/dev/null || {
	echo "jsonbench.sh: needs h2load (apt-get install nghttp2-client)" >&2
	exit 1
}
tmp="$(mktemp -d)"
pid=""
cleanup() {
	[ -z "$pid" ] || kill "$pid" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

. scripts/lib.sh # free_port

go build -o "$tmp/limiterd" ./cmd/limiterd
grpc=$(free_port)
http=$(free_port)
GOGC= "$tmp/limiterd" --grpc-addr "127.0.0.1:$grpc" --http-addr "127.0.0.1:$http" --log-level warn &
pid=$!
for _ in $(seq 100); do
	curl -sf "http://127.0.0.1:$http/readyz" >/dev/null && break
	sleep 0.1
done

req='{"key": "bench", "limits": [{"window_size": "60s", "limit": 1e9}]}'
go run ./scripts/grpcframe -type limiter.v1.AllowRequest -json "$req" >"$tmp/allow.bin"
printf '%s' "$req" >"$tmp/allow.json"
answer=$(curl -sf -X POST -H 'content-type: application/json' -d @"$tmp/allow.json" \
	"http://127.0.0.1:$http/limiter.v1.RateLimiter/Allow")
case "$answer" in
*'"allowed":true'* | *'"allowed": true'*) ;;
*)
	echo "jsonbench.sh: unexpected JSON answer: $answer" >&2
	exit 1
	;;
esac

cpu() { awk '{print $14 + $15}' "/proc/$pid/stat"; }
hz=$(getconf CLK_TCK)

# row NAME H2LOAD-ARGS...: one timed h2load run after a 2 s warm-up.
row() {
	local name="$1" c0 c1 out calls
	shift
	h2load -D 2 "$@" >/dev/null
	c0=$(cpu)
	out=$(h2load -D "$duration" "$@")
	c1=$(cpu)
	calls=$(awk '/^status codes:/ {print $3}' <<<"$out")
	awk -v name="$name" -v calls="$calls" -v d="$duration" -v cpu=$((c1 - c0)) -v hz="$hz" \
		-v mean="$(awk '/^time for request:/ {print $6}' <<<"$out")" 'BEGIN {
		printf "| %s | %.0f | %s | %.1f |\n", name, calls / d, mean, cpu / hz * 1e6 / calls }'
}

echo "| call | calls/s | mean latency | server CPU µs/call |"
echo "|---|---:|---:|---:|"
for _ in $(seq "$rounds"); do
	row "gRPC Allow" -c 4 -m 16 -d "$tmp/allow.bin" \
		-H 'content-type: application/grpc' -H 'te: trailers' \
		"http://127.0.0.1:$grpc/limiter.v1.RateLimiter/Allow"
	row "JSON Allow" --h1 -c 64 -d "$tmp/allow.json" -H 'content-type: application/json' \
		"http://127.0.0.1:$http/limiter.v1.RateLimiter/Allow"
done
