package grpcfront

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/limiterd/limiterd/internal/reqmetrics"
)

// envoyMethod is Envoy's rate limit call, served by front/envoy on the
// same server: its calls and latency are counted here.
const envoyMethod = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// NewMetrics makes the gRPC front's request metrics (front="grpc") on reg:
// a series per limiter.v1 method, the health Check and Envoy's
// ShouldRateLimit, every other method counted as "other"; configured tells which namespace names get their own
// limiter_namespace label (nil: none, all are "other"). Serve them with
// UnaryMetrics.
func NewMetrics(reg prometheus.Registerer, configured func(namespace string) bool) *reqmetrics.Metrics {
	methods := append(reqmetrics.LimiterMethods(), strings.TrimPrefix(healthpb.Health_Check_FullMethodName, "/"), envoyMethod)
	return reqmetrics.New(reg, reqmetrics.Config{Front: "grpc", Methods: methods, Configured: configured})
}

// UnaryMetrics returns the interceptor that records every unary call in
// m: its method, gRPC code and latency. Put it first in the chain
// (grpc.ChainUnaryInterceptor(UnaryMetrics(m), UnaryAuth(...))), so that
// refused calls are counted too. The decisions are the service's to
// report: serve a service that reports them to m
// (NewServer(svc.Observe(service.FrontGRPC, m))).
func UnaryMetrics(m *reqmetrics.Metrics) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		resp, err := handler(ctx, req)
		m.Method(strings.TrimPrefix(info.FullMethod, "/")).Observe(time.Since(start), status.Code(err).String())
		return resp, err
	}
}
