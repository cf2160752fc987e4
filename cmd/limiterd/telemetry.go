package main

import (
	"context"

	"google.golang.org/grpc"

	grpcfront "github.com/limiterd/limiterd/front/grpc"
	"github.com/limiterd/limiterd/internal/reqmetrics"
	"github.com/limiterd/limiterd/internal/telemetry"
)

// configured reports whether name is a namespace the node serves now: the
// request metrics label only those, so that the series stay bounded
// whatever names callers send.
func (d *daemon) configured(name string) bool {
	_, err := d.svc.Namespace(name)
	return err == nil
}

// openTelemetry registers the build info and starts the tracer provider
// (a no-op one unless tracing has an endpoint).
func (d *daemon) openTelemetry(ctx context.Context) error {
	if err := reqmetrics.RegisterBuildInfo(d.reg); err != nil {
		return err
	}
	c := d.cfg.Tracing
	tp, stop, err := telemetry.Setup(ctx, telemetry.Config{Endpoint: c.Endpoint, Insecure: c.Insecure, Headers: c.Headers,
		SampleRatio: c.SampleRatio, ServiceVersion: version(), InstanceID: d.inc})
	if err != nil {
		return err
	}
	d.tracer, d.stopTracing = tp, stop
	return nil
}

// grpcTelemetry is the gRPC front's request metrics m and, when tracing,
// its spans. It comes before authorization: refused calls count too.
func (d *daemon) grpcTelemetry(m *reqmetrics.Metrics) []grpc.ServerOption {
	opts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(grpcfront.UnaryMetrics(m))}
	if d.cfg.Tracing.Endpoint != "" {
		opts = append(opts, telemetry.ServerOption(d.tracer))
	}
	return opts
}
