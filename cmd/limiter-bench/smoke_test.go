package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/limiterd/limiterd/integration/harness"
)

// TestSmoke runs limiter-bench for about two seconds against a real
// limiterd (one node, local only, where Allow is exact) and checks the
// report is sane.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts limiterd")
	}
	l := harness.StartLimiterd(t, "bench", `namespaces:
  - name: default
    window_sizes: ["1s"]
    sync_rate: -1
`)
	var stdout, stderr bytes.Buffer
	args := []string{"-targets", l.GRPCAddr, "-call", "allow", "-c", "8", "-conns", "2", "-keys", "4",
		"-limit", "20", "-window", "1s", "-at", "-duration", "1500ms", "-progress", "500ms", "-json"}
	if err := run(t.Context(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, &stderr)
	}
	var s summary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, &stdout)
	}
	if s.Calls == 0 || s.CallsPerSec <= 0 || s.Items != s.Calls {
		t.Errorf("calls %d (%v/s), decisions %d: want calls > 0 and one decision each", s.Calls, s.CallsPerSec, s.Items)
	}
	if len(s.Errors) != 0 {
		t.Errorf("errors %v, want none", s.Errors)
	}
	if l := s.LatencyUS; !(0 < l["p50"] && l["p50"] <= l["p99"] && l["p99"] <= l["p99.9"] && l["p99.9"] <= l["max"]*1.02) {
		t.Errorf("latency percentiles out of order: %v", l)
	}
	a := s.Allow
	if a == nil {
		t.Fatal("no allow section")
	}
	if a.Allowed+a.Denied != s.Calls || a.Allowed == 0 {
		t.Errorf("allowed %d + denied %d, want %d calls with some allowed", a.Allowed, a.Denied, s.Calls)
	}
	// One node decides exactly: no window may hold more than the limit.
	if a.Windows.Worst > a.Limit || a.Windows.Over != 0 {
		t.Errorf("worst window %v (%d over), limit %v", a.Windows.Worst, a.Windows.Over, a.Limit)
	}
	if !strings.Contains(stderr.String(), "calls/s") {
		t.Errorf("no progress line on stderr:\n%s", &stderr)
	}

	// The text report of a batch call.
	stdout.Reset()
	args = []string{"-targets", l.GRPCAddr, "-call", "allow-batch", "-batch", "10", "-c", "2", "-conns", "1",
		"-duration", "500ms", "-progress", "0"}
	if err := run(context.Background(), args, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v", err)
	}
	for _, want := range []string{"calls:", "decisions", "errors:    0", "latency:", "p99.9", "admitted:"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, &stdout)
		}
	}
}
