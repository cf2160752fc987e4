package harness

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// EnvRedis names the environment variable with the host:port of a running
// Redis server that SharedRedis returns.
const EnvRedis = "LIMITERD_TEST_REDIS"

// Redis is a redis-server on a loopback port, without persistence, or a
// shared server (SharedRedis).
type Redis struct {
	tb       testing.TB
	addr     string
	external bool
	bin      string
	dir      string
	logPath  string

	mu   sync.Mutex
	proc *process
}

// StartRedis starts a redis-server (from PATH, Debian package redis-server)
// on a free loopback port, in a temporary directory, with the append-only
// file on (as a production server keeps its data across restarts), and waits until it answers PING. It is stopped at cleanup. When
// redis-server is missing the test is skipped (fails under CI=true).
func StartRedis(tb testing.TB) *Redis {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(tb, "redis-server not found (apt-get install redis-server): %v", err)
		return nil
	}
	dir, err := os.MkdirTemp("", "limiterd-redis-")
	if err != nil {
		tb.Fatal(err)
	}
	r := &Redis{
		tb:      tb,
		addr:    fmt.Sprintf("127.0.0.1:%d", FreePort(tb)),
		bin:     bin,
		dir:     dir,
		logPath: filepath.Join(dir, "redis.log"),
	}
	tb.Cleanup(func() {
		r.stop(syscall.SIGKILL)
		removeOrKeep(tb, dir, "redis "+r.addr, r.logPath)
	})
	r.Start()
	return r
}

// SharedRedis returns the Redis server named by LIMITERD_TEST_REDIS when it
// is set, and otherwise starts one (StartRedis). The caller keeps its keys
// apart with its own key prefix (UniqueName). A shared server must not be
// stopped, killed or restarted.
func SharedRedis(tb testing.TB) *Redis {
	tb.Helper()
	addr := os.Getenv(EnvRedis)
	if addr == "" {
		return StartRedis(tb)
	}
	if err := redisPing(addr); err != nil {
		tb.Fatalf("harness: %s=%s: %v", EnvRedis, addr, err)
	}
	return &Redis{tb: tb, addr: addr, external: true}
}

// Addr returns the server's host:port.
func (r *Redis) Addr() string { return r.addr }

// Start starts the server again on the same port (after Stop or Kill) and
// waits until it answers PING; the data written before Stop or Kill is
// there again (append-only file, fsync every second: a process kill loses
// nothing the server acknowledged).
func (r *Redis) Start() {
	r.tb.Helper()
	r.own("Start")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil && r.proc.running() {
		r.tb.Fatalf("harness: redis %s already running", r.addr)
	}
	_, port, _ := net.SplitHostPort(r.addr)
	p, err := startProcess(r.logPath, r.dir, nil, r.bin,
		"--port", port, "--bind", "127.0.0.1", "--daemonize", "no",
		"--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--dir", r.dir, "--logfile", "")
	if err != nil {
		r.tb.Fatalf("harness: redis: %v", err)
	}
	r.proc = p
	if err := waitReady(p, 30*time.Second, 20*time.Millisecond, func() error { return redisPing(r.addr) }); err != nil {
		p.stop(syscall.SIGKILL, 0)
		r.tb.Fatalf("harness: redis %s: %v; log %s ends:\n%s", r.addr, err, r.logPath, logTail(r.logPath, 50))
	}
}

// Stop stops the server (SIGTERM) and waits for its exit.
func (r *Redis) Stop() {
	r.tb.Helper()
	r.own("Stop")
	r.stop(syscall.SIGTERM)
}

// Kill kills the server (SIGKILL) and waits for its exit.
func (r *Redis) Kill() {
	r.tb.Helper()
	r.own("Kill")
	r.stop(syscall.SIGKILL)
}

func (r *Redis) stop(sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc != nil {
		r.proc.stop(sig, 10*time.Second)
		r.proc = nil
	}
}

func (r *Redis) own(method string) {
	r.tb.Helper()
	if r.external {
		r.tb.Fatalf("harness: Redis.%s on the shared server %s=%s", method, EnvRedis, r.addr)
	}
}

// redisPing sends PING over a new connection and expects +PONG.
func redisPing(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}
