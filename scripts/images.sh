#!/usr/bin/env bash
# Builds the images docker-compose.yml runs, with no container registry:
#
#   limiterd:local            the static binary (CGO_ENABLED=0), alone
#   limiterd-redis:local      Debian's redis-server
#   limiterd-postgres:local   Debian's PostgreSQL 15
#   limiterd-cassandra:local  Debian's openjdk-17-jre-headless and
#                             Cassandra's jars (scripts/cassandra/fetch.sh)
#
#   bash scripts/images.sh                  all four
#   bash scripts/images.sh limiterd redis   some of them
#
# Each image is a root file system imported with `docker import`: the
# binary in an otherwise empty one, or Debian's packages installed by
# `debootstrap --variant=minbase` from the mirror apt already uses
# (LIMITERD_DEBIAN_MIRROR overrides it). Each carries the label
# limiterd.inputs, a hash of what it is built from (the binary; the
# suite, mirror, packages and files written into it; the jars): an image
# whose tag exists with the same hash is not built again. The Debian images
# are built in parallel. Needs a running Docker engine, and for the Debian
# images root and debootstrap.
set -euo pipefail

cd "$(dirname "$0")/.."

SUITE=bookworm
LABEL=limiterd.inputs

log() { echo "images.sh: $*" >&2; }
die() {
	log "$*"
	exit 1
}

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

mirror() {
	if [ -n "${LIMITERD_DEBIAN_MIRROR:-}" ]; then
		echo "$LIMITERD_DEBIAN_MIRROR"
		return
	fi
	# The URI apt uses for Debian's main archive (deb822 or one-line form).
	local m
	m="$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
		grep -oE 'https?://[^ ]*/debian/?( |$)' | grep -v security | head -n1 | tr -d ' ')" || true
	echo "${m:-http://deb.debian.org/debian}"
}

hash() { sha256sum | cut -c1-16; }

# current TAG: the inputs label of TAG, empty when there is no such image.
current() { docker image inspect -f "{{index .Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null || true; }

work="$(mktemp -d /tmp/limiterd-images.XXXXXX)"
trap 'rm -rf "$work"' EXIT

# --- the files written into the Debian images ---

redis_files() {
	cat <<'EOF'
=== /usr/local/bin/entrypoint 0755
#!/bin/sh
# Listens on every interface of the container: only the store network
# reaches it. Appends every write (fsync each second).
exec redis-server --bind 0.0.0.0 --protected-mode no --port 6379 \
	--dir /var/lib/redis --appendonly yes --save '' "$@"
EOF
}

postgres_files() {
	cat <<'EOF'
=== /usr/local/bin/entrypoint 0755
#!/bin/sh
# First start: a cluster in $PGDATA with the password of POSTGRES_PASSWORD
# for TCP clients and the database POSTGRES_DB. Then the server, listening
# on every interface of the container (only the store network reaches it).
set -eu
PATH=/usr/lib/postgresql/15/bin:$PATH
PGDATA=/var/lib/postgresql/data
export PGDATA
if [ ! -s "$PGDATA/PG_VERSION" ]; then
	printf '%s\n' "${POSTGRES_PASSWORD:?}" >/tmp/pw
	initdb -U postgres --pwfile=/tmp/pw --auth-local=trust --auth-host=scram-sha-256 >/dev/null
	rm /tmp/pw
	echo "host all all 0.0.0.0/0 scram-sha-256" >>"$PGDATA/pg_hba.conf"
	pg_ctl -w -o "-c listen_addresses=''" start >/dev/null
	createdb -U postgres "${POSTGRES_DB:-postgres}" 2>/dev/null || true
	pg_ctl -w -m fast stop >/dev/null
fi
exec postgres -c listen_addresses='*' -c unix_socket_directories=/tmp "$@"
EOF
}

cassandra_files() {
	cat <<'EOF'
=== /usr/local/bin/entrypoint 0755
#!/bin/sh
# One Cassandra node on the container's address, configured as the test
# harness configures it (integration/harness/cassandra.go).
set -eu
ip="$(getent hosts "$(cat /etc/hostname)" | awk '{print $1; exit}')"
dir=/var/lib/cassandra
mkdir -p "$dir/data" "$dir/tmp" "$dir/logs"
sed "s/@IP@/$ip/g; s#@DIR@#$dir#g" /etc/cassandra/cassandra.yaml.in >"$dir/cassandra.yaml"
exec java ${JVM_OPTS:--Xms1G -Xmx1G} -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError -Xss256k \
	-Djava.net.preferIPv4Stack=true -Djdk.attach.allowAttachSelf=true \
	-Dio.netty.tryReflectionSetAccessible=true -Dcassandra-foreground=yes \
	-Dcassandra.skip_wait_for_gossip_to_settle=0 -Dcassandra.shutdown_announce_in_ms=0 \
	-XX:TieredStopAtLevel=1 \
	--add-exports java.base/jdk.internal.misc=ALL-UNNAMED \
	--add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED \
	--add-exports java.management/com.sun.jmx.remote.security=ALL-UNNAMED \
	--add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED \
	--add-exports java.rmi/sun.rmi.server=ALL-UNNAMED \
	--add-exports java.sql/java.sql=ALL-UNNAMED \
	--add-exports java.base/java.lang.ref=ALL-UNNAMED \
	--add-exports jdk.unsupported/sun.misc=ALL-UNNAMED \
	--add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED \
	--add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED \
	--add-opens java.base/java.lang.module=ALL-UNNAMED \
	--add-opens java.base/jdk.internal.loader=ALL-UNNAMED \
	--add-opens java.base/jdk.internal.ref=ALL-UNNAMED \
	--add-opens java.base/jdk.internal.reflect=ALL-UNNAMED \
	--add-opens java.base/jdk.internal.math=ALL-UNNAMED \
	--add-opens java.base/jdk.internal.module=ALL-UNNAMED \
	--add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED \
	--add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED \
	--add-opens java.base/sun.nio.ch=ALL-UNNAMED \
	--add-opens java.base/java.io=ALL-UNNAMED \
	--add-opens java.base/java.lang.reflect=ALL-UNNAMED \
	--add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED \
	--add-opens java.base/java.lang=ALL-UNNAMED \
	--add-opens java.base/java.util=ALL-UNNAMED \
	--add-opens java.base/java.nio=ALL-UNNAMED \
	-Dcassandra.config=file://$dir/cassandra.yaml \
	-Dcassandra.storagedir=$dir/data -Dcassandra.logdir=$dir/logs \
	-Dlogback.configurationFile=/etc/cassandra/logback.xml \
	-Djava.io.tmpdir=$dir/tmp \
	-cp '/opt/cassandra/lib/*' org.apache.cassandra.service.CassandraDaemon
=== /etc/cassandra/cassandra.yaml.in 0644
cluster_name: limiterd
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
num_tokens: 1
listen_address: @IP@
rpc_address: 0.0.0.0
broadcast_rpc_address: @IP@
storage_port: 7000
native_transport_port: 9042
start_native_transport: true
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "@IP@:7000"
commitlog_sync: batch
read_request_timeout: 10000ms
write_request_timeout: 10000ms
range_request_timeout: 20000ms
request_timeout: 20000ms
auto_snapshot: false
hinted_handoff_enabled: false
disk_access_mode: standard
data_file_directories:
  - @DIR@/data/data
commitlog_directory: @DIR@/data/commitlog
saved_caches_directory: @DIR@/data/saved_caches
hints_directory: @DIR@/data/hints
cdc_raw_directory: @DIR@/data/cdc_raw
=== /etc/cassandra/logback.xml 0644
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
EOF
}

# write_files ROOT: writes the "=== PATH MODE" sections of stdin under ROOT.
write_files() {
	awk -v root="$1" '
		/^=== / { if (out) close(out); out = root $2; mode[out] = $3; system("mkdir -p \"$(dirname \"" out "\")\""); printf "" > out; next }
		{ print > out }
		END { if (out) close(out); for (f in mode) system("chmod " mode[f] " \"" f "\"") }'
}

# --- the images ---

# debian_image NAME PACKAGES FILES_FUNC EXTRA_INPUTS CHANGES...: a
# debootstrap of PACKAGES with the files of FILES_FUNC, imported as NAME
# with the docker import --change instructions CHANGES.
debian_image() {
	local name="$1" pkgs="$2" files="$3" extra="$4" start root inputs
	shift 4
	inputs="$({
		echo "$SUITE $(mirror) $pkgs $extra"
		"$files"
		printf '%s\n' "$@"
	} | hash)"
	if [ "$(current "$name")" = "$inputs" ]; then
		log "$name: up to date ($LABEL=$inputs)"
		return 0
	fi
	command -v debootstrap >/dev/null 2>&1 || die "$name: debootstrap is missing (apt-get install debootstrap)"
	[ "$(id -u)" = 0 ] || die "$name: debootstrap needs root"
	start="$(now)"
	root="$work/${name%%:*}"
	log "$name: debootstrap --variant=minbase --include=$pkgs $SUITE $(mirror)"
	if ! timeout 900 debootstrap --variant=minbase --include="$pkgs" "$SUITE" "$root" "$(mirror)" >"$work/${name%%:*}.log" 2>&1; then
		tail -n 30 "$work/${name%%:*}.log" >&2
		die "$name: debootstrap failed"
	fi
	# What only the build needed, and what a container never reads.
	rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
		"$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/locale
	"$files" | write_files "$root"
	if [ "$name" = limiterd-cassandra:local ]; then
		mkdir -p "$root/opt/cassandra"
		cp -r "$(bash scripts/cassandra/fetch.sh --print)" "$root/opt/cassandra/lib"
	fi
	local args=()
	for c in "$@" "LABEL $LABEL=$inputs"; do
		args+=(--change "$c")
	done
	tar -C "$root" -c . | timeout 300 docker import "${args[@]}" - "$name" >/dev/null
	rm -rf "$root"
	log "$name: built in $(since "$start") s ($(docker image inspect -f '{{.Size}}' "$name" | awk '{printf "%d MB", $1/1e6}'), $LABEL=$inputs)"
}

limiterd_image() {
	local name=limiterd:local start inputs root
	start="$(now)"
	root="$work/limiterd"
	mkdir -p "$root/usr/local/bin" "$root/tmp" "$root/etc"
	# The Dockerfile's build command (scripts/check-deploy.sh keeps it so).
	CGO_ENABLED=0 timeout 600 go build -trimpath -ldflags="-s -w" -o "$root/usr/local/bin/limiterd" ./cmd/limiterd
	# A user for the process, as distroless's nonroot (65532).
	echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$root/etc/passwd"
	echo 'nonroot:x:65532:' >"$root/etc/group"
	chmod 1777 "$root/tmp"
	local changes=(
		'USER 65532:65532'
		'EXPOSE 7070 7071'
		'ENV LIMITERD_GRPC_ADDR=0.0.0.0:7070 LIMITERD_HTTP_ADDR=0.0.0.0:7071'
		'ENTRYPOINT ["/usr/local/bin/limiterd"]'
	)
	inputs="$({
		sha256sum "$root/usr/local/bin/limiterd" | cut -d' ' -f1
		cat "$root/etc/passwd" "$root/etc/group"
		printf '%s\n' "${changes[@]}"
	} | hash)"
	if [ "$(current "$name")" = "$inputs" ]; then
		log "$name: up to date ($LABEL=$inputs; go build $(since "$start") s)"
		return 0
	fi
	local args=()
	for c in "${changes[@]}" "LABEL $LABEL=$inputs"; do
		args+=(--change "$c")
	done
	tar -C "$root" --owner=0 --group=0 -c . | timeout 120 docker import "${args[@]}" - "$name" >/dev/null
	log "$name: built in $(since "$start") s ($LABEL=$inputs)"
}

build() {
	case "$1" in
	limiterd) limiterd_image ;;
	redis)
		debian_image limiterd-redis:local redis-server redis_files "" \
			'USER redis' 'WORKDIR /var/lib/redis' 'EXPOSE 6379' 'ENTRYPOINT ["/usr/local/bin/entrypoint"]'
		;;
	postgres)
		debian_image limiterd-postgres:local postgresql-15 postgres_files "" \
			'USER postgres' 'WORKDIR /var/lib/postgresql' 'EXPOSE 5432' \
			'ENTRYPOINT ["/usr/local/bin/entrypoint"]'
		;;
	cassandra)
		local lib
		bash scripts/cassandra/fetch.sh || die "cannot fetch Cassandra's jars"
		lib="$(bash scripts/cassandra/fetch.sh --print)"
		debian_image limiterd-cassandra:local openjdk-17-jre-headless cassandra_files \
			"$(cd "$lib" && ls -l --time-style=+ . | hash)" \
			'EXPOSE 9042' 'ENTRYPOINT ["/usr/local/bin/entrypoint"]'
		;;
	*) die "unknown image $1 (limiterd, redis, postgres, cassandra)" ;;
	esac
}

timeout 10 docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info)"

images=("$@")
[ ${#images[@]} -gt 0 ] || images=(limiterd redis postgres cassandra)
begin="$(now)"
pids=()
for i in "${images[@]}"; do
	case "$i" in
	limiterd | redis | postgres | cassandra) ;;
	*) die "unknown image $i (limiterd, redis, postgres, cassandra)" ;;
	esac
	build "$i" &
	pids+=($!)
done
status=0
for p in "${pids[@]}"; do
	wait "$p" || status=1
done
[ $status = 0 ] || die "an image failed to build"
log "images ${images[*]} ready in $(since "$begin") s"
