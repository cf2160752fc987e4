// Package harness starts real servers for limiterd's integration tests:
// Redis, PostgreSQL and Apache Cassandra, each on free loopback ports in a
// temporary directory, stopped at the test's cleanup. It also starts
// limiterd processes (StartLimiterd, Cluster).
//
// Each store has a Start function that runs a private server the test may
// stop, kill and restart (StartRedis, StartPostgres, StartCassandra), and a
// Shared function (SharedRedis, SharedPostgres, SharedCassandra) that uses a
// server already running when its environment variable is set and starts a
// private one otherwise:
//
//	LIMITERD_TEST_REDIS      host:port of a Redis server
//	LIMITERD_TEST_POSTGRES   DSN of a PostgreSQL database whose user may
//	                         create databases
//	LIMITERD_TEST_CASSANDRA  host:port of a Cassandra native transport
//
// scripts/test.sh starts one of each (with ./integration/harness/cmd/stores)
// and sets these variables. A shared server is not to be stopped, killed or
// restarted: those methods fail the test. Callers of a shared server isolate
// themselves: SharedPostgres creates a fresh database for each call; with
// Redis the caller uses its own key prefix and with Cassandra its own
// keyspace (UniqueName makes such names).
//
// The servers come from Debian's packages (redis-server, postgresql) and,
// for Cassandra, from cassandra-all's jars that scripts/cassandra/fetch.sh
// downloads with Maven into a cache outside the repository, run with the
// Java 17 at /usr/lib/jvm/java-17-openjdk-amd64. When a server binary or
// jar is missing, the test is skipped, except when the environment variable
// CI is "true": then it fails. Other variables:
//
//	LIMITERD_CACHE_DIR           the cache (default $XDG_CACHE_HOME/limiterd,
//	                             or ~/.cache/limiterd)
//	LIMITERD_JAVA                the java command for Cassandra (11 or 17)
//	LIMITERD_CASSANDRA_JVM_OPTS  more flags for Cassandra's JVM
//
// Each server (and limiterd process) runs as a child of the test process
// that dies with it (Linux's parent-death signal), so a test binary killed
// by its time-out leaves no server behind, and in its own process group, so
// a Ctrl-C reaches only its parent, which stops it; each runs in its own
// directory under /tmp,
// removed at cleanup, or kept when the test failed (the failure message
// then names it and quotes the end of the server's log).
//
// This package imports no package of this repository except the generated
// API (api/proto/...).
package harness
