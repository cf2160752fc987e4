#!/usr/bin/env bash
# TLS cost for docs/benchmarks.md: unary Allow per second and server CPU per
# call against one limiterd in plaintext, with TLS and with mTLS
# (client_auth: require), in the same run with the same load
# (limiter-bench, -c 50 over 4 connections, KEYS keys, local-only
# namespace "default"). One limiterd per mode, started up front; the modes
# run one after the other, ROUNDS times (default 2), then plaintext once
# more: the plaintext rows show how much a shared machine drifted during
# the run. Server CPU is
# read from /proc/<pid>/stat by limiter-bench -pids. Certificates: a
# throw-away EC P-256 CA, server and client made with openssl. Linux only;
# needs openssl, curl and jq.
#
#   bash scripts/tlsbench.sh                  # 10s per row after a 2s warm-up
#   DURATION=20s WARMUP=3s KEYS=10000 ROUNDS=3 bash scripts/tlsbench.sh
set -euo pipefail
cd "$(dirname "$0")/.."

duration="${DURATION:-10s}"
warmup="${WARMUP:-2s}"
keys="${KEYS:-1000}"
rounds="${ROUNDS:-2}"
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

# --- certificates ---
cd "$tmp"
ec() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }
ec ca.key
openssl req -x509 -new -key ca.key -subj "/CN=tlsbench CA" -days 1 -out ca.crt 2>/dev/null
issue() { # name subject extensions
	ec "$1.key"
	openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
	printf '%s\n' "$3" >"$1.ext"
	openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 1 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
}
issue server "/CN=limiterd" "subjectAltName=IP:127.0.0.1
extendedKeyUsage=serverAuth"
issue client "/CN=tlsbench" "extendedKeyUsage=clientAuth"
cd - >/dev/null

. scripts/lib.sh # free_port

declare -A grpc http pid
for mode in plain tls mtls; do
	case "$mode" in
	plain) tlscfg="" ;;
	tls) tlscfg="tls: {cert_file: $tmp/server.crt, key_file: $tmp/server.key}" ;;
	mtls) tlscfg="tls: {cert_file: $tmp/server.crt, key_file: $tmp/server.key, client_ca_file: $tmp/ca.crt, client_auth: require}" ;;
	esac
	printf '%s\n' "$tlscfg" >"$tmp/$mode.yaml"
	grpc[$mode]="127.0.0.1:$(free_port)" http[$mode]="127.0.0.1:$(free_port)"
	"$tmp/limiterd" --config "$tmp/$mode.yaml" --grpc-addr "${grpc[$mode]}" --http-addr "${http[$mode]}" \
		--node-name "$mode" --log-level warn >"$tmp/$mode.log" 2>&1 &
	pids+=($!) pid[$mode]=$!
done
for mode in plain tls mtls; do
	curlargs=(-fs "http://${http[$mode]}/readyz")
	case "$mode" in
	tls) curlargs=(-fs --cacert "$tmp/ca.crt" "https://${http[$mode]}/readyz") ;;
	mtls) curlargs=(-fs --cacert "$tmp/ca.crt" --cert "$tmp/client.crt" --key "$tmp/client.key" "https://${http[$mode]}/readyz") ;;
	esac
	for _ in $(seq 100); do
		curl "${curlargs[@]}" >/dev/null && break
		sleep 0.1
	done
	curl "${curlargs[@]}" >/dev/null || { echo "limiterd $mode not ready" >&2; cat "$tmp/$mode.log" >&2; exit 1; }
done

echo "machine: $(nproc) cores; $keys keys; $duration per row after $warmup warm-up; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| mode | Allow calls/s | p50 | p99 | server CPU µs/call | client CPU µs/call | errors |"
echo "|---|---|---|---|---|---|---|"

row() { # label mode limiter-bench args...
	local label="$1" mode="$2"
	shift 2
	"$tmp/limiter-bench" -targets "${grpc[$mode]}" -pids "${pid[$mode]}" -call allow -c 50 -conns 4 -keys "$keys" -limit 1e9 \
		-warmup "$warmup" -duration "$duration" -progress 0 -json "$@" >"$tmp/row.json"
	jq -r --arg name "$label" '
		def ms: if . >= 1000 then "\(. / 1000 * 100 | round / 100) ms" else "\(. | round) µs" end;
		"| \($name) | \(.calls_per_sec | round) | \(.latency_us.p50 | ms) | \(.latency_us.p99 | ms) | \(.server_cpu_us_per_call * 10 | round / 10) | \(.client_cpu_us_per_call * 10 | round / 10) | \(.errors | add // 0) |"' "$tmp/row.json"
}

for round in $(seq "$rounds"); do
	row "plaintext ($round)" plain
	row "TLS ($round)" tls -ca-file "$tmp/ca.crt"
	row "mTLS ($round)" mtls -ca-file "$tmp/ca.crt" -cert-file "$tmp/client.crt" -key-file "$tmp/client.key"
done
row "plaintext (last)" plain

echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
