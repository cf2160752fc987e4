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
	// ItemsKey is how many rows, keys, limits, calls or operations the
	// round trip carries.
	ItemsKey = attribute.Key("limiterd.store.items")
)

// Option tunes Wrap.
type Option func(*store)

// OnlyWithParent traces only the calls whose context carries a span (a
// request's): the sync loops' ticks, which have none, then make no traces
// of their own, a few per second per namespace.
func OnlyWithParent() Option { return func(s *store) { s.onlyWithParent = true } }

// Wrap returns st with a span per call made by tp's tracer, st's
// configured name (for instance "main") on each; the result implements
// exactly the optional sync interfaces st implements. Close is not traced.
func Wrap(st clustersync.Store, tp trace.TracerProvider, name string, opts ...Option) clustersync.Store {
	s := &store{st: st, tracer: tp.Tracer(ScopeName),
		opts: []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(StoreKey.String(name))}}
	for _, o := range opts {
		o(s)
	}
	return withOptionals(s, optionals(st))
}

// Unwrap returns the store Wrap wrapped, or st itself when Wrap did not
// make it.
func Unwrap(st clustersync.Store) clustersync.Store {
	if u, ok := st.(interface{ unwrap() clustersync.Store }); ok {
		return u.unwrap()
	}
	return st
}

// store traces the calls to st; the generated types give it the optional
// interfaces st has.
type store struct {
	st     clustersync.Store
	tracer trace.Tracer
	// opts start every span, made once: the options of a call would
	// otherwise cost allocations even when nothing records.
	opts           []trace.SpanStartOption
	onlyWithParent bool
}

func (s *store) unwrap() clustersync.Store { return s.st }

// start begins a call's span, a client span as the store is remote.
func (s *store) start(ctx context.Context, name string, items int) (context.Context, trace.Span) {
	if s.onlyWithParent && !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(ctx) // a no-op span: ending it does nothing
	}
	ctx, span := s.tracer.Start(ctx, name, s.opts...)
	if span.IsRecording() {
		span.SetAttributes(ItemsKey.Int(items))
	}
	return ctx, span
}

// end ends span, with err as its status.
func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (s *store) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	ctx, span := s.start(ctx, "store Push", len(rows))
	err := s.st.Push(ctx, inc, rows)
	end(span, err)
	return err
}

func (s *store) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	ctx, span := s.start(ctx, "store Fetch", len(keys))
	err := s.st.Fetch(ctx, inc, keys, others)
	end(span, err)
	return err
}

func (s *store) Close() error { return s.st.Close() }

func (s *store) pushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	ctx, span := s.start(ctx, "store PushFetch", len(rows))
	err := s.st.(clustersync.PushFetcher).PushFetch(ctx, inc, rows, others)
	end(span, err)
	return err
}

func (s *store) allow(ctx context.Context, req clustersync.AllowRequest) (clustersync.AllowResult, error) {
	ctx, span := s.start(ctx, "store Allow", len(req.Limits))
	res, err := s.st.(clustersync.AtomicAllower).Allow(ctx, req)
	if err == nil {
		span.SetAttributes(attribute.Bool("limiterd.allowed", res.Allowed))
	}
	end(span, err)
	return res, err
}

func (s *store) window(ctx context.Context, key clustersync.WindowKey) (int64, error) {
	ctx, span := s.start(ctx, "store Window", 1)
	n, err := s.st.(clustersync.Windower).Window(ctx, key)
	end(span, err)
	return n, err
}

func (s *store) buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	ctx, span := s.start(ctx, "store Buckets", len(calls))
	allowed, err := s.st.(clustersync.BucketStore).Buckets(ctx, inc, at, take, calls, replies)
	if err == nil {
		span.SetAttributes(attribute.Bool("limiterd.allowed", allowed))
	}
	end(span, err)
	return allowed, err
}

func (s *store) leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	ctx, span := s.start(ctx, "store Leases", len(ops))
	err := s.st.(clustersync.LeaseStore).Leases(ctx, now, ops, replies)
	end(span, err)
	return err
}
