//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Namespaces changed while limiterd serves: through the admin API and by
// reloading the config file (SIGHUP, a change of the file).

// reloadConfig is a config with the given namespaces entries.
func reloadConfig(store string, namespaces ...string) string {
	return fmt.Sprintf("sync:\n  tick_timeout: 1s\nstores:\n  main: %s\nnamespaces:\n%s", store, strings.Join(namespaces, ""))
}

func nsEntry(name, sizes string, syncRate float64) string {
	store := ""
	if syncRate >= 0 {
		store = "\n    store: main"
	}
	return fmt.Sprintf("  - name: %s\n    window_sizes: [%s]\n    sync_rate: %v%s\n", name, sizes, syncRate, store)
}

// admin calls the admin listener; it returns the status and body.
func admin(t *testing.T, n *harness.Limiterd, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, n.URL(n.AdminAddr, path), strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := n.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// served returns the node's namespaces and their window sizes.
func served(t *testing.T, n *harness.Limiterd) map[string]string {
	t.Helper()
	code, body := admin(t, n, "GET", "/v1/namespaces", "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/namespaces: %d %s", code, body)
	}
	var list []struct {
		Name        string   `json:"name"`
		WindowSizes []string `json:"window_sizes"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, ns := range list {
		out[ns.Name] = strings.Join(ns.WindowSizes, ",")
	}
	return out
}

// waitServed waits until the node serves want (namespace -> sizes).
func waitServed(t *testing.T, n *harness.Limiterd, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := served(t, n)
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node serves %v, want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNamespacesChangeUnderLoad: callers count in two namespaces that stay
// while namespaces are added, resized and removed, first through the admin
// API, then by reloading the file (SIGHUP, then a change of the file): no
// call fails, and every acknowledged hit is counted; a bad file changes
// nothing and its errors are logged.
func TestNamespacesChangeUnderLoad(t *testing.T) {
	r := harness.SharedRedis(t)
	store := redisStore(r.Addr(), harness.UniqueName("reload"))
	// "steady" is never touched; "resized" changes its window sizes
	// around its 8760h window, which every call counts in.
	steady := nsEntry("steady", `"8760h"`, -1)
	cfg := reloadConfig(store, steady, nsEntry("resized", `"8760h"`, 0.1), nsEntry("gone", `"1s"`, -1))
	n := harness.StartLimiterd(t, "reload", cfg)

	at := time.Now()
	// The callers stop between calls, so that every hit counted was
	// acknowledged.
	ctx := context.Background()
	var stop atomic.Bool
	defer stop.Store(true)
	var acked [2]atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	names := []string{"steady", "resized"}
	for w := range 4 {
		wg.Go(func() {
			for !stop.Load() {
				_, err := n.Client.Increment(ctx, &limiterv1.IncrementRequest{
					Namespace: names[w%2], Key: "k", At: timestamppb.New(at), WindowSize: durationpb.New(8760 * time.Hour)})
				if err != nil {
					failed.CompareAndSwap(nil, fmt.Sprintf("%s: %v", names[w%2], err))
					return
				}
				acked[w%2].Add(1)
			}
		})
	}
	loadRuns := func(what string) {
		t.Helper()
		before := acked[0].Load() + acked[1].Load()
		time.Sleep(200 * time.Millisecond)
		if acked[0].Load()+acked[1].Load() == before {
			t.Fatalf("no call answered around %s", what)
		}
	}
	loadRuns("the start")

	// Through the admin API.
	for _, c := range []struct{ method, path, body string }{
		{"PUT", "/v1/namespaces/fresh", `{"window_sizes": ["1m"], "sync_rate": -1}`},
		{"PUT", "/v1/namespaces/resized", `{"window_sizes": ["8760h", "1h"], "sync_rate": 0.1, "store": "main"}`},
		{"DELETE", "/v1/namespaces/gone", ""},
	} {
		if code, body := admin(t, n, c.method, c.path, c.body); code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", c.method, c.path, code, body)
		}
		loadRuns(c.method + " " + c.path)
	}
	waitServed(t, n, map[string]string{"fresh": "60s", "resized": "3600s,31536000s", "steady": "31536000s"})
	if code, body := admin(t, n, "PUT", "/v1/namespaces/bad", `{"window_sizes": ["0s"], "sync_rate": 0, "store": "nowhere"}`); code != http.StatusBadRequest ||
		!strings.Contains(body, "window_sizes") || !strings.Contains(body, "nowhere") {
		t.Errorf("an invalid namespace: %d %q, want 400 naming both fields", code, body)
	}
	if code, _ := admin(t, n, "DELETE", "/v1/namespaces/nope", ""); code != http.StatusNotFound {
		t.Errorf("DELETE of an unknown namespace: %d, want 404", code)
	}

	// By reload: SIGHUP brings the file back (fresh goes, gone returns),
	// then a change of the file resizes "resized" again.
	if err := syscall.Kill(n.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitServed(t, n, map[string]string{"gone": "1s", "resized": "31536000s", "steady": "31536000s"})
	loadRuns("SIGHUP")
	write := func(cfg string) {
		t.Helper()
		if err := os.WriteFile(n.ConfigPath(), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadConfig(store, steady, nsEntry("resized", `"8760h", "24h"`, 0.1)))
	waitServed(t, n, map[string]string{"resized": "86400s,31536000s", "steady": "31536000s"})
	loadRuns("the file change")

	// A bad file: three errors, all logged; nothing changes.
	write(reloadConfig(store, steady, nsEntry("resized", `"0s"`, 0.1), nsEntry("bad name", `"1s"`, -1), nsEntry("x", `"1s"`, 0)+"    max_keys: -1\n"))
	if code, body := admin(t, n, "POST", "/v1/reload", ""); code != http.StatusBadRequest || strings.Count(body, "\n") < 3 {
		t.Errorf("POST /v1/reload of a bad file: %d %q, want 400 with its three errors", code, body)
	}
	if err := syscall.Kill(n.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(n.LogTail(40), "reload refused") {
		if time.Now().After(deadline) {
			t.Fatalf("no log line about the refused reload:\n%s", n.LogTail(40))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{"window_sizes", "bad name", "max_keys"} {
		if !strings.Contains(n.LogTail(40), want) {
			t.Errorf("the refused reload's log does not name %q:\n%s", want, n.LogTail(40))
		}
	}
	waitServed(t, n, map[string]string{"resized": "86400s,31536000s", "steady": "31536000s"})
	loadRuns("the refused reload")

	stop.Store(true)
	wg.Wait()
	if f := failed.Load(); f != nil {
		t.Fatalf("a call failed while namespaces changed: %v", f)
	}
	for i, name := range names {
		got, err := nsRate8760(context.Background(), n, name, "k", at)
		if err != nil {
			t.Fatal(err)
		}
		if want := float64(acked[i].Load()); got != want {
			t.Errorf("%s: %v hits counted, want the %v acknowledged", name, got, want)
		}
	}
	t.Logf("acknowledged: steady %d, resized %d", acked[0].Load(), acked[1].Load())
}

func nsRate8760(ctx context.Context, n *harness.Limiterd, namespace, key string, at time.Time) (float64, error) {
	resp, err := n.Client.SlidingWindow(ctx, &limiterv1.SlidingWindowRequest{
		Namespace: namespace, Key: key, WindowSize: durationpb.New(8760 * time.Hour), At: timestamppb.New(at)})
	if err != nil {
		return 0, err
	}
	return resp.GetRates()[0].GetRate(), nil
}

// TestReloadMovesANamespaceBetweenRedis: a periodic namespace moved from
// one Redis to another by a reload leaves every hit counted before the
// move in the old one, and brings them to the new one.
func TestReloadMovesANamespaceBetweenRedis(t *testing.T) {
	a, b := harness.SharedRedis(t), harness.StartRedis(t)
	prefix := harness.UniqueName("move")
	// A long period: without the move's own push, the hits would not
	// reach the old store in this test's time.
	cfg := func(addr string) string {
		return reloadConfig(redisStore(addr, prefix), nsEntry("moved", `"1h"`, 30))
	}
	n := harness.StartLimiterd(t, "move", cfg(a.Addr()))
	ctx := context.Background()
	at := time.Now()
	const hits = 57
	keys := []string{"k1", "k2", "k3"}
	for i := range hits {
		if _, err := n.Client.Increment(ctx, &limiterv1.IncrementRequest{Namespace: "moved", Key: keys[i%3], At: timestamppb.New(at)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(n.ConfigPath(), []byte(cfg(b.Addr())), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := admin(t, n, "POST", "/v1/reload", ""); code != http.StatusOK || !strings.Contains(body, "changed [moved]") {
		t.Fatalf("reload: %d %s", code, body)
	}
	total := func(addr string) int64 {
		t.Helper()
		c := redisstore.DefaultConfig()
		c.Addrs, c.KeyPrefix = []string{addr}, prefix
		st, err := redisstore.Open(c)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		var sum int64
		for _, k := range keys {
			got, err := st.Window(ctx, clustersync.WindowKey{Namespace: "moved", Size: time.Hour, Start: at.Truncate(time.Hour).UnixNano(), Key: k})
			if err != nil {
				t.Fatal(err)
			}
			sum += got / 1_000_000
		}
		return sum
	}
	if got := total(a.Addr()); got != hits {
		t.Errorf("the old Redis holds %d hits after the move, want the %d counted before it", got, hits)
	}
	// The new store gets them from the successor's first push, which
	// POST /v1/namespaces/moved/sync makes now.
	if code, body := admin(t, n, "POST", "/v1/namespaces/moved/sync", ""); code != http.StatusOK {
		t.Fatalf("sync: %d %s", code, body)
	}
	if got := total(b.Addr()); got != hits {
		t.Errorf("the new Redis holds %d hits, want %d", got, hits)
	}
	if got := served(t, n); !slices.Equal([]string{got["moved"]}, []string{"3600s"}) {
		t.Errorf("serves %v", got)
	}
}
