#!/usr/bin/env bash
# The compose cluster's tests (integration/compose, build tag compose) on a
# real Docker engine:
#
#   bash scripts/compose-test.sh [go test flags...]   all of it, as `make compose-test`
#   bash scripts/compose-test.sh --start DIR          steps 1-3; DIR keeps the state
#   bash scripts/compose-test.sh --stop DIR           step 5 for what --start did
#
# 1. On Debian as root, installs what is missing (docker.io, docker-compose,
#    debootstrap).
# 2. Starts a Docker engine (dockerd, no systemd) unless one answers.
# 3. Builds the images (scripts/images.sh; an image whose inputs did not
#    change is kept).
# 4. go test -tags compose -count=1 -v ./integration/compose/ (no -race:
#    the nodes run in containers; the test process only drives them).
# 5. Removes every container and network of the tests' projects
#    (limiterdtest*) left behind, and stops the engine if step 2 started it;
#    also when a test fails or the run is interrupted.
# Each step prints how long it took. Under CI=true an engine that cannot be
# installed or started, or an image that cannot be built, fails the run;
# otherwise the tests are skipped.
set -euo pipefail

cd "$(dirname "$0")/.."

CI_MODE=false
[ "${CI:-}" = true ] && CI_MODE=true

log() { echo "compose-test.sh: $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# unavailable MESSAGE: fails under CI=true (exit 1), else exit 3 (skipped).
unavailable() {
	if $CI_MODE; then
		log "CI=true: $*"
		exit 1
	fi
	log "$*: the compose tests are skipped"
	exit 3
}

start() { # start DIR
	local dir="$1" t missing=()
	mkdir -p "$dir"
	command -v docker >/dev/null 2>&1 || missing+=(docker.io)
	command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
	command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
	command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
	if [ ${#missing[@]} -gt 0 ]; then
		if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
			unavailable "missing ${missing[*]} (Debian: apt-get install docker.io docker-compose debootstrap)"
		fi
		t="$(now)"
		log "apt-get install ${missing[*]}"
		timeout 120 apt-get update -qq >/dev/null || true
		DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends \
			$(printf '%s\n' "${missing[@]}" | sort -u) >/dev/null ||
			unavailable "cannot install ${missing[*]}"
		log "timing: installed in $(since "$t") s"
	fi

	t="$(now)"
	if timeout 10 docker info >/dev/null 2>&1; then
		log "a Docker engine answers already: using it (it is left running)"
	else
		[ "$(id -u)" = 0 ] || unavailable "no Docker engine answers, and starting one needs root"
		# setsid: an interrupt of this run reaches the engine only through
		# stop(), which waits for it to remove its containers.
		setsid dockerd >"$dir/dockerd.log" 2>&1 </dev/null &
		echo $! >"$dir/dockerd.pid"
		for _ in $(seq 1 300); do
			timeout 5 docker info >/dev/null 2>&1 && break
			kill -0 "$(cat "$dir/dockerd.pid")" 2>/dev/null || break
			sleep 0.1
		done
		if ! timeout 10 docker info >/dev/null 2>&1; then
			tail -n 20 "$dir/dockerd.log" >&2
			unavailable "the Docker engine does not start (log above)"
		fi
		log "timing: engine (dockerd $(cat "$dir/dockerd.pid")) started in $(since "$t") s"
	fi

	t="$(now)"
	bash scripts/images.sh || unavailable "the images cannot be built"
	log "timing: images ready in $(since "$t") s"
}

stop() { # stop DIR
	local dir="$1" t pid ids
	t="$(now)"
	if timeout 10 docker info >/dev/null 2>&1; then
		ids="$(docker ps -aq --filter label=com.docker.compose.project 2>/dev/null |
			xargs -r docker inspect -f '{{index .Config.Labels "com.docker.compose.project"}} {{.Id}}' 2>/dev/null |
			awk '$1 ~ /^limiterdtest/ {print $2}')" || true
		if [ -n "$ids" ]; then
			log "removing containers left behind: $(echo "$ids" | wc -l)"
			timeout 120 docker rm -f $ids >/dev/null 2>&1 || true
		fi
		docker network ls -q --filter name=limiterdtest | xargs -r timeout 60 docker network rm >/dev/null 2>&1 || true
	fi
	if [ -s "$dir/dockerd.pid" ]; then
		pid="$(cat "$dir/dockerd.pid")"
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 300); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		rm -f "$dir/dockerd.pid"
		log "timing: engine stopped in $(since "$t") s"
	fi
}

case "${1:-}" in
--start)
	start "${2:?--start DIR}"
	exit 0
	;;
--stop)
	stop "${2:?--stop DIR}"
	exit 0
	;;
esac

state="$(mktemp -d /tmp/limiterd-compose.XXXXXX)"
test_pid=
finish() {
	local status=$?
	trap - EXIT INT TERM
	if [ -n "$test_pid" ] && kill -0 "$test_pid" 2>/dev/null; then
		kill -TERM "$test_pid" 2>/dev/null || true
		wait "$test_pid" 2>/dev/null || true
	fi
	stop "$state"
	rm -rf "$state"
	exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

code=0
(start "$state") || code=$?
[ $code = 3 ] && exit 0
[ $code = 0 ] || exit $code
t="$(now)"
status=0
# In the background, so that a signal to this script runs finish at once.
timeout 1500 go test -tags compose -count=1 -timeout 1200s -v ./integration/compose/ "$@" &
test_pid=$!
wait "$test_pid" || status=$?
test_pid=
log "timing: go test in $(since "$t") s"
exit $status
