package harness

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// given holds the ports FreePort handed to tests still running. Its check
// closes the listener again, so without it a second call could hand out
// the same port before the first server binds it: two servers of one
// cluster on one port.
var given struct {
	sync.Mutex
	ports map[int]bool
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago (a
// listener on it succeeded and is closed again) and that no test of this
// process holds, chosen at random so that parallel test processes
// rarely pick the same one. The port is the test's until it ends.
func FreePort(tb testing.TB) int {
	tb.Helper()
	// Below Linux's ephemeral range (32768-60999): a port the kernel hands
	// to some client connection while a test's server is down could not
	// be listened on again when the server restarts on it.
	const lo, hi = 20000, 32768
	given.Lock()
	defer given.Unlock()
	if given.ports == nil {
		given.ports = map[int]bool{}
	}
	for range 1000 {
		port := lo + mrand.IntN(hi-lo)
		if given.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		given.ports[port] = true
		tb.Cleanup(func() {
			given.Lock()
			delete(given.ports, port)
			given.Unlock()
		})
		return port
	}
	tb.Fatalf("harness: no free port in %d-%d", lo, hi)
	return 0
}

// UniqueName returns prefix followed by "_" and 12 random lowercase hex
// digits: a fresh name for a Cassandra keyspace, a PostgreSQL database or
// a Redis key prefix (at most 48 characters for a keyspace).
func UniqueName(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return strings.ToLower(prefix) + "_" + hex.EncodeToString(b[:])
}

// inCI reports whether the environment variable CI is "true": then a store
// that cannot be started fails the test instead of skipping it.
func inCI() bool { return os.Getenv("CI") == "true" }

// unavailable skips the test because a server cannot be had here, or fails
// it under CI=true.
func unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if inCI() {
		tb.Fatalf("harness: %s (CI=true: a store that cannot be started fails the run)", msg)
	}
	tb.Skipf("harness: %s (skipped; under CI=true this fails)", msg)
}

// logTail returns the last n lines of the file at path.
func logTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// process is one run of a server: its output goes to a log file, and it is
// killed (SIGKILL) if the test process dies without its cleanup.
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// startProcess runs path with args, appending its output to logPath after a
// header line. cred, if not nil, runs it as another user.
func startProcess(logPath, dir string, cred *syscall.Credential, path string, args ...string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "=== harness: %s: %s %s\n", time.Now().Format(time.RFC3339Nano), path, strings.Join(args, " "))
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr(cred)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", path, err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// running reports whether the process has not exited.
func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends sig and waits up to grace for the exit, then sends SIGKILL
// and waits for the exit.
func (p *process) stop(sig syscall.Signal, grace time.Duration) {
	p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
		return
	case <-time.After(grace):
	}
	p.cmd.Process.Kill()
	<-p.exited
}

// waitReady polls ready every interval until it returns nil, the process
// exits or timeout passes; it returns the last error.
func waitReady(p *process, timeout, interval time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if !p.running() {
			return fmt.Errorf("exited during start-up (%v)", p.cmd.ProcessState)
		}
		if err = ready(); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		time.Sleep(interval)
	}
}

// removeOrKeep removes a server's temporary directory at cleanup. When the
// test failed it keeps the directory's log and config files (the data is
// removed all the same) and logs where they are with the end of the log.
func removeOrKeep(tb testing.TB, dir, what, logPath string) {
	if !tb.Failed() {
		os.RemoveAll(dir)
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".log", ".yaml", ".xml":
		default:
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	tb.Logf("harness: %s in a failed test: its log and config are kept in %s; %s ends:\n%s", what, dir, logPath, logTail(logPath, 50))
}
