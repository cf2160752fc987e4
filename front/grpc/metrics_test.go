package grpcfront

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/reqmetrics/metricstest"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/service"
)

// newMetricsServer serves cfgs (none: testNamespaces) with UnaryMetrics
// over bufconn.
func newMetricsServer(t *testing.T, cfgs ...node.Config) (limiterv1.RateLimiterClient, *prometheus.Registry) {
	t.Helper()
	if len(cfgs) == 0 {
		cfgs = testNamespaces()
	}
	n, err := node.New(cfgs, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, func(name string) bool { _, err := n.Namespace(name); return err == nil })
	lis := bufconn.Listen(1 << 20)
	gs := NewServer(svc.Observe(service.FrontGRPC, m), grpc.ChainUnaryInterceptor(UnaryMetrics(m)))
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
	})
	return limiterv1.NewRateLimiterClient(conn), reg
}

func TestUnaryMetrics(t *testing.T) {
	c, reg := newMetricsServer(t)
	ctx := t.Context()
	allow := func(ns, key string) *limiterv1.AllowRequest {
		return &limiterv1.AllowRequest{Namespace: ns, Key: key, Limits: []*limiterv1.Limit{{WindowSize: dur(time.Hour), Limit: 1}}}
	}
	for range 2 { // allowed, then denied
		if _, err := c.Allow(ctx, allow("api", "a")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Allow(ctx, allow("nosuch", "a")); err == nil {
		t.Fatal("Allow in an unknown namespace: no error")
	}
	token := &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 1, RefillTime: dur(time.Hour)}}}
	if _, err := c.AllowBatch(ctx, &limiterv1.AllowBatchRequest{Items: []*limiterv1.AllowRequest{
		{Key: "t", Limits: []*limiterv1.Limit{token}}, {Key: "t", Limits: []*limiterv1.Limit{token}}, allow("nosuch", "b"),
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, &limiterv1.AcquireRequest{Namespace: "api", Key: "j", Limit: 1, Ttl: dur(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Increment(ctx, &limiterv1.IncrementRequest{Key: "i"}); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"front": "grpc", "limiter_namespace": "api", "kind": "sliding_window", "decision": "allowed"}, 1},
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
	}{{"Allow", "OK", 2}, {"Allow", "NotFound", 1}, {"AllowBatch", "OK", 1}, {"Acquire", "OK", 1}, {"Increment", "OK", 1}} {
		labels := map[string]string{"method": "limiter.v1.RateLimiter/" + w.method, "code": w.code}
		if got := metricstest.Sum(t, reg, "limiterd_requests_total", labels); got != w.want {
			t.Errorf("limiterd_requests_total%v = %v, want %v", labels, got, w.want)
		}
	}
	if got := metricstest.Sum(t, reg, "limiterd_request_duration_seconds", map[string]string{"method": "limiter.v1.RateLimiter/Allow"}); got != 3 {
		t.Errorf("Allow's latency samples = %v, want 3", got)
	}
}

// TestDryRunMetrics is the acceptance test of dry runs through the gRPC
// API: a shadow policy of 2 per minute admits the third call, answering
// dry_run and would_allow false, and the decision metrics count one
// would-be refusal (decision dry_run_denied) beside two admitted calls.
func TestDryRunMetrics(t *testing.T) {
	cfg := node.Config{Name: "default", WindowSizes: []time.Duration{time.Second, time.Minute}, Policies: map[string]ratelimit.Policy{"login": {Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 2}}, Shadow: true}}}
	c, reg := newMetricsServer(t, cfg)
	for i := range 3 {
		resp, err := c.Allow(t.Context(), &limiterv1.AllowRequest{Key: "k", Policy: "login"})
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 2; !resp.GetAllowed() || !resp.GetDryRun() || resp.GetWouldAllow() != want {
			t.Errorf("call %d: %v; want allowed, a dry run, would_allow %v", i+1, resp, want)
		}
		if i == 2 && resp.GetRetryAfter() == nil {
			t.Errorf("call 3: %v; want the retry_after the refusal would have had", resp)
		}
	}
	for _, w := range []struct {
		decision string
		want     float64
	}{{"allowed", 2}, {"dry_run_denied", 1}, {"denied", 0}} {
		labels := map[string]string{"limiter_namespace": "default", "kind": "sliding_window", "decision": w.decision}
		if got := metricstest.Sum(t, reg, "limiterd_decisions_total", labels); got != w.want {
			t.Errorf("limiterd_decisions_total%v = %v, want %v", labels, got, w.want)
		}
	}
	_, err := c.Allow(t.Context(), &limiterv1.AllowRequest{Key: "k", Policy: "signup"})
	if st, _ := status.FromError(err); st.Code() != codes.InvalidArgument || st.Message() != `policy: policy "signup" is not defined in namespace "default"` {
		t.Errorf("an unknown policy: %v, want INVALID_ARGUMENT naming it", err)
	}
}

// TestUnaryMetricsBounded: 10^5 distinct keys and 10^3 unknown namespace
// names add no series.
func TestUnaryMetricsBounded(t *testing.T) {
	c, reg := newMetricsServer(t)
	ctx := t.Context()
	batch := func(ns func(i int) string, prefix string, n int) {
		items := make([]*limiterv1.AllowRequest, n)
		for i := range items {
			items[i] = &limiterv1.AllowRequest{Namespace: ns(i), Key: prefix + strconv.Itoa(i),
				Limits: []*limiterv1.Limit{{WindowSize: dur(time.Hour), Limit: 1}}}
		}
		if _, err := c.AllowBatch(ctx, &limiterv1.AllowBatchRequest{Items: items}); err != nil {
			t.Fatal(err)
		}
	}
	api := func(int) string { return "api" }
	batch(api, "warm", 1)
	batch(api, "warm", 1) // denied
	batch(func(int) string { return "nosuch" }, "warm", 1)
	before := metricstest.Series(t, reg)
	for b := range 10 {
		batch(api, "k"+strconv.Itoa(b)+"-", service.MaxBatchItems)
	}
	batch(func(i int) string { return "ns-" + strconv.Itoa(i) }, "k", 1000)
	if after := metricstest.Series(t, reg); after != before {
		t.Errorf("series: %d before the flood, %d after", before, after)
	}
	want := float64(1 + 10*service.MaxBatchItems)
	if got := metricstest.Sum(t, reg, "limiterd_decisions_total", map[string]string{"limiter_namespace": "api", "decision": "allowed", "kind": "sliding_window"}); got != want {
		t.Errorf("api's allowed = %v, want %v", got, want)
	}
}

// BenchmarkUnaryMetrics is the interceptor's own cost on an Allow: the
// handler answers at once.
func BenchmarkUnaryMetrics(b *testing.B) {
	req := &limiterv1.AllowRequest{Namespace: "api", Key: "k", Limits: []*limiterv1.Limit{{WindowSize: dur(time.Second), Limit: 1}}}
	resp := &limiterv1.AllowResponse{Allowed: true}
	handler := func(context.Context, any) (any, error) { return resp, nil }
	info := &grpc.UnaryServerInfo{FullMethod: "/limiter.v1.RateLimiter/Allow"}
	m := NewMetrics(prometheus.NewRegistry(), func(n string) bool { return n == "api" })
	for _, c := range []struct {
		name string
		ic   grpc.UnaryServerInterceptor
	}{
		{"bare", func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			return h(ctx, req)
		}},
		{"metrics", UnaryMetrics(m)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					c.ic(ctx, req, info, handler)
				}
			})
		})
	}
}
