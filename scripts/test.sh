#!/usr/bin/env bash
# The project's test command: every test, with real Redis, PostgreSQL and
# Cassandra on loopback.
#
#   bash scripts/test.sh [go test flags...]     e.g. -run TestRedis
#   eval "$(bash scripts/test.sh --setup)"      steps 1 and 2 only, then print
#                                               the exports (PATH, GOTOOLCHAIN)
#                                               that make `go` the right one
#
# 1. On Debian as root, installs what is missing (quietly, apt-get update
#    only then): redis-server, postgresql, openjdk-17-jre-headless, maven,
#    gcc (for -race), and Go when there is none (see ensure_go).
# 2. Fetches Cassandra's jars into the cache (scripts/cassandra/fetch.sh;
#    nothing to do when they are there).
# 3. Starts one shared Redis, PostgreSQL and Cassandra in the background
#    (./integration/harness/cmd/stores, built once), compiles the tests
#    while Cassandra starts, and exports LIMITERD_TEST_REDIS, LIMITERD_TEST_POSTGRES
#    and LIMITERD_TEST_CASSANDRA for the harness's Shared* functions.
# 4. Runs go test -race -count=1 ./... and then, one package at a time,
#    the packages that have integration tests with -tags integration, and ends with a line "summary: N passed, N failed,
#    N skipped" (test runs, subtests included, over every pass).
# 5. Runs the compose cluster's tests (integration/compose, -tags compose,
#    without -race) on a Docker engine it installs and starts, with the
#    images of scripts/images.sh (scripts/compose-test.sh).
# Every server it started is stopped on exit. Exits non-zero when a test
# fails or, under CI=true, when a store cannot be started or installed.
set -euo pipefail

cd "$(dirname "$0")/.."

JAVA17=/usr/lib/jvm/java-17-openjdk-amd64/bin/java
CI_MODE=false
[ "${CI:-}" = true ] && CI_MODE=true
setup_only=false
if [ "${1:-}" = --setup ]; then
	setup_only=true
	shift
fi

log() { echo "test.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# --- 1. install what is missing ---

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
[ -x "$JAVA17" ] || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v gcc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
if ! command -v go >/dev/null 2>&1; then
	if [ -x /usr/local/go/bin/go ]; then
		export PATH="/usr/local/go/bin:$PATH"
	else
		missing+=(golang-go)
	fi
fi

apt_updated=false
apt_install() {
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		log "missing $*: install them (Debian: apt-get install $*)"
		return 1
	fi
	if ! $apt_updated; then
		log "apt-get update"
		apt-get update -qq >/dev/null
		apt_updated=true
	fi
	log "apt-get install $*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if [ ${#missing[@]} -gt 0 ]; then
	if ! apt_install "${missing[@]}"; then
		$CI_MODE && die "CI=true: cannot install ${missing[*]}"
		log "continuing: the tests needing them are skipped"
	fi
fi

# ensure_go makes sure the go command in PATH is at least the version that
# go.mod names. A go of 1.21 or later downloads it itself from the Go
# module proxy (GOTOOLCHAIN=auto); an older one (Debian 12's golang-go is
# 1.19) downloads the toolchain module golang.org/toolchain with
# `go mod download` and it is unpacked into the cache.
ensure_go() {
	local want have cache dest
	command -v go >/dev/null 2>&1 || die "no go command"
	want="go$(awk '$1 == "go" {print $2; exit}' go.mod)"
	if grep -q '^toolchain ' go.mod; then
		want="$(awk '$1 == "toolchain" {print $2; exit}' go.mod)"
	fi
	cache="${LIMITERD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/limiterd}/go"
	dest="$cache/$want"
	if [ -x "$dest/bin/go" ]; then
		export PATH="$dest/bin:$PATH"
	fi
	have="$(GOTOOLCHAIN=local go env GOVERSION)"
	version_ge "${have#go}" "${want#go}" && return 0
	if version_ge "${have#go}" 1.21; then
		log "go is $have, go.mod wants $want: GOTOOLCHAIN=auto fetches it"
		export GOTOOLCHAIN=auto
		return 0
	fi
	log "go is $have (before 1.21, no GOTOOLCHAIN): fetching $want from the Go module proxy"
	local tmp dir arch
	arch="$(go env GOARCH)"
	tmp="$(mktemp -d)"
	(
		cd "$tmp"
		echo 'module bootstrap' >go.mod
		GOPATH="$tmp/gopath" GOFLAGS=-mod=mod go mod download -x "golang.org/toolchain@v0.0.1-$want.linux-$arch" >/dev/null 2>&1
	) || {
		chmod -R u+w "$tmp"
		rm -rf "$tmp"
		die "cannot download golang.org/toolchain@v0.0.1-$want.linux-$arch"
	}
	dir="$tmp/gopath/pkg/mod/golang.org/toolchain@v0.0.1-$want.linux-$arch"
	mkdir -p "$cache"
	rm -rf "$dest.tmp"
	cp -r "$dir" "$dest.tmp"
	chmod -R u+w "$dest.tmp"
	chmod +x "$dest.tmp"/bin/* "$dest.tmp"/pkg/tool/*/*
	rm -rf "$dest"
	mv "$dest.tmp" "$dest"
	chmod -R u+w "$tmp"
	rm -rf "$tmp"
	export PATH="$dest/bin:$PATH"
	log "using $("$dest/bin/go" version)"
}

# version_ge A B: A >= B for dotted versions.
version_ge() { [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]; }

ensure_go

# --- 2. Cassandra's jars ---

if ! bash scripts/cassandra/fetch.sh; then
	$CI_MODE && die "CI=true: cannot fetch Cassandra's jars"
	log "continuing without Cassandra's jars: Cassandra tests are skipped"
fi

if $setup_only; then
	printf 'export PATH=%q\n' "$(dirname "$(command -v go)"):$PATH"
	[ -z "${GOTOOLCHAIN:-}" ] || printf 'export GOTOOLCHAIN=%q\n' "$GOTOOLCHAIN"
	exit 0
fi

# --- 3. shared stores ---

work="$(mktemp -d /tmp/limiterd-test.XXXXXX)"
declare -A store_pid=()

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	[ -z "${compose_state:-}" ] || bash scripts/compose-test.sh --stop "$compose_state" || true
	for s in "${!store_pid[@]}"; do
		kill -TERM "${store_pid[$s]}" 2>/dev/null || true
	done
	for s in "${!store_pid[@]}"; do
		# The stores program stops its server (Cassandra within a minute).
		for _ in $(seq 1 700); do
			kill -0 "${store_pid[$s]}" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "${store_pid[$s]}" 2>/dev/null || true
	done
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

store_failed=()
start_store() { # start_store NAME
	"$work/stores" -store "$1" -out "$work/$1.addr" -parent $$ >"$work/$1.log" 2>&1 &
	store_pid[$1]=$!
}
stores=(cassandra redis postgres)
log "building the stores program"
if go build -o "$work/stores" ./integration/harness/cmd/stores; then
	for s in "${stores[@]}"; do
		start_store "$s"
	done
else
	log "cannot build ./integration/harness/cmd/stores: no shared stores"
	store_failed+=("${stores[@]}")
fi

log "compiling the tests while the stores start"
go test -race -count=1 -run '^$' ./... >/dev/null 2>&1 || true
go test -race -count=1 -run '^$' -tags integration ./... >/dev/null 2>&1 || true

wait_store() { # wait_store NAME ENVVAR: export ENVVAR once NAME answers
	local name="$1" var="$2" deadline=$((SECONDS + 300)) code
	[ -n "${store_pid[$name]:-}" ] || return 0
	while [ ! -s "$work/$name.addr" ]; do
		if ! kill -0 "${store_pid[$name]}" 2>/dev/null; then
			code=0
			wait "${store_pid[$name]}" || code=$?
			unset "store_pid[$name]"
			cat "$work/$name.log" >&2
			if [ "$code" = 3 ]; then
				log "$name is not installed: its tests are skipped"
			else
				log "$name could not be started (exit $code)"
				store_failed+=("$name")
			fi
			return 0
		fi
		if [ $SECONDS -ge $deadline ]; then
			cat "$work/$name.log" >&2
			log "$name not ready after 300 s"
			store_failed+=("$name")
			return 0
		fi
		sleep 0.2
	done
	export "$var=$(head -n1 "$work/$name.addr")"
	log "$var=${!var} ($(grep -o 'ready in [0-9.]*s' "$work/$name.log" || echo ready))"
}
wait_store redis LIMITERD_TEST_REDIS
wait_store postgres LIMITERD_TEST_POSTGRES
wait_store cassandra LIMITERD_TEST_CASSANDRA
if [ ${#store_failed[@]} -gt 0 ] && $CI_MODE; then
	log "CI=true: failed to start ${store_failed[*]}: the run fails"
fi

# --- 4. the tests ---

passed=0
failed=0
skipped=0
run_failed=()

# run_tests NAME ARGS...: go test -v ARGS, showing all but the progress
# and "--- PASS" lines, and counting the results.
run_tests() {
	local name="$1" out="$work/$1.out" status=0
	shift
	log "go test $*"
	set +e
	go test -v "$@" 2>&1 | tee "$out" | grep -Ev '^=== (RUN|PAUSE|CONT|NAME)|^ *--- PASS'
	status=${PIPESTATUS[0]}
	set -e
	local p f s
	p=$(grep -cE '^ *--- PASS' "$out" || true)
	f=$(grep -cE '^ *--- FAIL' "$out" || true)
	s=$(grep -cE '^ *--- SKIP' "$out" || true)
	if [ "$status" != 0 ]; then
		# A build failure, panic or time-out has no "--- FAIL" of its own.
		[ "$f" -gt 0 ] || f=1
		run_failed+=("$name")
	fi
	passed=$((passed + p))
	failed=$((failed + f))
	skipped=$((skipped + s))
	log "$name: $p passed, $f failed, $s skipped (go test exit $status)"
}

# slowest N: the N slowest top-level tests of every pass, with their
# package, so that the CI budget stays visible. go test -v prints a
# package's results before its "ok"/"FAIL" line, one package at a time.
slowest() {
	cat "$work"/*.out 2>/dev/null | awk '
		/^--- (PASS|FAIL): / { name = $3; t = $4; gsub(/[()s]/, "", t); pending[++n] = t " " name; next }
		/^(ok|FAIL)[ \t]+[a-z]/ && $2 ~ /\// {
			for (i = 1; i <= n; i++) { split(pending[i], f, " "); printf "%9.1f s  %s %s\n", f[1], $2, f[2] }
			n = 0
		}' | sort -rn | awk -v n="$1" 'NR <= n' # reads all: no SIGPIPE under pipefail
}

# failures: the messages of each failed test (its file:line lines, at most
# the last 20; go test -v streams them under "=== RUN/NAME" before the
# "--- FAIL" line), printed last, where a short tail of the run shows them.
failures() {
	cat "$work"/*.out 2>/dev/null | awk '
		/^=== (RUN|NAME|CONT) / { cur = $3; next }
		/^ *--- FAIL: / {
			name = $3; print
			k = split(msgs[name], l, "\n")
			for (i = (k > 21 ? k - 20 : 1); i < k; i++) print "    " l[i]
			next
		}
		/^ +[A-Za-z0-9_.-]+\.go:[0-9]+: / && cur != "" { sub(/^ +/, ""); msgs[cur] = msgs[cur] $0 "\n" }' |
		awk 'NR <= 200' # reads all: no SIGPIPE under pipefail
}

# Explicit time-outs: a hung test fails its pass instead of the whole run.
run_tests unit -race -count=1 -timeout 15m ./... "$@"
# The packages with integration tests, one at a time (-p 1): their real
# processes and shared stores would otherwise compete for the same cores,
# and the unit pass has run every package already.
mapfile -t integration_pkgs < <(grep -rl --include='*_test.go' '^//go:build integration$' . | xargs -n1 dirname | sort -u)
run_tests integration -race -count=1 -p 1 -timeout 25m -tags integration "${integration_pkgs[@]}" "$@"

# --- 5. the compose cluster ---
# scripts/compose-test.sh --start installs and starts a Docker engine and
# builds the images; the tests of integration/compose run without -race
# (they drive containers); cleanup removes the containers and stops the
# engine. Exit 3: no engine here (not under CI=true): skipped.
compose_state="$work/compose"
compose_code=0
bash scripts/compose-test.sh --start "$compose_state" || compose_code=$?
case $compose_code in
0) run_tests compose -count=1 -timeout 1200s -tags compose ./integration/compose/ "$@" ;;
3) log "compose: skipped" ;;
*) run_failed+=(compose-setup) ;;
esac

log "the ten slowest tests:"
slowest 10 >&2

status=0
if [ ${#run_failed[@]} -gt 0 ]; then
	log "the failed tests, with their messages:"
	failures >&2
	log "FAILED: ${run_failed[*]}"
	status=1
fi
if [ ${#store_failed[@]} -gt 0 ]; then
	log "stores that could not be started: ${store_failed[*]}"
	$CI_MODE && status=1
fi
[ $status = 0 ] && log "PASS"
echo "summary: $passed passed, $failed failed, $skipped skipped"
exit $status
