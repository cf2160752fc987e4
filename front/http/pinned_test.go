package httpfront

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/reqmetrics/metricstest"
)

// TestErrorNamesNestedField: a refused field inside a message that is
// itself a field (a limit's token bucket) is named by its whole path.
func TestErrorNamesNestedField(t *testing.T) {
	_, srv := newTestAPI(t)
	for body, want := range map[string]string{
		`{"key": "k", "limits": [{"token": {"max": 1, "refill_time": "soon"}}]}`: "limits[0].token.refill_time",
		`{"key": "k", "limits": [{"token": {"max": "many"}}]}`:                   "limits[0].token.max",
	} {
		code, out := call(t, srv, "Allow", body)
		field := ""
		if ds, _ := out["details"].([]any); len(ds) == 1 {
			d, _ := ds[0].(map[string]any)
			if vs, _ := d["fieldViolations"].([]any); len(vs) == 1 {
				field, _ = vs[0].(map[string]any)["field"].(string)
			}
		}
		if code != 400 || field != want {
			t.Errorf("Allow %s: %d %v; want 400 naming %q", body, code, out, want)
		}
	}
}

// TestMetricsAcquireBatch: each item of an AcquireBatch is counted as a
// concurrency decision, acquired or not; an item that failed (an unknown
// namespace) is counted in no namespace.
func TestMetricsAcquireBatch(t *testing.T) {
	srv, reg := newMetricsAPI(t)
	body := `{"items": [{"namespace": "api", "key": "j", "limit": 1, "ttl": "60s"},
		{"namespace": "api", "key": "j", "limit": 1, "ttl": "60s"},
		{"namespace": "nosuch", "key": "j", "limit": 1, "ttl": "60s"}]}`
	if got := post(t, srv, "AcquireBatch", body); got != 200 {
		t.Fatalf("AcquireBatch: status %d, want 200", got)
	}
	for decision, want := range map[string]float64{"allowed": 1, "denied": 1} {
		labels := map[string]string{"limiter_namespace": "api", "kind": "concurrency", "decision": decision}
		if got := metricstest.Sum(t, reg, "limiterd_decisions_total", labels); got != want {
			t.Errorf("limiterd_decisions_total%v = %v, want %v", labels, got, want)
		}
	}
	if got := metricstest.Sum(t, reg, "limiterd_decisions_total", map[string]string{"kind": "concurrency"}); got != 2 {
		t.Errorf("concurrency decisions = %v, want 2 (none for the failed item)", got)
	}
}

// TestStatusCodeLabel: a status code is its own label from 100 to 599,
// "other" outside.
func TestStatusCodeLabel(t *testing.T) {
	for code, want := range map[int]string{99: "other", 100: "100", 418: "418", 599: "599", 600: "other", 0: "other"} {
		if got := statusCode(code); got != want {
			t.Errorf("statusCode(%d) = %q, want %q", code, got, want)
		}
	}
}

// TestShutdownAfterCalls: calls that were served no longer count as
// running, so Shutdown returns at once, well before its ctx's end.
func TestShutdownAfterCalls(t *testing.T) {
	h, srv := newTestAPI(t)
	for range 3 {
		if code, out := call(t, srv, "Increment", `{"key": "k"}`); code != 200 {
			t.Fatalf("Increment: %d %v", code, out)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.Shutdown(ctx)
	if ctx.Err() != nil {
		t.Error("Shutdown after three served calls waited for its ctx's end")
	}
}

// TestRequestOfMaxBytes: a body of MaxRequestBytes exactly, its
// Content-Length given, is served.
func TestRequestOfMaxBytes(t *testing.T) {
	_, srv := newTestAPI(t)
	body := `{"key": "k"}`
	body += strings.Repeat(" ", MaxRequestBytes-len(body))
	if code, out := call(t, srv, "Increment", body); code != 200 {
		t.Errorf("a body of %d bytes: %d %v, want 200", len(body), code, out)
	}
}
