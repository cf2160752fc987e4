#!/usr/bin/env bash
# Redis's instructions per changed key of one periodic tick, counted by
# valgrind's callgrind on a private redis-server: the same from run to run
# where CPU time on a shared machine moves by 15 % or more, so a change to
# a store script shows as a number. It runs BenchmarkSyncerTick's
# "keys=10000,changed=2000" for T1 and then T2 ticks against a Redis under
# callgrind; the difference of the two counts, over (T2 - T1) ticks of
# 2000 keys, leaves out the setup both runs share. Linux only; needs
# valgrind and redis-server (Debian: apt-get install valgrind redis-server).
#
#   bash scripts/redisinstr.sh                # T1=20, T2=60: about 2 min
#   T1=10 T2=30 PORT=46500 bash scripts/redisinstr.sh
set -euo pipefail
cd "$(dirname "$0")/.."

t1="${T1:-20}"
t2="${T2:-60}"
port="${PORT:-46396}"
changed=2000
tmp="$(mktemp -d)"
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

go test -c -o "$tmp/redis.test" ./strategy/redis/

# count N: Redis's instructions over a run of N timed ticks.
count() {
	valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$1" \
		redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >"$tmp/valgrind.$1" 2>&1 &
	local vp=$!
	for _ in $(seq 150); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
	LIMITERD_TEST_REDIS="127.0.0.1:$port" timeout 600 "$tmp/redis.test" -test.run '^$' \
		-test.bench "^BenchmarkSyncerTick\$/^keys=10000,changed=$changed\$" -test.benchtime "${1}x" -test.count 1 >"$tmp/bench.$1"
	redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
	wait "$vp" || true
	awk '/^totals:/ {print $2}' "$tmp/cg.$1"
}

i1=$(count "$t1")
i2=$(count "$t2")
echo "Redis instructions per changed key: $(( (i2 - i1) / ((t2 - t1) * changed) ))  (callgrind; $t1 and $t2 ticks: $i1, $i2)"
