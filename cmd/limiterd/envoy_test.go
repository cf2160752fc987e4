package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/limiterd/limiterd/internal/config"
)

const envoyDaemonConfig = `grpc_addr: %s
http_addr: %s
namespaces:
  - name: envoy
    window_sizes: ["1s", "1m", "1h", "24h"]
    sync_rate: -1
envoy:
  namespace: envoy
  response_headers: {enabled: true}
`

const envoyDomain = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// TestRunServesEnvoy: with an Envoy rules directory (from the flag), the
// gRPC listener answers ShouldRateLimit and /metrics has its series.
func TestRunServesEnvoy(t *testing.T) {
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(envoyDomain), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "limiterd.yaml", fmt.Sprintf(envoyDaemonConfig, grpcAddr, httpAddr))
	d := startRun(t, []string{"--config", cfg, "--envoy-config-dir", dir}, nil)
	client := rlsv3.NewRateLimitServiceClient(d.dial(t, grpcAddr))
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*ratelimitv3.RateLimitDescriptor{
		{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}}
	var codes []string
	for range 3 {
		resp, err := client.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		codes = append(codes, resp.GetOverallCode().String())
		if len(resp.GetResponseHeadersToAdd()) != 3 {
			t.Errorf("response headers %v, want 3", resp.GetResponseHeadersToAdd())
		}
	}
	if got, want := strings.Join(codes, " "), "OK OK OVER_LIMIT"; got != want {
		t.Errorf("codes %s, want %s", got, want)
	}
	code, body, _ := httpGet(t, "http://"+httpAddr+"/metrics")
	if want := `limiterd_envoy_rule_over_limit_total{descriptor="remote_address",domain="edge"} 1`; code != http.StatusOK || !strings.Contains(body, want) {
		t.Errorf("/metrics lacks %q", want)
	}
	d.stop(t)
}

func TestRunEnvoyConfigErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(strings.Replace(envoyDomain, "minute", "day", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	held := holdAddr(t)
	// The default namespace has no 24h window.
	err := wantRunError(t, []string{"--grpc-addr", held, "--http-addr", "off", "--envoy-config-dir", dir}, nil)
	if msg := err.Error(); !strings.Contains(msg, "edge.yaml") || !strings.Contains(msg, "unit day needs the window size 86400s") {
		t.Errorf("error %q does not name the file and the missing window size", msg)
	}

	cfg := writeFile(t, "limiterd.yaml", "envoy: {config_dir: "+dir+", namespace: nope}\n")
	err = wantRunError(t, []string{"--config", cfg, "--grpc-addr", held}, nil)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Field != "envoy.namespace" || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown namespace: error %v, want a ConfigError on envoy.namespace", err)
	}
}

// TestEnvoyNamespaceStays: a run-time change may not remove Envoy's
// namespace nor change its window sizes (its rules were checked against
// them); other changes of it apply.
func TestEnvoyNamespaceStays(t *testing.T) {
	grpcAddr, httpAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(envoyDomain), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeFile(t, "limiterd.yaml", fmt.Sprintf(envoyDaemonConfig, grpcAddr, httpAddr))
	d := startRun(t, []string{"--config", cfg, "--envoy-config-dir", dir, "--admin-addr", adminAddr}, nil)
	d.dial(t, grpcAddr)
	call := func(method, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+adminAddr+"/v1/namespaces/envoy", strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := call("PUT", `{"window_sizes": ["1s", "1m"], "sync_rate": -1}`); code != http.StatusBadRequest || !strings.Contains(body, "envoy.namespace") {
		t.Errorf("resizing Envoy's namespace: %d %q, want 400 naming envoy.namespace", code, body)
	}
	if code, body := call("DELETE", ""); code != http.StatusBadRequest || !strings.Contains(body, "envoy.namespace") {
		t.Errorf("removing Envoy's namespace: %d %q, want 400", code, body)
	}
	if code, body := call("PUT", `{"window_sizes": ["1s", "1m", "1h", "24h"], "sync_rate": -1, "max_keys": 500}`); code != http.StatusOK {
		t.Errorf("changing Envoy's namespace's key cap: %d %q, want 200", code, body)
	}
}
