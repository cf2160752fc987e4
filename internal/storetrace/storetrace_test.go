package storetrace

import (
	"context"
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// abilities lists which optional interfaces st has, by type assertion.
func abilities(st clustersync.Store) [5]bool {
	_, pf := st.(clustersync.PushFetcher)
	_, aa := st.(clustersync.AtomicAllower)
	_, w := st.(clustersync.Windower)
	_, bs := st.(clustersync.BucketStore)
	_, ls := st.(clustersync.LeaseStore)
	return [5]bool{pf, aa, w, bs, ls}
}

// full has every optional interface and records the calls it gets.
type full struct {
	calls []string
	err   error
}

func (f *full) Push(context.Context, string, []clustersync.Row) error {
	f.calls = append(f.calls, "Push")
	return f.err
}

func (f *full) Fetch(context.Context, string, []clustersync.WindowKey, []int64) error {
	f.calls = append(f.calls, "Fetch")
	return f.err
}

func (f *full) Close() error { f.calls = append(f.calls, "Close"); return nil }

func (f *full) PushFetch(context.Context, string, []clustersync.Row, []int64) error {
	f.calls = append(f.calls, "PushFetch")
	return f.err
}

func (f *full) Allow(context.Context, clustersync.AllowRequest) (clustersync.AllowResult, error) {
	f.calls = append(f.calls, "Allow")
	return clustersync.AllowResult{Allowed: true}, f.err
}

func (f *full) Window(context.Context, clustersync.WindowKey) (int64, error) {
	f.calls = append(f.calls, "Window")
	return 7, f.err
}

func (f *full) Buckets(context.Context, string, int64, int64, []clustersync.BucketCall, []clustersync.BucketReply) (bool, error) {
	f.calls = append(f.calls, "Buckets")
	return true, f.err
}

func (f *full) Leases(context.Context, int64, []clustersync.LeaseOp, []clustersync.LeaseReply) error {
	f.calls = append(f.calls, "Leases")
	return f.err
}

// TestKeepsOptionalInterfaces: for every combination of the optional
// interfaces, the wrapped store has exactly the inner store's.
func TestKeepsOptionalInterfaces(t *testing.T) {
	tp := noop.NewTracerProvider()
	for mask := range 1 << 5 {
		// A store with exactly the interfaces of mask.
		inner := withOptionals(&store{st: &full{}, tracer: tp.Tracer("")}, mask)
		want := abilities(inner)
		for i, has := range want {
			if has != (mask&(1<<i) != 0) {
				t.Fatalf("mask %05b: inner store has %v", mask, want)
			}
		}
		if got := abilities(Wrap(inner, tp, "x")); got != want {
			t.Errorf("mask %05b: wrapped store has %v, the inner one %v", mask, got, want)
		}
	}
	mem := memory.New()
	for _, st := range []clustersync.Store{mem, memory.NewFaulty(mem).Store()} {
		if got, want := abilities(Wrap(st, tp, "x")), abilities(st); got != want {
			t.Errorf("%T: wrapped store has %v, want %v", st, got, want)
		}
	}
	if st := Wrap(mem, tp, "x"); Unwrap(st) != mem || Unwrap(mem) != mem {
		t.Error("Unwrap does not return the wrapped store")
	}
}

// TestSpans: every call forwards and makes one client span, a child of
// the caller's, named for the method, with the store's name and the
// call's error.
func TestSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	inner := &full{}
	st := Wrap(inner, tp, "main")
	ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
	rows := make([]clustersync.Row, 3)
	st.Push(ctx, "i", rows)
	st.Fetch(ctx, "i", make([]clustersync.WindowKey, 2), make([]int64, 2))
	st.(clustersync.PushFetcher).PushFetch(ctx, "i", rows, make([]int64, 3))
	st.(clustersync.AtomicAllower).Allow(ctx, clustersync.AllowRequest{Limits: make([]clustersync.AllowLimit, 1)})
	if n, _ := st.(clustersync.Windower).Window(ctx, clustersync.WindowKey{}); n != 7 {
		t.Errorf("Window = %d, want the inner store's 7", n)
	}
	st.(clustersync.BucketStore).Buckets(ctx, "i", 0, 1, nil, nil)
	inner.err = errors.New("down")
	if err := st.(clustersync.LeaseStore).Leases(ctx, 0, nil, nil); err != inner.err {
		t.Errorf("Leases = %v, want the inner store's error", err)
	}
	st.Close()
	parent.End()

	wantCalls := []string{"Push", "Fetch", "PushFetch", "Allow", "Window", "Buckets", "Leases", "Close"}
	if len(inner.calls) != len(wantCalls) {
		t.Fatalf("inner store got %v, want %v", inner.calls, wantCalls)
	}
	spans := exp.GetSpans()
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	p := byName["parent"]
	for _, m := range wantCalls[:7] {
		s, ok := byName["store "+m]
		if !ok {
			t.Errorf("no span for %s", m)
			continue
		}
		if s.Parent.SpanID() != p.SpanContext.SpanID() || s.SpanContext.TraceID() != p.SpanContext.TraceID() {
			t.Errorf("span %s is not a child of the caller's", s.Name)
		}
		if s.SpanKind != trace.SpanKindClient {
			t.Errorf("span %s kind %v, want client", s.Name, s.SpanKind)
		}
		var store string
		for _, a := range s.Attributes {
			if a.Key == StoreKey {
				store = a.Value.AsString()
			}
		}
		if store != "main" {
			t.Errorf("span %s store = %q, want main", s.Name, store)
		}
		failed := s.Status.Code.String() == "Error"
		if failed != (m == "Leases") {
			t.Errorf("span %s status %v", s.Name, s.Status)
		}
	}
	if len(spans) != 8 { // the seven calls and the parent; Close makes none
		t.Errorf("%d spans, want 8", len(spans))
	}
}

func TestOnlyWithParent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	st := Wrap(&full{}, tp, "main", OnlyWithParent())
	st.Push(context.Background(), "i", nil) // a tick's: no span
	ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
	st.Push(ctx, "i", nil)
	parent.End()
	var names []string
	for _, s := range exp.GetSpans() {
		names = append(names, s.Name)
	}
	if len(names) != 2 || names[0] != "store Push" || names[1] != "parent" {
		t.Errorf("spans %v, want [store Push parent]", names)
	}
}

// discard is an exporter that drops every span.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkPush is one Push on a store that answers at once: unwrapped,
// wrapped with tracing off (a no-op provider), and wrapped with every
// span sampled and batched.
func BenchmarkPush(b *testing.B) {
	sdk := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discard{}))
	defer sdk.Shutdown(context.Background())
	rows := make([]clustersync.Row, 1)
	for _, c := range []struct {
		name string
		st   clustersync.Store
	}{{"bare", &nop{}}, {"noop", Wrap(&nop{}, noop.NewTracerProvider(), "main")}, {"sampled", Wrap(&nop{}, sdk, "main")}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				c.st.Push(ctx, "i", rows)
			}
		})
	}
}

// nop is a store that does nothing.
type nop struct{}

func (*nop) Push(context.Context, string, []clustersync.Row) error                 { return nil }
func (*nop) Fetch(context.Context, string, []clustersync.WindowKey, []int64) error { return nil }
func (*nop) Close() error                                                          { return nil }
