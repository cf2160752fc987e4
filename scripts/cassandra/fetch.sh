#!/usr/bin/env bash
# Fetches Apache Cassandra's jars (org.apache.cassandra:cassandra-all and its
# runtime dependencies) from Maven Central into a cache outside the
# repository, for the integration harness (integration/harness/cassandra.go)
# which runs Cassandra from them with Java 17.
#
#   scripts/cassandra/fetch.sh            fetch into the default lib dir
#   scripts/cassandra/fetch.sh DIR        fetch into DIR
#   scripts/cassandra/fetch.sh --print    print the default lib dir and exit
#
# The default lib dir is
#   ${LIMITERD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/limiterd}/cassandra-$CASSANDRA_VERSION/lib
# (the harness computes the same path). Nothing is done when the dir exists:
# it is filled in a temporary dir next to it and renamed when complete, so
# an existing dir is a complete one. Concurrent runs are serialised with
# flock. Needs mvn (Debian: maven) and a JDK.
set -euo pipefail

CASSANDRA_VERSION="${CASSANDRA_VERSION:-5.0.8}"
cache="${LIMITERD_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/limiterd}"
lib="$cache/cassandra-$CASSANDRA_VERSION/lib"

case "${1:-}" in
--print)
	echo "$lib"
	exit 0
	;;
"") ;;
*) lib="$1" ;;
esac

log() { echo "cassandra/fetch: $*" >&2; }

if [ -d "$lib" ]; then
	exit 0
fi
if ! command -v mvn >/dev/null 2>&1; then
	log "mvn not found: install maven (apt-get install maven)"
	exit 1
fi
# Maven itself runs on any JDK; prefer Java 17 when JAVA_HOME is unset.
if [ -z "${JAVA_HOME:-}" ] && [ -x /usr/lib/jvm/java-17-openjdk-amd64/bin/java ]; then
	export JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64
fi

parent="$(dirname "$lib")"
mkdir -p "$parent"
exec 9>"$parent/.fetch.lock"
flock -w 900 9 || {
	log "timed out waiting for another fetch ($parent/.fetch.lock)"
	exit 1
}
if [ -d "$lib" ]; then # fetched by a concurrent run
	exit 0
fi

work="$(mktemp -d "$parent/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cat >"$work/pom.xml" <<POM
<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>io.limiterd.test</groupId>
  <artifactId>cassandra-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.cassandra</groupId>
      <artifactId>cassandra-all</artifactId>
      <version>$CASSANDRA_VERSION</version>
    </dependency>
  </dependencies>
</project>
POM

log "fetching cassandra-all $CASSANDRA_VERSION into $lib"
start=$SECONDS
# cassandra's parent pom names a systemPath jar (jmc5.path) that Maven
# reports as an [ERROR] but that does not stop the copy: judge by the exit
# code and the presence of the main jar, and show the output only on failure.
if ! (cd "$work" && mvn -B -q \
	org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies \
	-DincludeScope=runtime -DoutputDirectory="$work/lib") >"$work/mvn.log" 2>&1; then
	cat "$work/mvn.log" >&2
	log "mvn failed"
	exit 1
fi
if ! ls "$work/lib/cassandra-all-$CASSANDRA_VERSION.jar" >/dev/null 2>&1; then
	cat "$work/mvn.log" >&2
	log "cassandra-all-$CASSANDRA_VERSION.jar missing after mvn"
	exit 1
fi
mv "$work/lib" "$lib"
log "fetched $(ls "$lib" | wc -l) jars in $((SECONDS - start))s"
