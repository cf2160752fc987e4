package httpfront

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limiterd/limiterd/internal/reqmetrics/metricstest"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

// newMetricsAPI serves the JSON API over "default" and "api" with
// Metrics.
func newMetricsAPI(t *testing.T) (http.Handler, *prometheus.Registry) {
	t.Helper()
	n, err := node.New([]node.Config{node.DefaultConfig(), {Name: "api", WindowSizes: []time.Duration{time.Hour}}}, node.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, func(name string) bool { _, err := n.Namespace(name); return err == nil })
	h, err := New(svc.Observe(service.FrontHTTP, m))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	h.RegisterWithMetrics(mux, m)
	return mux, reg
}

// post serves one call in process: its metrics are recorded when it
// returns.
func post(t *testing.T, h http.Handler, method, body string) int {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, APIPrefix+method, strings.NewReader(body)))
	return w.Code
}

func TestMetrics(t *testing.T) {
	srv, reg := newMetricsAPI(t)
	allow := `{"namespace": "api", "key": "a", "limits": [{"windowSize": "3600s", "limit": 1}]}`
	for _, c := range []struct {
		method, body string
		want         int
	}{
		{"Allow", allow, 200},
		{"Allow", allow, 200},
		{"Allow", `{"namespace": "nosuch", "key": "a", "limits": [{"windowSize": "1s", "limit": 1}]}`, 404},
		{"AllowBatch", `{"items": [{"key": "t", "limits": [{"token": {"max": 1, "refillTime": "3600s"}}]},
			{"key": "t", "limits": [{"token": {"max": 1, "refill_time": "3600s"}}]},
			{"namespace": "nosuch", "key": "t", "limits": [{"window_size": "1s", "limit": 1}]}]}`, 200},
		{"Acquire", `{"namespace": "api", "key": "j", "limit": 1, "ttl": "60s"}`, 200},
		{"Increment", `{"key": "i"}`, 200},
		{"NoSuchMethod", `{}`, 404},
	} {
		if got := post(t, srv, c.method, c.body); got != c.want {
			t.Errorf("%s %s: status %d, want %d", c.method, c.body, got, c.want)
		}
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, OpenAPIPath, nil))
	if w.Code != http.StatusOK {
		t.Errorf("GET %s: %d, want 200", OpenAPIPath, w.Code)
	}
	for _, w := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"front": "http", "limiter_namespace": "api", "kind": "sliding_window", "decision": "allowed"}, 1},
		{map[string]string{"limiter_namespace": "api", "kind": "sliding_window", "decision": "denied"}, 1},
		{map[string]string{"limiter_namespace": "default", "kind": "token_bucket", "decision": "allowed"}, 1},
		{map[string]string{"limiter_namespace": "default", "kind": "token_bucket", "decision": "denied"}, 1},
		{map[string]string{"limiter_namespace": "api", "kind": "concurrency", "decision": "allowed"}, 1},
		{map[string]string{"limiter_namespace": "other"}, 0},
	} {
		if got := metricstest.Sum(t, reg, "limiterd_decisions_total", w.labels); got != w.want {
			t.Errorf("limiterd_decisions_total%v = %v, want %v", w.labels, got, w.want)
		}
	}
	for _, w := range []struct {
		method, code string
		want         float64
	}{{"limiter.v1.RateLimiter/Allow", "200", 2}, {"limiter.v1.RateLimiter/Allow", "404", 1}, {"limiter.v1.RateLimiter/AllowBatch", "200", 1},
		{"limiter.v1.RateLimiter/Acquire", "200", 1}, {"limiter.v1.RateLimiter/Increment", "200", 1}, {"other", "404", 1}} {
		labels := map[string]string{"method": w.method, "code": w.code}
		if got := metricstest.Sum(t, reg, "limiterd_requests_total", labels); got != w.want {
			t.Errorf("limiterd_requests_total%v = %v, want %v", labels, got, w.want)
		}
	}
	if got := metricstest.Sum(t, reg, "limiterd_request_duration_seconds", map[string]string{"method": "limiter.v1.RateLimiter/Allow"}); got != 3 {
		t.Errorf("Allow's latency samples = %v, want 3", got)
	}
}

// TestMetricsBounded: 10^5 distinct keys and 10^3 unknown namespace names
// add no series.
func TestMetricsBounded(t *testing.T) {
	srv, reg := newMetricsAPI(t)
	batch := func(ns func(i int) string, prefix string, n int) {
		var b strings.Builder
		b.WriteString(`{"items": [`)
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"namespace": %q, "key": "%s%d", "limits": [{"windowSize": "3600s", "limit": 1}]}`, ns(i), prefix, i)
		}
		b.WriteString(`]}`)
		if got := post(t, srv, "AllowBatch", b.String()); got != 200 {
			t.Fatalf("AllowBatch: status %d", got)
		}
	}
	api := func(int) string { return "api" }
	batch(api, "warm", 1)
	batch(api, "warm", 1) // denied
	before := metricstest.Series(t, reg)
	for b := range 10 {
		batch(api, fmt.Sprintf("k%d-", b), service.MaxBatchItems)
	}
	batch(func(i int) string { return fmt.Sprintf("ns-%d", i) }, "k", 1000)
	if after := metricstest.Series(t, reg); after != before {
		t.Errorf("series: %d before the flood, %d after", before, after)
	}
	want := float64(1 + 10*service.MaxBatchItems)
	if got := metricstest.Sum(t, reg, "limiterd_decisions_total", map[string]string{"limiter_namespace": "api", "decision": "allowed", "kind": "sliding_window"}); got != want {
		t.Errorf("api's allowed = %v, want %v", got, want)
	}
}

// BenchmarkMetrics is an Allow through the JSON API without and with the
// middleware.
func BenchmarkMetrics(b *testing.B) {
	n, err := node.New([]node.Config{node.DefaultConfig()}, node.SystemClock{})
	if err != nil {
		b.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		b.Fatal(err)
	}
	h, err := New(svc)
	if err != nil {
		b.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry(), func(n string) bool { return n == "default" })
	const body = `{"key": "k", "limits": [{"windowSize": "1s", "limit": 1000000000}]}`
	for _, c := range []struct {
		name string
		h    http.Handler
	}{{"bare", h}, {"metrics", Metrics(m)(h)}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				c.h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, APIPrefix+"Allow", strings.NewReader(body)))
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
