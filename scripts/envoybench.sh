#!/usr/bin/env bash
# Envoy's rate limit service side by side: ShouldRateLimit calls/s, latency
# and server CPU per call, limiterd (namespace `envoy`: 1s, 1m, 1h, 24h;
# local only, periodic sync_rate 0.1 and synchronous sync_rate 0, on one
# Redis) next to envoyproxy/ratelimit on the same Redis, driven by the same
# h2load command with the same request bytes. Prints one Markdown table.
# Linux only; needs redis-server, h2load and nghttp (Debian: redis-server,
# nghttp2-client), curl, and RATELIMIT_BIN: envoyproxy/ratelimit's service
# binary. This script does not fetch or build it; build it outside this
# repository, e.g.
#
#   git clone https://github.com/envoyproxy/ratelimit /work/peers/ratelimit
#   cd /work/peers/ratelimit && go build -mod=readonly -o bin/ratelimit ./src/service_cmd
#   RATELIMIT_BIN=/work/peers/ratelimit/bin/ratelimit bash scripts/envoybench.sh
#
# Knobs (environment): DURATION (s per measured run, default 10), WARMUP
# (s before each, default 2), ROUNDS (default 3; the servers alternate in
# each round), SERVERS (a subset of "local periodic sync ratelimit
# ratelimit-pipelined"), KEYS (default 1, below), CLIENTS and STREAMS
# (h2load -c and -m, default 10 × 5 = 50 calls in flight), PIPELINE_WINDOW
# (REDIS_PIPELINE_WINDOW of ratelimit-pipelined, default 500us), PIN (none:
# the kernel places everything, the default; split: h2load on CPU 1, servers
# and Redis on CPU 0), KEEP=1 keeps the work directory.
#
# Load: h2load sends the same body on every request (-d), so one h2load
# process calls with one key: ShouldRateLimit(domain bench, descriptor
# (user, u1)), whose limit (10^9 per second) never refuses. KEYS=n runs n
# h2load processes at once, process k with (user, uk) and CLIENTS/n
# connections; calls/s is their sum and the percentiles are over all their
# requests. Each server runs alone: started, checked (a gRPC client expects
# OK for (user, u1) and OVER_LIMIT for (tight, x) with hits_addend 3 against
# its limit of 2 per minute; nghttp sends the benchmark's own frame once and
# must get grpc-status 0), warmed up, measured, stopped; Redis is flushed
# before each. h2load's counts must show every response 2xx and none
# failed. CPU per call is the process's utime+stime (/proc/<pid>/stat) over
# the measured run divided by the calls h2load completed; Redis's likewise.
# p50 and p99 come from h2load's per-request log (time to the end of the
# response).
#
# envoyproxy/ratelimit runs with its defaults (Redis pool of 10, no pipeline
# window, no local cache; GOGC 100 where limiterd sets 400), and as
# ratelimit-pipelined with REDIS_PIPELINE_WINDOW (its README advises
# 150us-500us "for optimal performance"); both with its Prometheus stats
# sink, in process like limiterd's metrics: USE_STATSD=false alone selects
# the stdout sink, which logs one line per call (about 5 MB/s here) and
# would be measured instead.
set -euo pipefail
cd "$(dirname "$0")/.."

: "${RATELIMIT_BIN:?set RATELIMIT_BIN to the envoyproxy/ratelimit service binary, see the header}"
duration="${DURATION:-10}"
warmup="${WARMUP:-2}"
rounds="${ROUNDS:-3}"
clients="${CLIENTS:-10}"
streams="${STREAMS:-5}"
servers="${SERVERS:-local periodic sync ratelimit ratelimit-pipelined}"
pipeline_window="${PIPELINE_WINDOW:-500us}"
pin="${PIN:-none}"
keys="${KEYS:-1}"
for tool in redis-server redis-cli h2load nghttp curl; do
	command -v "$tool" >/dev/null || { echo "envoybench: $tool not found" >&2; exit 1; }
done

tmp="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ -n "${KEEP:-}" ]; then echo "envoybench: files kept in $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

srv_cpu="" load_cpu=""
if [ "$pin" = split ]; then
	srv_cpu="taskset -c 0" load_cpu="taskset -c 1"
fi

timeout 300 go build -o "$tmp/limiterd" ./cmd/limiterd
timeout 300 go build -o "$tmp/envoybench" ./scripts/envoybench

# free_port prints a loopback port below the ephemeral range (where
# outgoing connections could take it between the check and the bind) that
# nothing listens on and this script has not handed out yet.
. scripts/lib.sh # free_port

# One domain file, read by both servers.
mkdir -p "$tmp/runtime/rl/config"
cat >"$tmp/runtime/rl/config/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: tight
    rate_limit: {unit: minute, requests_per_unit: 2}
YAML

rport="$(free_port)"
$srv_cpu redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
rpid=$!
pids+=("$rpid")
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done

for k in $(seq "$keys"); do
	"$tmp/envoybench" frame -domain bench -key user -value "u$k" -o "$tmp/request-$k.bin"
done

# cpu_ticks PID: utime+stime in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz="$(getconf CLK_TCK)"

# start_server NAME: starts it, waits until it is ready, sets $spid and $sport.
start_server() {
	local name="$1" h
	sport="$(free_port)"
	case "$name" in
	ratelimit | ratelimit-pipelined)
		local hp dp pp window=0
		[ "$name" = ratelimit ] || window="$pipeline_window"
		hp="$(free_port)" dp="$(free_port)" pp="$(free_port)"
		USE_STATSD=false USE_PROMETHEUS=true PROMETHEUS_ADDR="127.0.0.1:$pp" LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" REDIS_PIPELINE_WINDOW="$window" \
			RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=rl RUNTIME_APPDIRECTORY=config RUNTIME_WATCH_ROOT=false \
			HOST=127.0.0.1 PORT="$hp" GRPC_HOST=127.0.0.1 GRPC_PORT="$sport" DEBUG_HOST=127.0.0.1 DEBUG_PORT="$dp" \
			$srv_cpu "$RATELIMIT_BIN" >"$tmp/$name.log" 2>&1 &
		spid=$!
		h="http://127.0.0.1:$hp/healthcheck"
		;;
	*)
		local rate
		case "$name" in local) rate=-1 ;; periodic) rate=0.1 ;; sync) rate=0 ;; esac
		cat >"$tmp/$name.yaml" <<YAML
stores:
  main: {type: redis, addrs: ["127.0.0.1:$rport"]}
namespaces:
  - name: envoy
    window_sizes: ["1s", "1m", "1h", "24h"]
    sync_rate: $rate
$([ "$name" = local ] || echo "    store: main")
envoy:
  config_dir: $tmp/runtime/rl/config
  namespace: envoy
YAML
		local hp
		hp="$(free_port)"
		$srv_cpu "$tmp/limiterd" --config "$tmp/$name.yaml" --grpc-addr "127.0.0.1:$sport" \
			--http-addr "127.0.0.1:$hp" --node-name "bench-$name" --log-level warn >"$tmp/$name.log" 2>&1 &
		spid=$!
		h="http://127.0.0.1:$hp/readyz"
		;;
	esac
	pids+=("$spid")
	for _ in $(seq 100); do
		curl -fs "$h" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "envoybench: $name not ready" >&2
	cat "$tmp/$name.log" >&2
	exit 1
}

stop_server() {
	kill "$spid" 2>/dev/null || true
	wait "$spid" 2>/dev/null || true
}

# h2 SECONDS OUT [LOG]: h2load against $sport, one process per key, each
# with CLIENTS/KEYS connections (at least 1); their outputs go to OUT.k and
# their per-request logs to LOG.k.
h2() {
	local k c=$((clients / keys))
	[ "$c" -ge 1 ] || c=1
	for k in $(seq "$keys"); do
		[ -z "${3:-}" ] || rm -f "$3.$k"
		$load_cpu h2load -D "$1" -c "$c" -m "$streams" -t 1 \
			--header 'content-type: application/grpc' --header 'te: trailers' \
			-d "$tmp/request-$k.bin" ${3:+--log-file "$3.$k"} \
			"http://127.0.0.1:$sport/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" >"$2.$k" 2>&1 &
	done
	wait_h2
}
# wait_h2: waits for the h2load processes (the servers and Redis go on).
wait_h2() {
	local p
	for p in $(jobs -p); do
		case " ${pids[*]} " in *" $p "*) ;; *) wait "$p" ;; esac
	done
}

# pct FILE P: the P-th percentile of column 3 (µs) of an h2load log.
pct() { cut -f3 "$1" | sort -n | awk -v p="$2" '{ a[NR] = $1 } END { i = int(NR * p / 100 + 0.999999); if (i < 1) i = 1; print a[i] }'; }

label() {
	case "$1" in
	local) echo "limiterd, local only (sync_rate -1)" ;;
	periodic) echo "limiterd, periodic (sync_rate 0.1)" ;;
	sync) echo "limiterd, synchronous (sync_rate 0)" ;;
	ratelimit) echo "envoyproxy/ratelimit + Redis" ;;
	ratelimit-pipelined) echo "envoyproxy/ratelimit + Redis, REDIS_PIPELINE_WINDOW=$pipeline_window" ;;
	esac
}

: >"$tmp/rows"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq "$rounds"); do
	for name in $servers; do
		redis-cli -p "$rport" flushall >/dev/null
		start_server "$name"
		"$tmp/envoybench" check -addr "127.0.0.1:$sport" -domain bench -key user -value u1 -over tight >"$tmp/check.out" ||
			{ cat "$tmp/check.out" "$tmp/$name.log" >&2; exit 1; }
		nghttp -v -H 'content-type: application/grpc' -H 'te: trailers' -d "$tmp/request-1.bin" \
			"http://127.0.0.1:$sport/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" >"$tmp/nghttp.out" 2>&1 || true
		grep -q 'grpc-status: 0' "$tmp/nghttp.out" ||
			{ echo "envoybench: $name: no grpc-status 0 for the benchmark frame" >&2; cat "$tmp/nghttp.out" >&2; exit 1; }
		h2 "$warmup" "$tmp/warmup.out"
		load="$(cut -d' ' -f1 /proc/loadavg)"
		s0="$(cpu_ticks "$spid")" r0="$(cpu_ticks "$rpid")"
		h2 "$duration" "$tmp/h2.out" "$tmp/h2.log"
		s1="$(cpu_ticks "$spid")" r1="$(cpu_ticks "$rpid")"
		stop_server
		cat "$tmp"/h2.out.* >"$tmp/h2-$name-$round.out"
		cat "$tmp"/h2.log.* >"$tmp/h2.log"
		done_="$(awk '/^requests:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^done/) s += $i } END { print s + 0 }' "$tmp/h2-$name-$round.out")"
		ok2xx="$(awk '/^status codes:/ { s += $3 } END { print s + 0 }' "$tmp/h2-$name-$round.out")"
		failed="$(awk '/^requests:/ { for (i = 1; i <= NF; i++) if ($(i+1) ~ /^(failed|errored|timeout)/) s += $i } END { print s + 0 }' "$tmp/h2-$name-$round.out")"
		rps="$(awk '/^finished in/ { sub(",", "", $4); s += $4 } END { print s + 0 }' "$tmp/h2-$name-$round.out")"
		not2xx="$(awk '/^status codes:/ { s += $5 + $7 + $9 } END { print s + 0 }' "$tmp/h2-$name-$round.out")"
		# A response whose headers came before the stop counts in 2xx, not in done.
		if [ "$done_" -eq 0 ] || [ "$ok2xx" -lt "$done_" ] || [ "$not2xx" -ne 0 ] || [ "$failed" -ne 0 ]; then
			echo "envoybench: $name: h2load: $done_ done, $ok2xx 2xx, $not2xx not 2xx, $failed failed" >&2
			cat "$tmp/h2-$name-$round.out" >&2
			exit 1
		fi
		p50="$(pct "$tmp/h2.log" 50)" p99="$(pct "$tmp/h2.log" 99)"
		scpu="$(awk -v a="$s0" -v b="$s1" -v n="$done_" -v hz="$hz" 'BEGIN { printf "%.1f", (b - a) / hz * 1e6 / n }')"
		rcpu="$(awk -v a="$r0" -v b="$r1" -v n="$done_" -v hz="$hz" 'BEGIN { printf "%.1f", (b - a) / hz * 1e6 / n }')"
		tcpu="$(awk -v s="$scpu" -v r="$rcpu" 'BEGIN { printf "%.1f", s + r }')"
		printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$round" "$load" "$rps" "$p50" "$p99" \
			"$scpu" "$rcpu" "$tcpu" "$done_" "$ok2xx" "$failed" >>"$tmp/rows"
		echo "round $round $name: $rps calls/s, p50 $p50 µs, p99 $p99 µs, server $scpu + Redis $rcpu µs/call, load $load" >&2
	done
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

echo "machine: $(nproc) cores; $keys h2load process(es) (one thread each), -c $((clients / keys < 1 ? 1 : clients / keys)) -m $streams each, $keys key(s); $rounds rounds of ${duration}s per server after ${warmup}s warm-up, servers alternating; placement: $pin; Redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'); load before: $load_before, after: $load_after"
echo
echo "| server | round | load | calls/s | p50 µs | p99 µs | server CPU µs/call | Redis CPU µs/call | total µs/call | calls (2xx, failed) |"
echo "|---|---|---|---:|---:|---:|---:|---:|---:|---|"
for name in $servers; do awk -F'\t' -v s="$name" '$1 == s' "$tmp/rows"; done | while IFS=$'\t' read -r name round load rps p50 p99 scpu rcpu tcpu n ok failed; do
	printf '| %s | %s | %s | %.0f | %s | %s | %s | %s | %s | %s (%s, %s) |\n' "$(label "$name")" "$round" "$load" "$rps" "$p50" "$p99" "$scpu" "$rcpu" "$tcpu" "$n" "$ok" "$failed"
done
echo
echo "Medians over the rounds (each column on its own):"
echo
echo "| server | calls/s | p50 µs | p99 µs | server CPU µs/call | Redis CPU µs/call | total µs/call |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for name in $servers; do
	med() { awk -F'\t' -v s="$name" -v c="$1" '$1 == s { print $c }' "$tmp/rows" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
	printf '| %s | %.0f | %s | %s | %s | %s | %s |\n' "$(label "$name")" "$(med 4)" "$(med 5)" "$(med 6)" "$(med 7)" "$(med 8)" "$(med 9)"
done
