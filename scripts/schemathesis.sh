#!/usr/bin/env bash
# Fuzzes limiterd's JSON API against its own OpenAPI document with
# schemathesis (https://schemathesis.readthedocs.io): requests generated
# from the schema, valid and invalid, must get no 5xx and no answer outside
# the schema (status, content type, headers, body).
#
#   bash scripts/schemathesis.sh [SECONDS]   the time budget of the run
#                                            (default 40)
#
# Installs schemathesis $SCHEMATHESIS_VERSION with pip into a venv under the
# cache directory (${LIMITERD_CACHE_DIR:-~/.cache/limiterd}/schemathesis)
# when missing or at another version; needs python3 with venv. Builds and
# starts limiterd on its default config on free loopback ports, runs
# `st run --checks all` bounded by the budget, and stops limiterd.
#
# Two checks, about which requests are accepted rather than about the
# answers, are left out:
#   positive_data_acceptance wants every request the schema allows to be
#     accepted; the schema, generated from limiter.proto, cannot say what
#     the service refuses with 400 or 404: an empty key, an `at` outside
#     the accepted range, a window size or namespace the server is not
#     configured with, an unknown field;
#   negative_data_rejection wants every request the schema forbids to be
#     refused; the proto3 JSON mapping accepts more than the schema shows:
#     null for any field (the field's default), numbers in strings.
#
# Without python3 or the package index it skips (exit 0), except under
# CI=true, where that fails the run.
set -euo pipefail

SCHEMATHESIS_VERSION="${SCHEMATHESIS_VERSION:-4.32.5}"

cd "$(dirname "$0")/.."
budget="${1:-40}"
CI_MODE=false
[ "${CI:-}" = true ] && CI_MODE=true

log() { echo "schemathesis.sh: $*" >&2; }
skip() {
	if $CI_MODE; then
		log "CI=true: $*"
		exit 1
	fi
	log "$*: skipped"
	exit 0
}

cache="${LIMITERD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/limiterd}"
venv="$cache/schemathesis"
have=""
[ -x "$venv/bin/st" ] && have="$("$venv/bin/st" --version 2>/dev/null | awk '{print $NF}')" || true
if [ "$have" != "$SCHEMATHESIS_VERSION" ]; then
	command -v python3 >/dev/null 2>&1 || skip "no python3"
	log "installing schemathesis $SCHEMATHESIS_VERSION into $venv"
	rm -rf "$venv"
	mkdir -p "$cache"
	if ! python3 -m venv "$venv" >&2 || ! "$venv/bin/pip" install -q "schemathesis==$SCHEMATHESIS_VERSION" >&2; then
		rm -rf "$venv"
		skip "cannot install schemathesis $SCHEMATHESIS_VERSION"
	fi
fi

work="$(mktemp -d /tmp/limiterd-schemathesis.XXXXXX)"
pid=""
cleanup() {
	local status=$?
	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT

go build -o "$work/limiterd" ./cmd/limiterd
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
http_addr="127.0.0.1:$(free_port)"
"$work/limiterd" --grpc-addr "127.0.0.1:$(free_port)" --http-addr "$http_addr" >"$work/limiterd.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
	if curl -fsS "http://$http_addr/readyz" >/dev/null 2>&1; then
		break
	fi
	kill -0 "$pid" 2>/dev/null || {
		cat "$work/limiterd.log" >&2
		log "limiterd exited"
		exit 1
	}
	sleep 0.1
done

log "st run for at most ${budget}s against http://$http_addr"
status=0
(cd "$work" && "$venv/bin/st" run "http://$http_addr/openapi.json" --url "http://$http_addr" \
	--checks all --exclude-checks positive_data_acceptance,negative_data_rejection \
	--max-time "$budget" --workers 2 --request-timeout 5 \
	--generation-database none --no-color) || status=$?
if [ "$status" != 0 ]; then
	log "failed (exit $status); limiterd's log:"
	tail -n 40 "$work/limiterd.log" >&2
fi
exit "$status"
