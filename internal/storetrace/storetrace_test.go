package storetrace

import (
	"context"
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestSpans: a call with a caller's span gets a client child span named
// after its op, with the store's name, its items and its error; a call
// without one gets none.
func TestSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	hook := Hook(tp, "main")

	_, end := hook(context.Background(), "Push", 3) // a tick's: no span
	end(nil)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
	_, end = hook(ctx, "Allow", 2)
	end(nil)
	_, end = hook(ctx, "Leases", 1)
	end(errors.New("down"))
	parent.End()

	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want the parent's and two calls'", len(spans))
	}
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	p := byName["parent"]
	for _, c := range []struct {
		name   string
		items  int64
		failed bool
	}{{"store Allow", 2, false}, {"store Leases", 1, true}} {
		s, ok := byName[c.name]
		if !ok {
			t.Errorf("no span %s", c.name)
			continue
		}
		if s.Parent.SpanID() != p.SpanContext.SpanID() || s.SpanContext.TraceID() != p.SpanContext.TraceID() {
			t.Errorf("span %s is not a child of the caller's", s.Name)
		}
		if s.SpanKind != trace.SpanKindClient {
			t.Errorf("span %s kind %v, want client", s.Name, s.SpanKind)
		}
		attrs := map[string]any{}
		for _, a := range s.Attributes {
			attrs[string(a.Key)] = a.Value.AsInterface()
		}
		if attrs[string(StoreKey)] != "main" || attrs[string(ItemsKey)] != c.items {
			t.Errorf("span %s attributes %v", s.Name, attrs)
		}
		if failed := s.Status.Code.String() == "Error"; failed != c.failed {
			t.Errorf("span %s status %v", s.Name, s.Status)
		}
	}
}

// BenchmarkHook is the cost of a traced store call's span, sampled or
// not, against no trace at all.
func BenchmarkHook(b *testing.B) {
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
	}{{"sampled", sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))},
		{"not sampled", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()))}} {
		b.Run(c.name, func(b *testing.B) {
			hook := Hook(c.tp, "main")
			ctx, parent := sdktrace.NewTracerProvider().Tracer("b").Start(context.Background(), "parent")
			defer parent.End()
			b.ReportAllocs()
			for b.Loop() {
				_, end := hook(ctx, "Push", 2)
				end(nil)
			}
		})
	}
}
