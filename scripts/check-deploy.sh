#!/usr/bin/env bash
# Checks the Docker deployment without a Docker engine:
#
# 1. docker-compose.yml is valid for docker-compose (Debian's package
#    docker-compose, installed on Debian as root when missing), with the
#    default profile of .env and with each store's profile, and publishes
#    ports on 127.0.0.1 only.
# 2. The binary builds with the Dockerfile's own build command (taken from
#    the Dockerfile, so the two cannot drift apart), and the result is what
#    the image needs: static, trimmed paths, stripped.
#
# Building the image and `docker compose up` are left to machines with a
# Docker engine. Without docker-compose (not Debian, not root) step 1 is
# skipped with a message, except under CI=true: then it fails.
set -euo pipefail

cd "$(dirname "$0")/.."

log() { echo "check-deploy.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# --- 1. the compose file ---

if ! command -v docker-compose >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && [ -f /etc/debian_version ] && command -v apt-get >/dev/null 2>&1; then
		log "apt-get install docker-compose"
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-compose >/dev/null
	fi
fi
if command -v docker-compose >/dev/null 2>&1; then
	for profiles in "" redis postgres cassandra; do
		# "" leaves COMPOSE_PROFILES to .env, as a plain `docker compose up`.
		log "docker-compose config -q${profiles:+ (COMPOSE_PROFILES=$profiles)}"
		if [ -n "$profiles" ]; then
			COMPOSE_PROFILES="$profiles" docker-compose config -q
		else
			docker-compose config -q
		fi
		# Every node's config file is one of deploy/.
		COMPOSE_PROFILES="${profiles:-redis}" docker-compose config |
			grep -o '/etc/limiterd/[a-z0-9_-]*\.yaml' | sort -u |
			while read -r f; do
				[ -f "deploy/${f#/etc/limiterd/}" ] || die "docker-compose.yml names $f, but deploy/${f#/etc/limiterd/} does not exist"
			done
	done
elif [ "${CI:-}" = true ]; then
	die "CI=true: docker-compose is missing and cannot be installed here (Debian: apt-get install docker-compose)"
else
	log "docker-compose is missing (Debian: apt-get install docker-compose): compose file not checked"
fi

# Every published port binds loopback: reaching a node from elsewhere is
# a decision to write down, not a default.
if open="$(grep -n 'ports:' docker-compose.yml | grep -v 'ports: \["127\.0\.0\.1:[0-9]*:[0-9]*"\(, "127\.0\.0\.1:[0-9]*:[0-9]*"\)*\]')"; then
	die "docker-compose.yml publishes a port beyond 127.0.0.1: $open"
fi

# --- 2. the binary, built as the Dockerfile builds it ---

build="$(sed -n 's/^RUN \(.*go build .*\)$/\1/p' Dockerfile)"
[ "$(printf '%s\n' "$build" | grep -c .)" = 1 ] || die "Dockerfile: want one RUN … go build line, found: ${build:-none}"
case "$build" in
*" -o /out/limiterd "*) ;;
*) die "Dockerfile: the go build line does not write /out/limiterd: $build" ;;
esac
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
log "${build/\/out\/limiterd/$out/limiterd}"
eval "${build/\/out\/limiterd/$out/limiterd}"

# The image is distroless/static: the binary must need no libc, and its
# build settings must be the ones the Dockerfile asks for (with -trimpath
# go does not record -ldflags: -s shows as a missing symbol table).
info="$(go version -m "$out/limiterd")"
for want in 'CGO_ENABLED=0' '-trimpath=true'; do
	grep -qF -- "$want" <<<"$info" || die "the binary's build settings lack $want:"$'\n'"$info"
done
if go tool nm "$out/limiterd" >/dev/null 2>&1; then
	die "the binary has a symbol table: not built with -ldflags=\"-s -w\""
fi
"$out/limiterd" schema postgres >/dev/null || die "the built binary does not run"

# The Dockerfile's Go is go.mod's (major.minor): the image builds with the
# toolchain the code is tested with.
want_go="$(awk '$1 == "go" {split($2, v, "."); print v[1] "." v[2]; exit}' go.mod)"
grep -q "^FROM golang:${want_go}[-.@ ]" Dockerfile || die "Dockerfile: the build stage is not golang:${want_go} (go.mod's go)"

log "ok: docker-compose.yml valid, binary built as the Dockerfile does ($(du -h "$out/limiterd" | cut -f1), static)"
