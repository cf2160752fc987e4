package telemetry

import (
	"context"
	"math"
	"net"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	grpcfront "github.com/limiterd/limiterd/front/grpc"
	"github.com/limiterd/limiterd/internal/storetrace"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

func TestSetupOff(t *testing.T) {
	tp, shutdown, err := Setup(t.Context(), Config{})
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(t.Context(), "x")
	if span.IsRecording() || span.SpanContext().IsValid() {
		t.Error("tracing off: a span records")
	}
	if err := shutdown(t.Context()); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func TestSetupOn(t *testing.T) {
	// Nothing listens there: the exporter connects lazily, and a
	// provider with nothing to flush shuts down at once.
	tp, shutdown, err := Setup(t.Context(), Config{Endpoint: "127.0.0.1:1", Insecure: true, SampleRatio: 0.5,
		ServiceVersion: "v1", InstanceID: "edge-1/abc", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tp.(*sdktrace.TracerProvider); !ok {
		t.Errorf("provider %T, want the SDK's", tp)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{{SampleRatio: -0.1}, {SampleRatio: 1.5}, {SampleRatio: math.NaN()}, {Timeout: -time.Second}} {
		if _, _, err := Setup(t.Context(), c); err == nil {
			t.Errorf("Setup(%+v): no error", c)
		}
	}
}

// TestServerAndStoreSpans: a gRPC call to a synchronous namespace gives
// a server span and, below it, a span per store round trip.
func TestServerAndStoreSpans(t *testing.T) {
	exp := &serverSpanExporter{InMemoryExporter: tracetest.NewInMemoryExporter(), ended: make(chan struct{}, 1)}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())

	n, err := node.New([]node.Config{node.DefaultConfig(),
		{Name: "sync", WindowSizes: []time.Duration{time.Second, time.Minute}, Shared: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := n.Namespace("sync")
	if err != nil {
		t.Fatal(err)
	}
	sy, err := clustersync.NewSyncer(ns, clustersync.Synchronous{}, memory.New(), clustersync.NewIncarnation("test"), clustersync.NewVersions(time.Now),
		clustersync.Config{Trace: storetrace.Hook(tp, "mem")}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := service.New(n, sy)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 20)
	gs := grpcfront.NewServer(svc, ServerOption(tp))
	go gs.Serve(lis)
	defer gs.Stop()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := limiterv1.NewRateLimiterClient(conn).Allow(t.Context(), &limiterv1.AllowRequest{Namespace: "sync", Key: "k",
		Limits: []*limiterv1.Limit{{WindowSize: durationpb.New(time.Second), Limit: 10}}})
	if err != nil || !resp.GetAllowed() {
		t.Fatalf("Allow = %v, %v; want allowed", resp, err)
	}
	// The server span ends when the call's stats end, which may be after
	// the client has its answer: wait for its export.
	select {
	case <-exp.ended:
	case <-time.After(10 * time.Second):
		t.Fatalf("no server span ended within 10 s; %d spans", len(exp.GetSpans()))
	}

	var server *tracetest.SpanStub
	var stores []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch {
		case s.SpanKind == trace.SpanKindServer && s.Name == "limiter.v1.RateLimiter/Allow":
			server = &s
		case s.InstrumentationScope.Name == storetrace.ScopeName:
			stores = append(stores, s)
		}
	}
	if server == nil {
		t.Fatalf("no server span for Allow among %d spans", len(exp.GetSpans()))
	}
	if len(stores) == 0 {
		t.Fatal("no store span")
	}
	for _, s := range stores {
		if s.Parent.SpanID() != server.SpanContext.SpanID() || s.SpanContext.TraceID() != server.SpanContext.TraceID() {
			t.Errorf("store span %q is not a child of the server span", s.Name)
		}
	}
	t.Logf("server span %s; store spans: %d, first %q", server.Name, len(stores), stores[0].Name)
}

// serverSpanExporter keeps spans in memory and signals the end of each
// server span.
type serverSpanExporter struct {
	*tracetest.InMemoryExporter
	ended chan struct{}
}

func (e *serverSpanExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.InMemoryExporter.ExportSpans(ctx, spans)
	for _, s := range spans {
		if s.SpanKind() == trace.SpanKindServer {
			select {
			case e.ended <- struct{}{}:
			default:
			}
		}
	}
	return err
}
