package middleware_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/client"
	"github.com/limiterd/limiterd/middleware"
)

// healthBehind serves the gRPC health service behind the interceptor.
func healthBehind(t *testing.T, icpt grpc.UnaryServerInterceptor) healthpb.HealthClient {
	t.Helper()
	lis := bufconn.Listen(1 << 16)
	gs := grpc.NewServer(grpc.UnaryInterceptor(icpt))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); gs.Stop() })
	return healthpb.NewHealthClient(conn)
}

func TestUnaryServerInterceptor(t *testing.T) {
	s := &scripted{}
	key := middleware.GRPCKeys(middleware.KeyByMetadata("tenant"), middleware.KeyByMethod)
	hc := healthBehind(t, middleware.UnaryServerInterceptor(s, key,
		middleware.WithLimits(client.Leaky(10, 10*time.Second, 0)), middleware.WithRateLimitedFor()))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "tenant", "acme")

	s.d = client.Decision{Allowed: true, Limits: []*limiterv1.LimitStatus{status(10, 9, time.Second)}}
	var md metadata.MD
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md)); err != nil {
		t.Fatalf("admitted call: %v", err)
	}
	if got := md.Get("ratelimit"); len(got) != 1 || got[0] != `"default";r=9;t=1` {
		t.Errorf("ratelimit metadata %q", got)
	}
	if k := s.reqs[0].GetKey(); k != "4:acme28:/grpc.health.v1.Health/Check" {
		t.Errorf("key %q", k)
	}

	s.d = client.Decision{Limits: []*limiterv1.LimitStatus{status(10, 0, 300*time.Millisecond)}, RetryAfter: 300 * time.Millisecond}
	md = nil
	_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	st := grpcstatus.Convert(err)
	if st.Code() != codes.ResourceExhausted {
		t.Fatalf("refused call: %v", err)
	}
	var retry *errdetails.RetryInfo
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = ri
		}
	}
	if retry.GetRetryDelay().AsDuration() != 300*time.Millisecond {
		t.Errorf("RetryInfo %v, want 300ms", retry)
	}
	if got := md.Get("x-rate-limited-for"); len(got) != 1 || got[0] != "0.3" {
		t.Errorf("x-rate-limited-for %q", got)
	}
	if got := md.Get("retry-after"); len(got) != 1 || got[0] != "1" {
		t.Errorf("retry-after %q", got)
	}

	s.d = client.Decision{Err: errors.New("down")}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); grpcstatus.Code(err) != codes.Unavailable {
		t.Errorf("fail-closed: %v, want UNAVAILABLE", err)
	}
	s.d = client.Decision{Allowed: true, Err: errors.New("down")}
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("fail-open: %v", err)
	}
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); grpcstatus.Code(err) != codes.InvalidArgument {
		t.Errorf("no tenant: %v, want INVALID_ARGUMENT", err)
	}
}

func TestKeyByPeer(t *testing.T) {
	s := &scripted{d: client.Decision{Allowed: true}}
	hc := healthBehind(t, middleware.UnaryServerInterceptor(s, middleware.KeyByPeer))
	if _, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if k := s.reqs[0].GetKey(); k != "bufconn" {
		t.Errorf("key %q, want bufconn's address", k)
	}
}
