package middleware_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/client"
	"github.com/limiterd/limiterd/middleware"
)

// constant answers every Allow with the same Decision: the middleware's own
// cost, without the call.
type constant client.Decision

func (c *constant) Allow(context.Context, *limiterv1.AllowRequest) client.Decision {
	return client.Decision(*c)
}

// admitAll is a limiterd stand-in whose Allow admits everything.
type admitAll struct {
	limiterv1.UnimplementedRateLimiterServer
	resp *limiterv1.AllowResponse
}

func (s *admitAll) Allow(context.Context, *limiterv1.AllowRequest) (*limiterv1.AllowResponse, error) {
	return s.resp, nil
}

// bufconnClient is a Client of an admitAll served over bufconn.
func bufconnClient(b *testing.B, st *limiterv1.LimitStatus) *client.Client {
	lis := bufconn.Listen(1 << 20)
	gs := grpc.NewServer()
	limiterv1.RegisterRateLimiterServer(gs, &admitAll{resp: &limiterv1.AllowResponse{Allowed: true, Limits: []*limiterv1.LimitStatus{st}}})
	go gs.Serve(lis)
	c, err := client.New("passthrough:///bufconn", client.WithTimeout(time.Second), client.WithDialOptions(grpc.WithContextDialer(
		func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close(); gs.Stop() })
	return c
}

// discard is a ResponseWriter that keeps nothing; its header map is
// cleared between requests.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

// run serves one request per iteration and reports the median and 99th
// percentile latency.
func run(b *testing.B, h http.Handler) {
	w := &discard{h: http.Header{}}
	r := httptest.NewRequest(http.MethodGet, "/api", nil)
	r.RemoteAddr = "192.0.2.7:51234"
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		start := time.Now()
		h.ServeHTTP(w, r)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2]), "p50-ns")
	b.ReportMetric(float64(lat[len(lat)*99/100]), "p99-ns")
}

// BenchmarkHTTP compares a trivial handler bare, behind the middleware with
// an Allower that answers at once (the middleware's own cost), and behind
// the middleware with a Client of a limiterd stand-in over bufconn.
func BenchmarkHTTP(b *testing.B) {
	st := &limiterv1.LimitStatus{Limit: 100, Remaining: 50, ResetAfter: durationpb.New(30 * time.Second)}
	opts := []middleware.Option{middleware.WithLimits(client.Window(100, time.Minute))}
	b.Run("bare", func(b *testing.B) { run(b, hello) })
	b.Run("middleware-noop-allower", func(b *testing.B) {
		a := &constant{Allowed: true, Limits: []*limiterv1.LimitStatus{st}}
		run(b, middleware.New(a, middleware.KeyByIP, opts...)(hello))
	})
	b.Run("middleware-noop-allower-refused", func(b *testing.B) {
		a := &constant{Limits: []*limiterv1.LimitStatus{st}, RetryAfter: 700 * time.Millisecond}
		run(b, middleware.New(a, middleware.KeyByIP, append(opts, middleware.WithRateLimitedFor())...)(hello))
	})
	b.Run("middleware-bufconn-client", func(b *testing.B) {
		run(b, middleware.New(bufconnClient(b, st), middleware.KeyByIP, opts...)(hello))
	})
	b.Run("client-call-alone", func(b *testing.B) {
		c := bufconnClient(b, st)
		req := &limiterv1.AllowRequest{Key: "192.0.2.7", Limits: []*limiterv1.Limit{client.Window(100, time.Minute)}}
		run(b, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { c.Allow(context.Background(), req) }))
	})
}
