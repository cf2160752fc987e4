#!/usr/bin/env bash
# The synchronous Redis call table for docs/benchmarks.md: starts its own Redis
# on a free loopback port, runs BenchmarkSyncCall (strategy/redis) RUNS
# times with FLUSHALL before each, and prints one Markdown row per run:
# p50/p99 of a synchronous increment through a Syncer, the server's
# EVALSHA time per call, the same over 10 hot keys, a plain go-redis INCR,
# and redis-benchmark -c 1 -t incr, which the benchmark runs from its own
# process right after each sub-benchmark.
#
# PLACEMENT says where the processes run:
#   split   Redis on CPU 0, the benchmark (and so redis-benchmark) on CPU 1:
#           each side on its own core, as a store on its own host would be
#           (the default);
#   shared  both on CPU 0;
#   free    wherever the kernel puts them.
# With one CPU the Go runtime runs one P (GOMAXPROCS follows the affinity).
# Linux only; needs redis-server, redis-benchmark and taskset.
#
#   bash scripts/synccall.sh
#   RUNS=10 PLACEMENT=free bash scripts/synccall.sh
#
# With BASE=<git revision> it compares instead: the benchmark built from
# BASE and from the work tree run in alternation, RUNS times each, the
# synchronous increment and allow only, and benchstat prints p50, server
# time and allocations side by side:
#
#   BASE=58cbc2a RUNS=10 bash scripts/synccall.sh
set -euo pipefail
cd "$(dirname "$0")/.."

runs="${RUNS:-5}"
placement="${PLACEMENT:-split}"
case "$placement" in
split) server=(taskset -c 0) client=(taskset -c 1) ;;
shared) server=(taskset -c 0) client=(taskset -c 0) ;;
free) server=() client=() ;;
*)
	echo "synccall.sh: PLACEMENT must be split, shared or free, not $placement" >&2
	exit 2
	;;
esac

tmp="$(mktemp -d)"
cleanup() {
	if [ -f "$tmp/redis.pid" ]; then kill "$(cat "$tmp/redis.pid")" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

port=""
for _ in $(seq 50); do
	p=$((20000 + RANDOM % 30000))
	if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		port=$p
		break
	fi
done
[ -n "$port" ] || {
	echo "synccall.sh: no free port" >&2
	exit 1
}

"${server[@]}" redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
	--daemonize yes --dir "$tmp" --pidfile "$tmp/redis.pid" --logfile "$tmp/redis.log"
for _ in $(seq 100); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.1
done
redis-cli -p "$port" ping >/dev/null

go test -c -o "$tmp/redis.test" ./strategy/redis/

if [ -n "${BASE:-}" ]; then
	git worktree add -q --detach "$tmp/base" "$BASE"
	(cd "$tmp/base" && go test -c -o "$tmp/base.test" ./strategy/redis/)
	git worktree remove --force "$tmp/base"
	for run in $(seq "$runs"); do
		for side in base head; do
			bin="$tmp/redis.test"
			[ "$side" = base ] && bin="$tmp/base.test"
			redis-cli -p "$port" flushall >/dev/null
			LIMITERD_TEST_REDIS="127.0.0.1:$port" GOGC=400 "${client[@]}" "$bin" \
				-test.run '^$' -test.bench 'BenchmarkSyncCall/(increment|allow)$' \
				-test.benchtime 20000x -test.benchmem | grep '^Benchmark' >>"$tmp/$side.txt"
			echo "synccall.sh: run $run $side done" >&2
		done
	done
	go tool benchstat "base=$tmp/base.txt" "head=$tmp/head.txt"
	exit 0
fi

# metric prints the value before unit $2 on the line of sub-benchmark $1.
metric() {
	awk -v b="BenchmarkSyncCall/$1" -v u="$2" \
		'$1 ~ "^" b "(-[0-9]+)?$" {
			for (i = 2; i <= NF; i++) if ($i == u) print $(i - 1) }' "$tmp/out"
}

echo "| run | increment p50 µs | p99 µs | server µs/call | 10 keys p50 µs | go-redis INCR p50 µs | redis-benchmark INCR p50 µs | increment ÷ redis-benchmark | 10 keys ÷ redis-benchmark |"
echo "|---|---|---|---|---|---|---|---|---|"
for run in $(seq "$runs"); do
	redis-cli -p "$port" flushall >/dev/null
	LIMITERD_TEST_REDIS="127.0.0.1:$port" GOGC=400 "${client[@]}" "$tmp/redis.test" \
		-test.run '^$' -test.bench 'BenchmarkSyncCall/(go-redis-incr|increment)' \
		-test.benchtime 20000x -test.benchmem >"$tmp/out"
	inc=$(metric increment p50-µs)
	rb=$(metric increment incr-p50-µs)
	ten=$(metric increment-10keys p50-µs)
	rb10=$(metric increment-10keys incr-p50-µs)
	awk -v run="$run" -v inc="$inc" -v p99="$(metric increment p99-µs)" \
		-v srv="$(metric increment server-µs)" -v ten="$ten" -v gi="$(metric go-redis-incr p50-µs)" \
		-v rb="$rb" -v rb10="$rb10" 'BEGIN {
			printf "| %s | %s | %s | %.1f | %s | %s | %s | %.2f | %.2f |\n", run, inc, p99, srv, ten, gi, rb, inc / rb, ten / rb10 }'
done
