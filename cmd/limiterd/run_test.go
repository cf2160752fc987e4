package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/internal/config"
)

// lockedBuffer is an io.Writer safe for the daemon's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// freeAddr returns a loopback address nothing listens on (as of now).
// freeAddr returns a loopback address free a moment ago, below the
// kernel's ephemeral range: a port from bind(:0) is one that any client
// connection of a parallel test package may take before the daemon
// listens on it.
func freeAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(harness.FreePort(t)))
}

// holdAddr listens on a loopback port until the test ends: a daemon that
// tried to listen there would fail, so serving elsewhere proves the
// address was not used.
func holdAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

func envFunc(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

// daemonRun is one run() in a goroutine.
type daemonRun struct {
	cancel context.CancelFunc
	done   chan error
	stdout lockedBuffer
	stderr lockedBuffer
}

func startRun(t *testing.T, args []string, env map[string]string) *daemonRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	d := &daemonRun{cancel: cancel, done: make(chan error, 1)}
	go func() { d.done <- run(ctx, args, envFunc(env), &d.stdout, &d.stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-d.done:
		case <-time.After(15 * time.Second):
			t.Errorf("run did not return 15 s after cancel; stderr:\n%s", d.stderr.String())
		}
	})
	return d
}

// dial connects to addr and waits until its health service answers
// SERVING, failing if run returns first.
func (d *daemonRun) dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 10 * time.Millisecond, Multiplier: 1.5, MaxDelay: 100 * time.Millisecond}, MinConnectTimeout: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	served := make(chan error, 1)
	go func() {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			err = errors.New("health: " + resp.GetStatus().String())
		}
		served <- err
	}()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("%s: %v; stderr:\n%s", addr, err, d.stderr.String())
		}
	case err := <-d.done:
		d.done <- err
		t.Fatalf("run returned %v before serving; stderr:\n%s", err, d.stderr.String())
	}
	return conn
}

// stop cancels run's context and requires a clean return.
func (d *daemonRun) stop(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	d.cancel()
	select {
	case err := <-d.done:
		d.done <- err // for the cleanup
		if err != nil {
			t.Errorf("run returned %v after cancel, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("run did not return 15 s after cancel")
	}
	return time.Since(start)
}

// wantRunError runs a daemon expected to fail before listening.
func wantRunError(t *testing.T, args []string, env map[string]string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stdout, stderr lockedBuffer
	err := run(ctx, args, envFunc(env), &stdout, &stderr)
	if err == nil {
		t.Fatalf("run(%q) = nil, want an error", args)
	}
	if ctx.Err() != nil {
		t.Fatalf("run(%q) returned %v only when its context ended", args, err)
	}
	return err
}

func httpGet(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body), resp.Header
}

type healthz struct {
	Status      string `json:"status"`
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	Stores      []struct {
		Store string `json:"store"`
		Up    bool   `json:"up"`
	} `json:"stores"`
	Namespaces []struct {
		Namespace string `json:"namespace"`
	} `json:"namespaces"`
}

func getHealthz(t *testing.T, httpAddr string) healthz {
	t.Helper()
	code, body, hdr := httpGet(t, "http://"+httpAddr+"/healthz")
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("/healthz: %d %s %q", code, hdr.Get("Content-Type"), body)
	}
	var h healthz
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		t.Fatalf("/healthz %q: %v", body, err)
	}
	return h
}

func TestRunServesWithoutConfig(t *testing.T) {
	grpcAddr, httpAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	d := startRun(t, []string{"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--admin-addr", adminAddr, "--node-name", "test-node"}, nil)
	conn := d.dial(t, grpcAddr)
	ctx := context.Background()

	t.Run("pprof", func(t *testing.T) {
		code, body, _ := httpGet(t, "http://"+adminAddr+"/debug/pprof/goroutine?debug=1")
		if code != http.StatusOK || !strings.Contains(body, "goroutine profile:") {
			t.Fatalf("admin /debug/pprof/goroutine: %d %.200q", code, body)
		}
		if code, _, _ := httpGet(t, "http://"+httpAddr+"/debug/pprof/goroutine?debug=1"); code != http.StatusNotFound {
			t.Fatalf("HTTP listener /debug/pprof/goroutine: %d, want 404 (profiles are on the admin listener)", code)
		}
	})

	t.Run("health", func(t *testing.T) {
		for _, svc := range []string{"", "limiter.v1.RateLimiter"} {
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("health of %q: %v, %v; want SERVING", svc, resp, err)
			}
		}
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"})
		if status.Code(err) != codes.NotFound {
			t.Errorf("health of an unknown service: %v, want NOT_FOUND", err)
		}
	})

	t.Run("reflection", func(t *testing.T) {
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.CloseSend()
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range resp.GetListServicesResponse().GetService() {
			names = append(names, s.GetName())
		}
		for _, want := range []string{"limiter.v1.RateLimiter", "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} {
			if !slices.Contains(names, want) {
				t.Errorf("reflection lists %v, missing %s", names, want)
			}
		}
		// The API's descriptors resolve, imports included.
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "limiter.v1.RateLimiter"}}); err != nil {
			t.Fatal(err)
		}
		if resp, err = stream.Recv(); err != nil || len(resp.GetFileDescriptorResponse().GetFileDescriptorProto()) == 0 {
			t.Errorf("file containing limiter.v1.RateLimiter: %v, %v", resp, err)
		}
	})

	t.Run("api", func(t *testing.T) {
		resp, err := limiterv1.NewRateLimiterClient(conn).Increment(ctx, &limiterv1.IncrementRequest{Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range resp.GetRates() {
			got = append(got, fmt.Sprintf("%v=%g", r.GetWindowSize().AsDuration(), r.GetRate()))
		}
		if want := []string{"1s=1", "1m0s=1"}; !slices.Equal(got, want) {
			t.Errorf("Increment: rates %v, want %v", got, want)
		}
	})

	t.Run("http", func(t *testing.T) {
		if code, body, _ := httpGet(t, "http://"+httpAddr+"/readyz"); code != http.StatusOK {
			t.Errorf("/readyz: %d %q, want 200", code, body)
		}
		h := getHealthz(t, httpAddr)
		if h.Status != "ok" || h.Node != "test-node" || !strings.HasPrefix(h.Incarnation, "test-node/") || h.Namespaces == nil || len(h.Namespaces) != 0 {
			t.Errorf("/healthz = %+v, want status ok, node test-node, incarnation test-node/…, namespaces []", h)
		}
		code, body, _ := httpGet(t, "http://"+httpAddr+"/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		if want := `limiterd_active_keys{limiter_namespace="default"} 1`; !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
		for _, want := range []string{"limiterd_keys_refused_total", "limiterd_evicted_keys_total", "limiterd_windows_dropped_total", "go_goroutines"} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})

	if took := d.stop(t); took > 5*time.Second {
		t.Errorf("shutdown took %v", took)
	}
	// Both ports are released.
	for _, addr := range []string{grpcAddr, httpAddr} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("after shutdown %s is still taken: %v", addr, err)
			continue
		}
		l.Close()
	}
}

// TestRunShutdownWithOpenStream: an open health Watch stream (as gRPC
// clients with health checking keep) must not hold up the shutdown.
func TestRunShutdownWithOpenStream(t *testing.T) {
	grpcAddr := freeAddr(t)
	d := startRun(t, []string{"--grpc-addr", grpcAddr, "--http-addr", "off"}, nil)
	conn := d.dial(t, grpcAddr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := w.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch: %v, %v", resp, err)
	}
	watched := make(chan []healthpb.HealthCheckResponse_ServingStatus, 1)
	go func() {
		var seen []healthpb.HealthCheckResponse_ServingStatus
		for {
			resp, err := w.Recv()
			if err != nil {
				watched <- seen
				return
			}
			seen = append(seen, resp.GetStatus())
		}
	}()
	took := d.stop(t)
	if seen := <-watched; !slices.Contains(seen, healthpb.HealthCheckResponse_NOT_SERVING) {
		t.Errorf("the watch saw %v during shutdown, want NOT_SERVING", seen)
	}
	if took > 7*time.Second {
		t.Errorf("shutdown with an open Watch stream took %v, more than the 5 s forced-stop bound", took)
	}
	if took > 2*time.Second {
		t.Errorf("shutdown with an open Watch stream took %v, want under 2 s", took)
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunConfigErrorBeforeListening(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		field      string
		reason     []string
	}{
		{"bad window size", "namespaces:\n  - name: default\n    window_sizes: [\"0s\"]\n    sync_rate: -1\n",
			"namespaces[0].window_sizes[0]", []string{"between 1ms and"}},
		{"unparsable duration", "namespaces:\n  - name: default\n    window_sizes: [\"1s\", \"soon\"]\n    sync_rate: -1\n",
			"namespaces[0].window_sizes[1]", []string{`invalid duration "soon"`}},
		{"unknown field", "grpc_adr: 127.0.0.1:1\n", "grpc_adr", []string{`unknown field "grpc_adr"`}},
		{"missing sync_rate", "namespaces:\n  - name: default\n    window_sizes: [1]\n",
			"namespaces[0].sync_rate", []string{"is required"}},
		{"unknown store type", "stores:\n  s: {type: memcached}\n", "stores.s.type", []string{"must be one of redis, postgres, cassandra", `"memcached"`}},
		{"undeclared store", "namespaces:\n  - {name: default, window_sizes: [1], sync_rate: 1, store: main}\n",
			"namespaces[0].store", []string{`store "main" is not declared`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, "limiterd.yaml", c.yaml)
			held := holdAddr(t)
			err := wantRunError(t, []string{"--config", path, "--grpc-addr", held, "--http-addr", held}, nil)
			msg := err.Error()
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Errorf("error %q is a %T, want a *config.Error", msg, err)
			}
			if !strings.Contains(msg, path) || !strings.Contains(msg, c.field) {
				t.Errorf("error %q does not name the file %s and the field %s", msg, path, c.field)
			}
			for _, r := range c.reason {
				if !strings.Contains(msg, r) {
					t.Errorf("error %q does not give the reason %q", msg, r)
				}
			}
			if strings.Contains(msg, "listen") {
				t.Errorf("error %q: run tried to listen before validating", msg)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "absent.yaml")
		err := wantRunError(t, nil, map[string]string{envConfig: path, envGRPCAddr: holdAddr(t)})
		if !strings.Contains(err.Error(), path) {
			t.Errorf("error %q does not name %s", err, path)
		}
	})
	t.Run("bad flag", func(t *testing.T) {
		wantRunError(t, []string{"--no-such-flag"}, nil)
	})
	t.Run("bad log level from env", func(t *testing.T) {
		err := wantRunError(t, nil, map[string]string{envLogLevel: "loud", envGRPCAddr: holdAddr(t)})
		if msg := err.Error(); !strings.Contains(msg, "log_level") || !strings.Contains(msg, `"loud"`) {
			t.Errorf("error %q does not name log_level and the value", msg)
		}
	})
}

const envTestConfig = `node_name: file-node
grpc_addr: %s
http_addr: %s
namespaces:
  - name: %s
    window_sizes: [1, "1m"]
    sync_rate: -1
`

func configFile(t *testing.T, grpcAddr, httpAddr, namespace string) string {
	t.Helper()
	return writeFile(t, namespace+".yaml", fmt.Sprintf(envTestConfig, grpcAddr, httpAddr, namespace))
}

func hasNamespace(t *testing.T, conn *grpc.ClientConn, name string) bool {
	t.Helper()
	_, err := limiterv1.NewRateLimiterClient(conn).SlidingWindow(context.Background(), &limiterv1.SlidingWindowRequest{Namespace: name, Key: "k"})
	switch status.Code(err) {
	case codes.OK:
		return true
	case codes.NotFound:
		return false
	}
	t.Fatalf("SlidingWindow in %q: %v", name, err)
	return false
}

// TestRunEnvOverridesFile: LIMITERD_* variables override the file.
func TestRunEnvOverridesFile(t *testing.T) {
	fileGRPC, fileHTTP := holdAddr(t), holdAddr(t)
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	d := startRun(t, nil, map[string]string{
		envConfig:   configFile(t, fileGRPC, fileHTTP, "from-env-file"),
		envGRPCAddr: grpcAddr,
		envHTTPAddr: httpAddr,
		envNodeName: "env-node",
		envLogLevel: "warn",
	})
	conn := d.dial(t, grpcAddr)
	if !hasNamespace(t, conn, "from-env-file") || hasNamespace(t, conn, "default") {
		t.Errorf("LIMITERD_CONFIG was not the config used")
	}
	if h := getHealthz(t, httpAddr); h.Node != "env-node" {
		t.Errorf("node = %q, want env-node (LIMITERD_NODE_NAME over node_name)", h.Node)
	}
	d.stop(t)
	if log := d.stderr.String(); strings.Contains(log, "level=INFO") {
		t.Errorf("LIMITERD_LOG_LEVEL=warn still logs INFO lines:\n%s", log)
	}
}

// TestRunFlagsOverrideEnv: every flag wins over its variable.
func TestRunFlagsOverrideEnv(t *testing.T) {
	envGRPC, envHTTP := holdAddr(t), holdAddr(t)
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	d := startRun(t, []string{
		"--config", configFile(t, holdAddr(t), holdAddr(t), "from-flag-file"),
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--node-name", "flag-node", "--log-level", "info",
	}, map[string]string{
		envConfig:   configFile(t, envGRPC, envHTTP, "from-env-file"),
		envGRPCAddr: envGRPC,
		envHTTPAddr: envHTTP,
		envNodeName: "env-node",
		envLogLevel: "loud", // invalid: must not matter under --log-level
	})
	conn := d.dial(t, grpcAddr)
	if !hasNamespace(t, conn, "from-flag-file") || hasNamespace(t, conn, "from-env-file") {
		t.Errorf("--config did not win over LIMITERD_CONFIG")
	}
	if h := getHealthz(t, httpAddr); h.Node != "flag-node" {
		t.Errorf("node = %q, want flag-node", h.Node)
	}
	d.stop(t)
	if log := d.stderr.String(); !strings.Contains(log, "level=INFO") {
		t.Errorf("--log-level info over LIMITERD_LOG_LEVEL: no INFO line:\n%s", log)
	}
}

// TestSetGCPercent: limiterd collects at defaultGCPercent unless GOGC is
// set, which then wins.
func TestSetGCPercent(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	setGCPercent(func(string) string { return "" })
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("without GOGC: GC percent %d, want %d", got, defaultGCPercent)
	}
	setGCPercent(func(k string) string {
		if k == "GOGC" {
			return "50"
		}
		return ""
	})
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: GC percent changed to %d, want it left alone", got)
	}
}
