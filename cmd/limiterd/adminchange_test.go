package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// adminCall sends method path with body to the admin API at addr and
// returns the answer's body, failing unless it is 200.
func adminCall(ctx context.Context, t *testing.T, addr, method, path, body string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return string(b)
}

// TestAdminChangesOnlyWhatItNames: on the embedded default, PUT users
// leaves default answering on every front; DELETE default leaves only
// users; deleting users too leaves a node that serves no namespace, which
// /readyz and every NOT_FOUND say.
func TestAdminChangesOnlyWhatItNames(t *testing.T) {
	grpcAddr, httpAddr, respAddr, adminAddr := freeAddr(t), freeAddr(t), freeAddr(t), freeAddr(t)
	d := startRun(t, []string{"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--resp-addr", respAddr, "--admin-addr", adminAddr}, nil)
	api := limiterv1.NewRateLimiterClient(d.dial(t, grpcAddr))
	rdb := redisClient(t, d, respAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	change := func(method, path, body string) string {
		t.Helper()
		return adminCall(ctx, t, adminAddr, method, path, body)
	}
	// served calls Increment in ns on every front and returns each
	// front's outcome: "ok" or the error's text.
	served := func(ns string) map[string]string {
		t.Helper()
		out := map[string]string{}
		_, err := api.Increment(ctx, &limiterv1.IncrementRequest{Namespace: ns, Key: "k"})
		switch status.Code(err) {
		case codes.OK:
			out["grpc"] = "ok"
		case codes.NotFound:
			out["grpc"] = status.Convert(err).Message()
		default:
			t.Fatalf("grpc Increment in %q: %v", ns, err)
		}
		body := fmt.Sprintf(`{"namespace": %q, "key": "k"}`, ns)
		resp, err := http.Post("http://"+httpAddr+"/limiter.v1.RateLimiter/Increment", "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
			out["http"] = "ok"
		case http.StatusNotFound:
			out["http"] = string(b)
		default:
			t.Fatalf("http Increment in %q: %d %s", ns, resp.StatusCode, b)
		}
		args := []any{"RL.INCR", "k"}
		if ns != "" {
			args = append(args, "NS", ns)
		}
		if err := rdb.Do(ctx, args...).Err(); err == nil {
			out["resp"] = "ok"
		} else if strings.HasPrefix(err.Error(), "NOTFOUND") {
			out["resp"] = err.Error()
		} else {
			t.Fatalf("resp RL.INCR in %q: %v", ns, err)
		}
		return out
	}
	want := func(ns string, ok bool, text string) {
		t.Helper()
		for front, got := range served(ns) {
			if ok != (got == "ok") || (!ok && !strings.Contains(got, text)) {
				t.Errorf("%s in namespace %q: %q; want ok %v %s", front, ns, got, ok, text)
			}
		}
	}

	want("", true, "")
	if got := change("PUT", "/v1/namespaces/users", `{"window_sizes":["1s","1m"],"sync_rate":-1}`); !strings.Contains(got, "added [users] changed [] removed [] unchanged [default]") {
		t.Errorf("PUT users: %s", got)
	}
	want("", true, "")
	want("default", true, "")
	want("users", true, "")

	if got := change("DELETE", "/v1/namespaces/default", ""); !strings.Contains(got, "removed [default] unchanged [users]") {
		t.Errorf("DELETE default: %s", got)
	}
	want("", false, "default")
	want("default", false, "is not configured")
	want("users", true, "")
	if code, body, _ := httpGet(t, "http://"+httpAddr+"/readyz"); code != http.StatusOK {
		t.Errorf("/readyz serving users: %d %s", code, body)
	}

	change("DELETE", "/v1/namespaces/users", "")
	want("users", false, "this node serves no namespace")
	if code, body, _ := httpGet(t, "http://"+httpAddr+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "serving no namespace") {
		t.Errorf("/readyz serving nothing: %d %q; want 503 serving no namespace", code, body)
	}
	change("PUT", "/v1/namespaces/default", `{"window_sizes":["1s","60s"],"sync_rate":-1}`)
	want("", true, "")
}
