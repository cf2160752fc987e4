package harness

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
)

// EnvCassandra names the environment variable with the host:port of a
// running Cassandra's native transport that SharedCassandra returns.
const EnvCassandra = "LIMITERD_TEST_CASSANDRA"

// CassandraVersion is the version of org.apache.cassandra:cassandra-all
// that StartCassandra runs (the default of scripts/cassandra/fetch.sh).
const CassandraVersion = "5.0.8"

// CassandraStartTimeout bounds a start or restart of Cassandra, until it
// answers a query.
const CassandraStartTimeout = 180 * time.Second

// defaultJava is the JDK Cassandra runs on: Cassandra 5.0 supports Java 11
// and 17 only (a newer default java cannot start it). LIMITERD_JAVA
// overrides it.
const defaultJava = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"

// cassandraJVMFlags are the flags of the java command besides the paths:
// a 1 GiB heap, quick start and stop for a single test node, and the module
// flags of Cassandra 5.0's conf/jvm17-server.options. Flags in
// LIMITERD_CASSANDRA_JVM_OPTS (split at spaces) are added after them.
var cassandraJVMFlags = []string{
	"-Xms1G", "-Xmx1G", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError",
	"-Xss256k",
	"-Djava.net.preferIPv4Stack=true",
	"-Djdk.attach.allowAttachSelf=true",
	"-Dio.netty.tryReflectionSetAccessible=true",
	"-Dcassandra-foreground=yes",
	"-Dcassandra.skip_wait_for_gossip_to_settle=0",
	"-Dcassandra.shutdown_announce_in_ms=0",
	// C1 only: halves the start-up (about 15 s to 7 s on 2 cores), enough
	// throughput for tests.
	"-XX:TieredStopAtLevel=1",
	"--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
	"--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
	"--add-exports", "java.management/com.sun.jmx.remote.security=ALL-UNNAMED",
	"--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
	"--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
	"--add-exports", "java.sql/java.sql=ALL-UNNAMED",
	"--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
	"--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
	"--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
	"--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",
	"--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
	"--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
	"--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
	"--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
	"--add-opens", "java.base/java.io=ALL-UNNAMED",
	"--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
	"--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
	"--add-opens", "java.base/java.lang=ALL-UNNAMED",
	"--add-opens", "java.base/java.util=ALL-UNNAMED",
	"--add-opens", "java.base/java.nio=ALL-UNNAMED",
}

// cassandraYAML is a minimal single-node cassandra.yaml (Cassandra rejects
// unknown keys): %[1]s is the directory, %[2]d the storage (gossip) port and
// %[3]d the native transport (CQL) port.
//
// commitlog_sync is batch, so that an acknowledged write survives Kill: with
// periodic sync the commit log is replayed only up to its last sync, and a
// kill loses up to commitlog_sync_period of acknowledged writes (about
// 1.5 ms more per sequential write here). The system keyspaces are durable
// too (no -Dcassandra.unsafesystem, which loses schema changes at a kill).
const cassandraYAML = `cluster_name: limiterd-test
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
num_tokens: 1
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: %[2]d
native_transport_port: %[3]d
start_native_transport: true
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:%[2]d"
commitlog_sync: batch
# A loaded 2-core test machine stalls requests for seconds at times; the
# default server timeouts (2 s writes, 5 s reads) would fail requests the
# node completes a moment later.
read_request_timeout: 10000ms
write_request_timeout: 10000ms
range_request_timeout: 20000ms
request_timeout: 20000ms
auto_snapshot: false
hinted_handoff_enabled: false
disk_access_mode: standard
data_file_directories:
  - %[1]s/data/data
commitlog_directory: %[1]s/data/commitlog
saved_caches_directory: %[1]s/data/saved_caches
hints_directory: %[1]s/data/hints
cdc_raw_directory: %[1]s/data/cdc_raw
`

// cassandraLogback sends Cassandra's log at INFO to standard output, which
// the harness appends to cassandra.log (without a logback.xml logback logs
// everything at DEBUG).
const cassandraLogback = `<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <logger name="org.apache.cassandra" level="INFO"/>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
`

// Cassandra is an Apache Cassandra 5.0 node on loopback ports, or a shared
// server (SharedCassandra).
type Cassandra struct {
	tb       testing.TB
	host     string
	port     int
	external bool
	java     string
	lib      string
	dir      string
	logPath  string
	args     []string

	mu   sync.Mutex
	proc *process
}

// StartCassandra starts a single-node Apache Cassandra 5.0 from
// cassandra-all's jars with Java 17 on free loopback ports (native
// transport and storage) in a temporary directory, and waits until it
// answers a CQL query (at most CassandraStartTimeout). It is killed and
// removed at cleanup.
//
// The jars are fetched with Maven by scripts/cassandra/fetch.sh into
// $XDG_CACHE_HOME/limiterd/cassandra-VERSION/lib (~/.cache when unset;
// LIMITERD_CACHE_DIR replaces $XDG_CACHE_HOME/limiterd) when missing. When
// they cannot be had or Java 17 is missing the test is skipped (fails under
// CI=true).
func StartCassandra(tb testing.TB) *Cassandra {
	tb.Helper()
	java := os.Getenv("LIMITERD_JAVA")
	if java == "" {
		java = defaultJava
	}
	if !isExecutable(java) {
		unavailable(tb, "%s not found (apt-get install openjdk-17-jre-headless; Cassandra 5.0 needs Java 11 or 17)", java)
		return nil
	}
	lib, err := cassandraLib()
	if err != nil {
		unavailable(tb, "Cassandra's jars: %v", err)
		return nil
	}
	dir, err := os.MkdirTemp("", "limiterd-cassandra-")
	if err != nil {
		tb.Fatal(err)
	}
	c := &Cassandra{
		tb: tb, host: "127.0.0.1", port: FreePort(tb), java: java, lib: lib, dir: dir,
		logPath: filepath.Join(dir, "cassandra.log"),
	}
	tb.Cleanup(func() {
		c.stop(syscall.SIGKILL)
		removeOrKeep(tb, dir, fmt.Sprintf("cassandra %s:%d", c.host, c.port), c.logPath)
	})
	storagePort := FreePort(tb)
	for storagePort == c.port {
		storagePort = FreePort(tb)
	}
	files := map[string]string{
		"cassandra.yaml": fmt.Sprintf(cassandraYAML, dir, storagePort, c.port),
		"logback.xml":    cassandraLogback,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		tb.Fatal(err)
	}
	c.args = append(append([]string(nil), cassandraJVMFlags...), strings.Fields(os.Getenv("LIMITERD_CASSANDRA_JVM_OPTS"))...)
	c.args = append(c.args,
		"-Dcassandra.config=file://"+filepath.Join(dir, "cassandra.yaml"),
		"-Dcassandra.storagedir="+filepath.Join(dir, "data"),
		"-Dcassandra.logdir="+filepath.Join(dir, "logs"),
		"-Dlogback.configurationFile="+filepath.Join(dir, "logback.xml"),
		"-Djava.io.tmpdir="+filepath.Join(dir, "tmp"),
		"-cp", filepath.Join(lib, "*"),
		"org.apache.cassandra.service.CassandraDaemon")
	c.Start()
	return c
}

// SharedCassandra returns the Cassandra named by LIMITERD_TEST_CASSANDRA
// (host:port) when it is set, after checking that it answers, and
// otherwise starts one (StartCassandra). The caller uses its own keyspace
// (UniqueName). A shared server must not be stopped, killed or restarted.
func SharedCassandra(tb testing.TB) *Cassandra {
	tb.Helper()
	addr := os.Getenv(EnvCassandra)
	if addr == "" {
		return StartCassandra(tb)
	}
	host, portStr, err := net.SplitHostPort(addr)
	port, err2 := strconv.Atoi(portStr)
	if err != nil || err2 != nil {
		tb.Fatalf("harness: %s=%q: want host:port", EnvCassandra, addr)
	}
	c := &Cassandra{tb: tb, host: host, port: port, external: true}
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := cassandraReady(c.host, c.port)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			tb.Fatalf("harness: %s=%s does not answer: %v", EnvCassandra, addr, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// Hosts returns the node's address as gocql takes it: ["127.0.0.1:PORT"].
func (c *Cassandra) Hosts() []string {
	return []string{net.JoinHostPort(c.host, strconv.Itoa(c.port))}
}

// Host returns the node's IP address.
func (c *Cassandra) Host() string { return c.host }

// Port returns the native transport (CQL) port.
func (c *Cassandra) Port() int { return c.port }

// Start starts the node again on the same ports and data (after Kill or
// Stop) and waits until it answers a query.
func (c *Cassandra) Start() {
	c.tb.Helper()
	c.own("Start")
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil && c.proc.running() {
		c.tb.Fatalf("harness: cassandra %s:%d already running", c.host, c.port)
	}
	began := time.Now()
	p, err := startProcess(c.logPath, c.dir, nil, c.java, c.args...)
	if err != nil {
		c.tb.Fatalf("harness: cassandra: %v", err)
	}
	c.proc = p
	err = waitReady(p, CassandraStartTimeout, 250*time.Millisecond, func() error { return cassandraReady(c.host, c.port) })
	if err != nil {
		p.stop(syscall.SIGKILL, 0)
		c.tb.Fatalf("harness: cassandra %s:%d: %v; log %s ends:\n%s", c.host, c.port, err, c.logPath, logTail(c.logPath, 50))
	}
	c.tb.Logf("harness: cassandra %s %s:%d ready in %.1fs (log %s)", CassandraVersion, c.host, c.port, time.Since(began).Seconds(), c.logPath)
}

// Stop stops the node (SIGTERM: Cassandra's shutdown hook drains it) and
// waits for its exit, killing it after a minute.
func (c *Cassandra) Stop() {
	c.tb.Helper()
	c.own("Stop")
	c.stop(syscall.SIGTERM)
}

// Kill kills the node (SIGKILL) and waits for its exit. Acknowledged writes
// survive it (commitlog_sync is batch): the next Start replays them.
func (c *Cassandra) Kill() {
	c.tb.Helper()
	c.own("Kill")
	c.stop(syscall.SIGKILL)
}

func (c *Cassandra) stop(sig syscall.Signal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		c.proc.stop(sig, time.Minute)
		c.proc = nil
	}
}

func (c *Cassandra) own(method string) {
	c.tb.Helper()
	if c.external {
		c.tb.Fatalf("harness: Cassandra.%s on the shared server %s=%s:%d", method, EnvCassandra, c.host, c.port)
	}
}

// cassandraReady reports whether the node accepts CQL connections and
// answers SELECT release_version FROM system.local.
func cassandraReady(host string, port int) error {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	conn.Close()
	cluster := gocql.NewCluster(addr)
	cluster.ProtoVersion = 4
	cluster.DisableInitialHostLookup = true
	cluster.ConnectTimeout = 5 * time.Second
	cluster.Timeout = 5 * time.Second
	cluster.NumConns = 1
	cluster.Logger = gocql.NewLogger(gocql.LogLevelNone)
	session, err := cluster.CreateSession()
	if err != nil {
		return err
	}
	defer session.Close()
	var version string
	if err := session.Query("SELECT release_version FROM system.local").Scan(&version); err != nil {
		return err
	}
	if version == "" {
		return errors.New("empty release_version")
	}
	return nil
}

var fetchMu sync.Mutex

// cassandraLib returns the directory of Cassandra's jars, fetching them
// with scripts/cassandra/fetch.sh when it does not exist.
func cassandraLib() (string, error) {
	cache := os.Getenv("LIMITERD_CACHE_DIR")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(base, "limiterd")
	}
	lib := filepath.Join(cache, "cassandra-"+CassandraVersion, "lib")
	fetchMu.Lock()
	defer fetchMu.Unlock()
	if fi, err := os.Stat(lib); err == nil && fi.IsDir() {
		return lib, nil
	}
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "..", "scripts", "cassandra", "fetch.sh")
	if _, err := os.Stat(script); err != nil {
		return "", fmt.Errorf("%s missing and no fetch script: %v", lib, err)
	}
	cmd := exec.Command("bash", script, lib)
	cmd.Env = append(os.Environ(), "CASSANDRA_VERSION="+CassandraVersion)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%s missing and %s failed: %v\n%s", lib, script, err, out)
	}
	return lib, nil
}
