package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
)

// Config configures tracing. The zero value is tracing off.
type Config struct {
	// Endpoint is the OTLP/gRPC collector's address, host:port (an
	// OpenTelemetry Collector's default is 4317); empty turns tracing
	// off.
	Endpoint string
	// Insecure sends spans without TLS, to a collector on the same host
	// or pod; otherwise the connection uses TLS with the system's roots.
	Insecure bool
	// Headers are sent with every export (a collector's API key).
	Headers map[string]string
	// SampleRatio is the fraction of traces started here that are kept,
	// in (0, 1]; 0 means 1 (every one). A call whose caller sampled its
	// trace is always kept, one whose caller did not never is.
	SampleRatio float64
	// Timeout bounds one export (default 10s).
	Timeout time.Duration
	// ServiceName names the process in the traces (default "limiterd");
	// ServiceVersion and InstanceID (the node incarnation) are added when
	// set.
	ServiceName, ServiceVersion, InstanceID string
}

// Validate reports the first bad field.
func (c Config) Validate() error {
	switch {
	case !(c.SampleRatio >= 0 && c.SampleRatio <= 1): // NaN too
		return fmt.Errorf("telemetry: SampleRatio must be in [0, 1], got %g", c.SampleRatio)
	case c.Timeout < 0:
		return errors.New("telemetry: Timeout must not be negative")
	}
	return nil
}

// Setup returns the TracerProvider to trace with and the function that
// flushes and stops it at shutdown (within its ctx). With no Endpoint it
// is a no-op provider that costs nearly nothing. The exporter connects
// lazily: an unreachable collector is no error here, and its spans are
// dropped (the export is retried within Timeout).
func Setup(ctx context.Context, cfg Config) (trace.TracerProvider, func(context.Context) error, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	if cfg.Endpoint == "" {
		return noop.NewTracerProvider(), func(context.Context) error { return nil }, nil
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.Endpoint)}
	if cfg.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	if len(cfg.Headers) > 0 {
		opts = append(opts, otlptracegrpc.WithHeaders(cfg.Headers))
	}
	if cfg.Timeout > 0 {
		opts = append(opts, otlptracegrpc.WithTimeout(cfg.Timeout))
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
	}
	name := cfg.ServiceName
	if name == "" {
		name = "limiterd"
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.ServiceVersion))
	}
	if cfg.InstanceID != "" {
		attrs = append(attrs, attribute.String("service.instance.id", cfg.InstanceID))
	}
	ratio := cfg.SampleRatio
	if ratio == 0 {
		ratio = 1
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(attrs...)),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
	)
	return tp, tp.Shutdown, nil
}

// Propagator reads and writes the W3C trace context and baggage of a
// call, as OpenTelemetry's SDKs send them.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}

// ServerOption traces every call of a gRPC server with tp: a server span
// per call, continuing the caller's trace when its metadata carries one,
// that the calls' contexts carry down to the store spans. The health
// service's calls are not traced (load balancers poll it).
func ServerOption(tp trace.TracerProvider) grpc.ServerOption {
	return grpc.StatsHandler(otelgrpc.NewServerHandler(
		otelgrpc.WithTracerProvider(tp),
		otelgrpc.WithMeterProvider(metricnoop.NewMeterProvider()),
		otelgrpc.WithPropagators(Propagator()),
		otelgrpc.WithFilter(filters.Not(filters.HealthCheck())),
	))
}
