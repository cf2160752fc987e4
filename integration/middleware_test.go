//go:build integration

package integration

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/client"
	"github.com/limiterd/limiterd/examples/leakyapp/app"
	"github.com/limiterd/limiterd/integration/harness"
)

// TestLeakyAppSidekiqExample runs Sidekiq's curl session against the
// example app (examples/leakyapp) limited by a real limiterd: ten requests
// within a second pass, the 11th gets 429 with X-Rate-Limited-For and
// Retry-After; after X-Rate-Limited-For, a request passes again.
func TestLeakyAppSidekiqExample(t *testing.T) {
	l := harness.StartLimiterd(t, "leakyapp", "# the embedded default: local only, so buckets work\n")
	var failures atomic.Int64
	c, err := client.New(l.GRPCAddr, client.WithTimeout(2*time.Second),
		client.WithErrorHook(func(m string, err error) { failures.Add(1); t.Logf("limiterd %s: %v", m, err) }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	srv := httptest.NewServer(app.New(c))
	defer srv.Close()

	get := func() (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/api")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	start := time.Now()
	for i := 1; i <= 10; i++ {
		resp, body := get()
		if resp.StatusCode != http.StatusOK || body != "Hello world" {
			t.Fatalf("request %d: %d %q, want 200 Hello world", i, resp.StatusCode, body)
		}
		t.Logf("request %d: %s RateLimit: %s", i, resp.Status, resp.Header.Get("RateLimit"))
	}
	resp, body := get()
	if took := time.Since(start); took > time.Second {
		t.Fatalf("11 requests took %v, more than the drip of 1s", took)
	}
	t.Logf("request 11: %s %q X-Rate-Limited-For: %s Retry-After: %s RateLimit: %s RateLimit-Policy: %s",
		resp.Status, body, resp.Header.Get("X-Rate-Limited-For"), resp.Header.Get("Retry-After"),
		resp.Header.Get("RateLimit"), resp.Header.Get("RateLimit-Policy"))
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request 11: %d, want 429", resp.StatusCode)
	}
	limitedFor, err := strconv.ParseFloat(resp.Header.Get("X-Rate-Limited-For"), 64)
	if err != nil || limitedFor <= 0 || limitedFor > 1 {
		t.Errorf("X-Rate-Limited-For %q, want seconds in (0, 1]", resp.Header.Get("X-Rate-Limited-For"))
	}
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	if p := resp.Header.Get("RateLimit-Policy"); p != `"ip";q=10;w=10` {
		t.Errorf("RateLimit-Policy %q", p)
	}
	time.Sleep(time.Duration(limitedFor*float64(time.Second)) + 20*time.Millisecond)
	if resp, _ := get(); resp.StatusCode != http.StatusOK {
		t.Errorf("after X-Rate-Limited-For: %d, want 200", resp.StatusCode)
	}
	if n := failures.Load(); n != 0 {
		t.Fatalf("%d failed calls to a running limiterd", n)
	}

	l.Stop()
	resp, body = get()
	if resp.StatusCode != http.StatusOK || body != "Hello world" || resp.Header.Get("RateLimit") != "" || failures.Load() != 1 {
		t.Errorf("limiterd stopped: %d %q, RateLimit %q, %d failures; want 200 Hello world without headers, 1 failure",
			resp.StatusCode, body, resp.Header.Get("RateLimit"), failures.Load())
	}
}
