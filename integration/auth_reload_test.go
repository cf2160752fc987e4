//go:build integration

package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
)

// TestAuthTokenRevokedOnReload: rewriting a token file, then SIGHUP: from
// the next call on, the old token is refused on gRPC, HTTP and the Redis
// protocol — a connection that authenticated with it before included —
// and the new one is accepted.
func TestAuthTokenRevokedOnReload(t *testing.T) {
	dir := t.TempDir()
	const oldToken, newToken = "old-integration-token-0123456789", "new-integration-token-0123456789"
	tokenFile := filepath.Join(dir, "app.token")
	if err := os.WriteFile(tokenFile, []byte(oldToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	respAddr := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	l := harness.StartLimiterd(t, "revoke", fmt.Sprintf(`resp_addr: %s
namespaces:
  - {name: default, window_sizes: [1s, 60s], sync_rate: -1}
auth:
  tokens:
    - {name: app, token_file: %s, namespaces: [default], operations: [read, write]}
`, respAddr, tokenFile))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	with := func(token string) context.Context {
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	grpcCode := func(token string) codes.Code {
		_, err := l.Client.Increment(with(token), &limiterv1.IncrementRequest{Key: "k"})
		return status.Code(err)
	}
	httpCode := func(token string) int {
		t.Helper()
		hr, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+l.HTTPAddr+"/limiter.v1.RateLimiter/Increment",
			strings.NewReader(`{"key":"k"}`))
		hr.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// One connection, authenticated with the old token before the reload.
	before := redis.NewClient(&redis.Options{Addr: respAddr, Username: "app", Password: oldToken, PoolSize: 1, MaxRetries: -1})
	defer before.Close()
	if err := before.Do(ctx, "RL.INCR", "k").Err(); err != nil {
		t.Fatalf("RL.INCR on a connection authenticated with the old token: %v", err)
	}
	if c := grpcCode(oldToken); c != codes.OK {
		t.Fatalf("gRPC with the old token before the reload: %s", c)
	}
	if c := grpcCode(newToken); c != codes.Unauthenticated {
		t.Fatalf("gRPC with the new token before the reload: %s", c)
	}

	if err := os.WriteFile(tokenFile, []byte(newToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(l.PID(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The reload is done when it is logged.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(l.LogTail(200), "namespaces changed"); {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged after SIGHUP:\n%s", l.LogTail(50))
		}
		time.Sleep(20 * time.Millisecond)
	}

	if c := grpcCode(oldToken); c != codes.Unauthenticated {
		t.Errorf("gRPC with the old token after the reload: %s; want Unauthenticated", c)
	}
	if c := grpcCode(newToken); c != codes.OK {
		t.Errorf("gRPC with the new token after the reload: %s; want OK", c)
	}
	if c := httpCode(oldToken); c != http.StatusUnauthorized {
		t.Errorf("HTTP with the old token after the reload: %d; want 401", c)
	}
	if c := httpCode(newToken); c != http.StatusOK {
		t.Errorf("HTTP with the new token after the reload: %d; want 200", c)
	}
	if err := before.Do(ctx, "RL.INCR", "k").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Errorf("RL.INCR on the connection authenticated with the old token, after the reload: %v; want NOAUTH", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, MaxRetries: -1, PoolSize: 1})
	defer rdb.Close()
	if err := rdb.Do(ctx, "AUTH", oldToken).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Errorf("AUTH with the old token after the reload: %v; want WRONGPASS", err)
	}
	if err := rdb.Do(ctx, "AUTH", newToken).Err(); err != nil {
		t.Errorf("AUTH with the new token after the reload: %v", err)
	}
	if err := rdb.Do(ctx, "RL.INCR", "k").Err(); err != nil {
		t.Errorf("RL.INCR after AUTH with the new token: %v", err)
	}
	if log := l.LogTail(1000); strings.Contains(log, oldToken) || strings.Contains(log, newToken) {
		t.Error("a token is in the log")
	}
}
