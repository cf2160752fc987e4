package redis_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	gosync "sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limiterd/limiterd/integration/harness"
)

// testServer is a redis-server process on a free loopback port with extra
// arguments (the cluster test needs --cluster-enabled, which
// harness.StartRedis does not take).
type testServer struct {
	port int
	dir  string
	args []string
	mu   gosync.Mutex
	cmd  *exec.Cmd
}

func (s *testServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// requireBinary finds a redis tool: skipped when missing, except under
// CI=true where a missing server is a failure.
func requireBinary(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s not found (CI=true): install it with apt-get install -y redis-server", name)
		}
		tb.Skipf("%s not found: apt-get install -y redis-server", name)
	}
	return p
}

// startServerOn starts a redis-server on port with extra arguments; it is
// killed when tb ends.
func startServerOn(tb testing.TB, port int, extra ...string) *testServer {
	tb.Helper()
	bin := requireBinary(tb, "redis-server")
	dir, err := os.MkdirTemp("", "limiterd-redis-")
	if err != nil {
		tb.Fatal(err)
	}
	s := &testServer{port: port, dir: dir}
	s.args = append([]string{"--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", dir, "--logfile", filepath.Join(dir, "log")}, extra...)
	s.args = append([]string{bin, "--port", strconv.Itoa(s.port)}, s.args...)
	tb.Cleanup(func() { s.Kill(); os.RemoveAll(dir) })
	if err := s.Start(); err != nil {
		tb.Fatal(err)
	}
	return s
}

// Start (re)starts the server on its port and waits until it answers.
func (s *testServer) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.args[0], s.args[1:]...)
	if err := cmd.Start(); err != nil {
		return err
	}
	s.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
			return fmt.Errorf("redis-server on %s did not start: %v\n%s", s.Addr(), err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops the server at once (SIGKILL).
func (s *testServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

var addrs gosync.Map // testing.TB → the Redis address it uses

// redisAddr returns the address of the Redis server tb uses:
// harness.SharedRedis (LIMITERD_TEST_REDIS, or a private server started for
// tb), the same one for every call within tb.
func redisAddr(tb testing.TB) string {
	tb.Helper()
	if a, ok := addrs.Load(tb); ok {
		return a.(string)
	}
	a := harness.SharedRedis(tb).Addr()
	addrs.Store(tb, a)
	tb.Cleanup(func() { addrs.Delete(tb) })
	return a
}
