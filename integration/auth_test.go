//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/client"
	"github.com/limiterd/limiterd/integration/harness"
)

// TestAuthTokenFile: a limiterd process whose auth section reads a token
// file serves that token on gRPC (the Go client too), HTTP and RESP, in a
// namespace synchronous on Redis, and refuses everyone else without
// counting; the token appears in no log line.
func TestAuthTokenFile(t *testing.T) {
	r := harness.SharedRedis(t)
	dir := t.TempDir()
	const token = "integration-token-0123456789"
	tokenFile := filepath.Join(dir, "app.token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	respAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	ns := harness.UniqueName("auth")
	l := harness.StartLimiterd(t, "auth", fmt.Sprintf(`resp_addr: %s
stores:
  main: {type: redis, addrs: [%q]}
namespaces:
  - {name: default, window_sizes: [1s, 60s], sync_rate: -1}
  - {name: %s, window_sizes: [1s, 60s], sync_rate: 0, store: main}
auth:
  tokens:
    - {name: app, token_file: %s, namespaces: [%s], operations: [read, write]}
`, respAddr, r.Addr(), ns, tokenFile, ns))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	authed := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	req := &limiterv1.IncrementRequest{Namespace: ns, Key: "k"}

	// gRPC: refused without the token, in another namespace with it.
	if _, err := l.Client.Increment(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Errorf("Increment without a token: %v", err)
	}
	if _, err := l.Client.Increment(authed, &limiterv1.IncrementRequest{Key: "k"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Increment in default with the token: %v", err)
	}
	// HTTP.
	for _, c := range []struct {
		header string
		want   int
	}{{"", http.StatusUnauthorized}, {"Bearer wrong-wrong-wrong-wrong", http.StatusUnauthorized}, {"Bearer " + token, http.StatusOK}} {
		hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+l.HTTPAddr+"/limiter.v1.RateLimiter/Increment",
			strings.NewReader(fmt.Sprintf(`{"namespace":%q,"key":"k"}`, ns)))
		if c.header != "" {
			hr.Header.Set("Authorization", c.header)
		}
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("HTTP with %q: %d; want %d", c.header, resp.StatusCode, c.want)
		}
	}
	// RESP.
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, MaxRetries: -1})
	defer rdb.Close()
	if err := rdb.Do(ctx, "RL.INCR", "k", "NS", ns).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Errorf("RL.INCR without AUTH: %v", err)
	}
	authedRDB := redis.NewClient(&redis.Options{Addr: respAddr, Username: "app", Password: token, MaxRetries: -1})
	defer authedRDB.Close()
	if err := authedRDB.Do(ctx, "RL.INCR", "k", "NS", ns).Err(); err != nil {
		t.Errorf("RL.INCR after AUTH: %v", err)
	}
	// The Go client with the token.
	c, err := client.New(l.GRPCAddr, client.WithBearerToken(token), client.WithTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Increment(ctx, &limiterv1.IncrementRequest{Namespace: ns, Key: "k"}); err != nil {
		t.Errorf("the Go client with the token: %v", err)
	}
	// Exactly the three granted calls counted, in the store.
	got, err := l.Client.SlidingWindow(authed, &limiterv1.SlidingWindowRequest{Namespace: ns, Key: "k", WindowSize: durationpb.New(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if rate := got.GetRates()[0].GetRate(); rate != 3 {
		t.Errorf("rate %g after three granted Increments; want 3", rate)
	}
	l.Stop()
	if log := l.LogTail(1000); strings.Contains(log, token) {
		t.Error("the token is in the log")
	}
}
