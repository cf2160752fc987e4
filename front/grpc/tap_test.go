package grpcfront

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// countingConn counts the bytes written to it.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// TestTapRefusesBeforeReading: a 15 MB batch without a credential is
// refused UNAUTHENTICATED (the whole call, not item by item) before its
// client has sent 1 MiB of it; with the token it is served.
func TestTapRefusesBeforeReading(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serveAuth(t, newAuthorizer(t), lis)
	var sent atomic.Int64
	conn := dialWith(t, lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			return countingConn{Conn: c, n: &sent}, err
		}))
	c := limiterv1.NewRateLimiterClient(conn)
	req := &limiterv1.AllowBatchRequest{}
	key := strings.Repeat("k", 1000)
	for range 10_000 {
		req.Items = append(req.Items, &limiterv1.AllowRequest{Key: key, Limits: benchLimits, Namespace: strings.Repeat("n", 400)})
	}
	if size := req.SizeVT(); size < 14_000_000 || size > MaxRecvMsgSize {
		t.Fatalf("the batch is %d bytes", size)
	}
	// The connection is up before the count starts.
	if _, err := c.Increment(withToken(bg, "Bearer "+testToken), &limiterv1.IncrementRequest{Key: "k"}); err != nil {
		t.Fatal(err)
	}
	before := sent.Load()
	_, err = c.AllowBatch(bg, req)
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("a batch without a credential: %v; want UNAUTHENTICATED", err)
	}
	if n := sent.Load() - before; n >= 1<<20 {
		t.Errorf("the client had sent %d bytes when it was refused; want < 1 MiB", n)
	}
	// With the token it is read and served (its items refused by the
	// namespace, which does not exist: the call itself succeeds).
	resp, err := c.AllowBatch(withToken(bg, "Bearer "+testToken), req)
	if err != nil {
		t.Fatalf("the batch with the token: %v", err)
	}
	if len(resp.GetResults()) != len(req.Items) {
		t.Errorf("%d results for %d items", len(resp.GetResults()), len(req.Items))
	}
}

// TestTapOpenServices: the health and reflection services need no
// credential; every other method does.
func TestTapOpenServices(t *testing.T) {
	for m, want := range map[string]bool{
		"/grpc.health.v1.Health/Check":                                   true,
		"/grpc.health.v1.Health/Watch":                                   true,
		"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo":      true,
		"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": true,
		limiterv1.RateLimiter_Allow_FullMethodName:                       false,
		"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit":   false,
		"/grpc.health.v1.HealthX/Check":                                  false,
	} {
		if got := open(m); got != want {
			t.Errorf("open(%q) = %v, want %v", m, got, want)
		}
	}
}

// TestInflightBytes: requests are held to the budget while their calls
// run, and a request that does not fit is refused RESOURCE_EXHAUSTED.
func TestInflightBytes(t *testing.T) {
	req := &limiterv1.IncrementRequest{Key: strings.Repeat("k", 100)}
	size := int64(req.SizeVT())
	ic := InflightBytes(size + size/2)
	release := make(chan struct{})
	entered := make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := ic(bg, req, nil, func(context.Context, any) (any, error) {
			close(entered)
			<-release
			return nil, nil
		})
		done <- err
	}()
	<-entered
	if _, err := ic(bg, req, nil, func(context.Context, any) (any, error) { return nil, nil }); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a second request while the first is held: %v; want RESOURCE_EXHAUSTED", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := ic(bg, req, nil, func(context.Context, any) (any, error) { return nil, nil }); err != nil {
		t.Errorf("a request once the first returned: %v", err)
	}
}
