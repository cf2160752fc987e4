package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// LimiterdBinary builds cmd/limiterd once per test process and returns its
// path.
func LimiterdBinary(tb testing.TB) string {
	tb.Helper()
	return BuildLimiterdWith(tb)
}

var builds struct {
	mu    sync.Mutex
	paths map[string]string
}

// BuildLimiterdWith builds cmd/limiterd with extra go build flags (-tags
// faultclock, -overlay FILE) once per set of flags and test process, and
// returns its path.
//
// The binaries live in one directory under the system's temporary
// directory, a file per set of flags, each replaced by a rename: test
// processes leave only these behind, and one still running an older
// binary keeps its file. A build with an overlay is the test's own (its
// overlay file is) and goes to the test's temporary directory instead.
func BuildLimiterdWith(tb testing.TB, flags ...string) string {
	tb.Helper()
	key := strings.Join(flags, "\x00")
	overlay := slices.Contains(flags, "-overlay")
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if p, ok := builds.paths[key]; ok && !overlay {
		return p
	}
	sum := sha256.Sum256([]byte(key))
	path := filepath.Join(os.TempDir(), "limiterd-test-bin", fmt.Sprintf("limiterd-%x", sum[:6]))
	if overlay {
		path = filepath.Join(tb.TempDir(), "limiterd")
	}
	if err := goBuild(path, flags); err != nil {
		tb.Fatal(err)
	}
	if builds.paths == nil {
		builds.paths = map[string]string{}
	}
	if !overlay {
		builds.paths[key] = path
	}
	return path
}

// goBuild builds cmd/limiterd into a file beside path and renames it to
// path.
func goBuild(path string, flags []string) error {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	args := append(append([]string{"build", "-o", tmp}, flags...), "./cmd/limiterd")
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return os.Rename(tmp, path)
}

// Options start a limiterd some other way than the plain build.
type Options struct {
	// Bin is the binary to run (BuildLimiterdWith); empty: LimiterdBinary.
	Bin string
	// Env is added to the process's environment.
	Env []string
}

// StartLimiterdWith is StartLimiterd with options.
func StartLimiterdWith(tb testing.TB, name, config string, o Options) *Limiterd {
	tb.Helper()
	return startOpts(tb, name, config, fmt.Sprintf("127.0.0.1:%d", FreePort(tb)), fmt.Sprintf("127.0.0.1:%d", FreePort(tb)), nil, o)
}

// Limiterd is one limiterd process on loopback ports.
type Limiterd struct {
	Name     string
	GRPCAddr string
	HTTPAddr string
	// AdminAddr serves /debug/pprof/.
	AdminAddr string
	Client    limiterv1.RateLimiterClient
	// TLS is the client config of a limiterd started with
	// StartLimiterdTLS; nil for plaintext.
	TLS *tls.Config

	tb      testing.TB
	bin     string
	cfgPath string
	logPath string
	conn    *grpc.ClientConn
	web     *http.Client
	// prefix runs the process under a command (prlimit ...), which
	// execs it: the PID stays the process's.
	prefix []string
	env    []string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	// exitCode is the last run's exit status.
	exitCode atomic.Int64
}

// StartLimiterd writes config (the stores and namespaces part of a limiterd
// config file) and starts a limiterd named name with it on free ports,
// waiting until /readyz answers. The process is stopped at cleanup.
func StartLimiterd(tb testing.TB, name, config string) *Limiterd {
	tb.Helper()
	return StartLimiterdAt(tb, name, config,
		fmt.Sprintf("127.0.0.1:%d", FreePort(tb)), fmt.Sprintf("127.0.0.1:%d", FreePort(tb)))
}

// StartLimiterdAt is StartLimiterd on the given gRPC and HTTP addresses,
// for callers that publish fixed ports (the cluster command).
func StartLimiterdAt(tb testing.TB, name, config, grpcAddr, httpAddr string) *Limiterd {
	tb.Helper()
	return start(tb, name, config, grpcAddr, httpAddr, nil)
}

// StartLimiterdTLS is StartLimiterd for a config with a tls: section: the
// harness's own calls (the readiness check, Metrics, Client) use client.
func StartLimiterdTLS(tb testing.TB, name, config string, client *tls.Config) *Limiterd {
	tb.Helper()
	return start(tb, name, config,
		fmt.Sprintf("127.0.0.1:%d", FreePort(tb)), fmt.Sprintf("127.0.0.1:%d", FreePort(tb)), client)
}

// StartLimiterdUnder is StartLimiterd with the process started by the
// command prefix, which must exec it (say prlimit --nofile=2048:2048).
func StartLimiterdUnder(tb testing.TB, name, config string, prefix ...string) *Limiterd {
	tb.Helper()
	return start(tb, name, config,
		fmt.Sprintf("127.0.0.1:%d", FreePort(tb)), fmt.Sprintf("127.0.0.1:%d", FreePort(tb)), nil, prefix...)
}

func start(tb testing.TB, name, config, grpcAddr, httpAddr string, client *tls.Config, prefix ...string) *Limiterd {
	tb.Helper()
	return startOpts(tb, name, config, grpcAddr, httpAddr, client, Options{}, prefix...)
}

func startOpts(tb testing.TB, name, config, grpcAddr, httpAddr string, client *tls.Config, o Options, prefix ...string) *Limiterd {
	tb.Helper()
	dir := tb.TempDir()
	bin := o.Bin
	if bin == "" {
		bin = LimiterdBinary(tb)
	}
	l := &Limiterd{
		Name: name, tb: tb, bin: bin, env: o.Env,
		GRPCAddr:  grpcAddr,
		HTTPAddr:  httpAddr,
		AdminAddr: fmt.Sprintf("127.0.0.1:%d", FreePort(tb)),
		TLS:       client,
		prefix:    prefix,
		cfgPath:   filepath.Join(dir, "limiterd.yaml"),
		logPath:   filepath.Join(dir, "limiterd.log"),
	}
	if err := os.WriteFile(l.cfgPath, []byte(config), 0o644); err != nil {
		tb.Fatal(err)
	}
	creds := insecure.NewCredentials()
	l.web = http.DefaultClient
	if client != nil {
		creds = credentials.NewTLS(client)
		l.web = &http.Client{Transport: &http.Transport{TLSClientConfig: client}}
	}
	conn, err := grpc.NewClient(l.GRPCAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		tb.Fatal(err)
	}
	l.conn = conn
	l.Client = limiterv1.NewRateLimiterClient(conn)
	l.Start()
	tb.Cleanup(func() {
		l.Stop()
		conn.Close()
		if tb.Failed() {
			tb.Logf("log of %s:\n%s", name, l.LogTail(60))
		}
	})
	return l
}

// Start starts the process (again), a new incarnation, on the same ports.
func (l *Limiterd) Start() {
	l.tb.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cmd != nil {
		l.tb.Fatalf("%s already running", l.Name)
	}
	logf, err := os.OpenFile(l.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		l.tb.Fatal(err)
	}
	args := append(append([]string{}, l.prefix...), l.bin, "--config", l.cfgPath, "--grpc-addr", l.GRPCAddr, "--http-addr", l.HTTPAddr,
		"--admin-addr", l.AdminAddr, "--node-name", l.Name, "--log-level", "debug")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(l.env) > 0 {
		cmd.Env = append(os.Environ(), l.env...)
	}
	cmd.SysProcAttr = sysProcAttr(nil)
	if err := cmd.Start(); err != nil {
		logf.Close()
		l.tb.Fatal(err)
	}
	l.cmd = cmd
	l.exited = make(chan struct{})
	go func(exited chan struct{}) {
		cmd.Wait()
		l.exitCode.Store(int64(cmd.ProcessState.ExitCode()))
		logf.Close()
		close(exited)
	}(l.exited)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-l.exited:
			l.cmd = nil
			l.tb.Fatalf("%s exited during start-up:\n%s", l.Name, l.LogTail(40))
		default:
		}
		if resp, err := l.HTTPClient().Get(l.URL(l.HTTPAddr, "/readyz")); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.tb.Fatalf("%s not ready after 30s:\n%s", l.Name, l.LogTail(40))
}

// Stop sends SIGTERM (a graceful shutdown that pushes every namespace) and
// waits for the exit.
func (l *Limiterd) Stop() { l.signal(syscall.SIGTERM) }

// Kill sends SIGKILL: counts not yet pushed are lost.
func (l *Limiterd) Kill() { l.signal(syscall.SIGKILL) }

func (l *Limiterd) signal(sig syscall.Signal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cmd == nil {
		return
	}
	l.cmd.Process.Signal(sig)
	select {
	case <-l.exited:
	case <-time.After(30 * time.Second):
		l.cmd.Process.Kill()
		<-l.exited
	}
	l.cmd = nil
}

// ExitCode is the exit status of the process's last run (-1 while it
// runs or when a signal ended it).
func (l *Limiterd) ExitCode() int { return int(l.exitCode.Load()) }

// Running reports whether the process is alive.
func (l *Limiterd) Running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cmd == nil {
		return false
	}
	select {
	case <-l.exited:
		return false
	default:
		return true
	}
}

// Metrics returns the /metrics text.
func (l *Limiterd) Metrics(ctx context.Context) (string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, l.URL(l.HTTPAddr, "/metrics"), nil)
	resp, err := l.HTTPClient().Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return b.String(), err
}

// URL is path on addr (HTTPAddr or AdminAddr), https when the process
// serves TLS.
func (l *Limiterd) URL(addr, path string) string {
	if l.TLS != nil {
		return "https://" + addr + path
	}
	return "http://" + addr + path
}

// HTTPClient is a client of the process's HTTP and admin listeners.
func (l *Limiterd) HTTPClient() *http.Client { return l.web }

// PID returns the process id of the running incarnation, or 0 when the
// process is not running.
func (l *Limiterd) PID() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cmd == nil {
		return 0
	}
	return l.cmd.Process.Pid
}

// ConfigPath returns the config file the process runs with.
func (l *Limiterd) ConfigPath() string { return l.cfgPath }

// LogPath returns the file the process's output goes to (every
// incarnation's, appended).
func (l *Limiterd) LogPath() string { return l.logPath }

// LogTail returns the last n lines of the process's log.
func (l *Limiterd) LogTail(n int) string {
	data, _ := os.ReadFile(l.logPath)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// Cluster starts n limiterd processes named node-0… with the same config.
func Cluster(tb testing.TB, n int, config string) []*Limiterd {
	tb.Helper()
	nodes := make([]*Limiterd, n)
	for i := range nodes {
		nodes[i] = StartLimiterd(tb, fmt.Sprintf("node-%d", i), config)
	}
	return nodes
}
