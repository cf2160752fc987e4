package storetrace

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	clustersync "github.com/limiterd/limiterd/sync"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/limiterd/limiterd/internal/storetrace"

// Attribute keys of the spans.
const (
	// StoreKey is the store's configured name.
	StoreKey = attribute.Key("limiterd.store")
	// ItemsKey is how many rows, limits, calls or operations the round
	// trip carries.
	ItemsKey = attribute.Key("limiterd.store.items")
)

// Hook returns the StoreTrace that makes a span with tp's tracer for each
// store call, store being the store's configured name (for instance
// "main"). It is for sync.Config.Trace.
func Hook(tp trace.TracerProvider, store string) clustersync.StoreTrace {
	tracer := tp.Tracer(ScopeName)
	// Made once: a call's options would otherwise cost allocations even
	// when nothing records.
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(StoreKey.String(store))}
	return func(ctx context.Context, op string, items int) (context.Context, func(error)) {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			return ctx, func(error) {} // no caller's trace to join
		}
		ctx, span := tracer.Start(ctx, "store "+op, opts...)
		if span.IsRecording() {
			span.SetAttributes(ItemsKey.Int(items))
		}
		return ctx, func(err error) {
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			span.End()
		}
	}
}
