package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/node"
	clustersync "github.com/limiterd/limiterd/sync"
)

// MaxBatchItems is the most items one batch call may carry.
const MaxBatchItems = 10_000

// maxFuture is how far ahead of the node's clock a request's `at` may be.
const maxFuture = time.Second

// server adapts the engine to the gRPC API; gRPC status codes are chosen
// here only.
type server struct {
	limiterv1.UnimplementedRateLimiterServer
	node    *node.Node
	syncers map[string]*clustersync.Syncer
	scratch sync.Pool // of *allowScratch
}

func newServer(d *daemon) *server {
	s := &server{node: d.node, syncers: d.syncers}
	s.scratch.New = func() any { return new(allowScratch) }
	return s
}

// target resolves a request's namespace and time. A batch passes the
// same nsCache for all its items, which nearly always share a namespace;
// nc may be nil.
func (s *server) target(namespace string, at *timestamppb.Timestamp, nc *nsCache) (*node.Namespace, *clustersync.Syncer, time.Time, error) {
	ns, sy, err := s.namespace(namespace, nc)
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	now := ns.Now()
	t := now
	if at != nil {
		if err := at.CheckValid(); err != nil {
			return nil, nil, t, &node.FieldError{Field: "at", Reason: err.Error(), Err: node.ErrInvalidValue}
		}
		t = at.AsTime()
		sizes := ns.Sizes()
		oldest := now.Add(-sizes[len(sizes)-1])
		if t.Before(oldest) || t.After(now.Add(maxFuture)) {
			return nil, nil, t, &node.FieldError{Field: "at", Err: node.ErrInvalidValue,
				Reason: fmt.Sprintf("must be within [now - %s, now + %s] (now is %s), got %s",
					sizes[len(sizes)-1], maxFuture, now.UTC().Format(time.RFC3339Nano), t.UTC().Format(time.RFC3339Nano))}
		}
	}
	return ns, sy, t, nil
}

// nsCache is the namespace a batch resolved last, under the name its item
// gave.
type nsCache struct {
	name string
	ns   *node.Namespace
	sy   *clustersync.Syncer
}

// namespace resolves a namespace and, when it is synchronous, its syncer.
func (s *server) namespace(name string, nc *nsCache) (*node.Namespace, *clustersync.Syncer, error) {
	if nc != nil && nc.ns != nil && nc.name == name {
		return nc.ns, nc.sy, nil
	}
	ns, err := s.node.Namespace(name)
	if err != nil {
		return nil, nil, err
	}
	var sy *clustersync.Syncer
	if ns.Config().Mode() == node.Synchronous {
		sy = s.syncers[ns.Name()]
	}
	if nc != nil {
		*nc = nsCache{name: name, ns: ns, sy: sy}
	}
	return ns, sy, nil
}

func windowSize(d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, &node.FieldError{Field: "window_size", Reason: err.Error(), Err: node.ErrInvalidWindow}
	}
	size := d.AsDuration()
	if size <= 0 {
		return 0, &node.FieldError{Field: "window_size", Reason: fmt.Sprintf("must be positive, got %s", size), Err: node.ErrInvalidWindow}
	}
	return size, nil
}

// Responses are built from slabs (one allocation per message type rather
// than one per message): a response's parts live and die together.

// setDuration sets d to v, as durationpb.New does.
func setDuration(d *durationpb.Duration, v time.Duration) *durationpb.Duration {
	d.Seconds = int64(v / time.Second)
	d.Nanos = int32(v % time.Second)
	return d
}

func rates(rs []node.Rate) []*limiterv1.WindowRate {
	out := make([]*limiterv1.WindowRate, len(rs))
	wrs := make([]limiterv1.WindowRate, len(rs))
	durs := make([]durationpb.Duration, len(rs))
	for i, r := range rs {
		wrs[i].WindowSize = setDuration(&durs[i], r.Size)
		wrs[i].Rate = r.Rate
		out[i] = &wrs[i]
	}
	return out
}

// rateSlabs are what rates are built from: a batch makes one for all its
// items and cuts it up between them.
type rateSlabs struct {
	resps []limiterv1.IncrementResponse
	ptrs  []*limiterv1.WindowRate
	wrs   []limiterv1.WindowRate
	durs  []durationpb.Duration
}

// newRateSlabs sizes the slabs for items responses of rates rates in all
// (anything beyond is still served, by allocating).
func newRateSlabs(items, rates int) *rateSlabs {
	return &rateSlabs{
		resps: make([]limiterv1.IncrementResponse, items),
		ptrs:  make([]*limiterv1.WindowRate, rates),
		wrs:   make([]limiterv1.WindowRate, rates),
		durs:  make([]durationpb.Duration, rates),
	}
}

// ratesFrom is rates cutting the messages off b.
func ratesFrom(rs []node.Rate, b *rateSlabs) []*limiterv1.WindowRate {
	out := take(&b.ptrs, len(rs))
	wrs := take(&b.wrs, len(rs))
	durs := take(&b.durs, len(rs))
	for i, r := range rs {
		wrs[i].WindowSize = setDuration(&durs[i], r.Size)
		wrs[i].Rate = r.Rate
		out[i] = &wrs[i]
	}
	return out
}

func (s *server) Increment(ctx context.Context, req *limiterv1.IncrementRequest) (*limiterv1.IncrementResponse, error) {
	resp, err := s.increment(ctx, req, nil, nil)
	return resp, toStatus(err)
}

// increment serves one Increment; a batch passes its namespace cache and
// slabs, a single call nils.
func (s *server) increment(ctx context.Context, req *limiterv1.IncrementRequest, nc *nsCache, b *rateSlabs) (*limiterv1.IncrementResponse, error) {
	ns, sy, t, err := s.target(req.GetNamespace(), req.GetAt(), nc)
	if err != nil {
		return nil, err
	}
	size, err := windowSize(req.GetWindowSize())
	if err != nil {
		return nil, err
	}
	value := 1.0
	if req.Value != nil {
		value = req.GetValue()
	}
	var buf [node.MaxWindowSizes]node.Rate
	var rs []node.Rate
	if sy != nil {
		rs, err = sy.IncrementAt(ctx, t, req.GetKey(), size, value, buf[:0])
	} else {
		rs, err = ns.IncrementAt(t, req.GetKey(), size, value, buf[:0])
	}
	if err != nil {
		return nil, err
	}
	if b == nil {
		return &limiterv1.IncrementResponse{Rates: rates(rs)}, nil
	}
	resp := &take(&b.resps, 1)[0]
	resp.Rates = ratesFrom(rs, b)
	return resp, nil
}

func (s *server) SlidingWindow(ctx context.Context, req *limiterv1.SlidingWindowRequest) (*limiterv1.SlidingWindowResponse, error) {
	ns, sy, t, err := s.target(req.GetNamespace(), req.GetAt(), nil)
	if err != nil {
		return nil, toStatus(err)
	}
	size, err := windowSize(req.GetWindowSize())
	if err != nil {
		return nil, toStatus(err)
	}
	var buf [node.MaxWindowSizes]node.Rate
	var rs []node.Rate
	if sy != nil {
		rs, err = sy.RateAt(ctx, t, req.GetKey(), size, req.GetCurDiff(), buf[:0])
	} else {
		rs, err = ns.RateAt(t, req.GetKey(), size, req.GetCurDiff(), buf[:0])
	}
	if err != nil {
		return nil, toStatus(err)
	}
	return &limiterv1.SlidingWindowResponse{Rates: rates(rs)}, nil
}

func (s *server) Allow(ctx context.Context, req *limiterv1.AllowRequest) (*limiterv1.AllowResponse, error) {
	sc := s.scratch.Get().(*allowScratch)
	defer s.scratch.Put(sc)
	resp, err := s.allow(ctx, req, sc, nil, newAllowSlabs(1, len(req.GetLimits())))
	return resp, toStatus(err)
}

// allowScratch is what allow works in: the engine keeps none of it, so it
// is pooled, and a batch reuses it item after item. (On the stack it would
// escape through the syncer's call.)
type allowScratch struct {
	limits   [node.MaxLimits]node.Limit
	statuses [node.MaxLimits]node.LimitStatus
}

// allowSlabs are what allow's responses are built from: a batch makes one
// for all its items and cuts it up between them, rather than allocating
// four pieces per item.
type allowSlabs struct {
	resps []limiterv1.AllowResponse
	ptrs  []*limiterv1.LimitStatus
	stats []limiterv1.LimitStatus
	durs  []durationpb.Duration
}

// newAllowSlabs sizes the slabs for items responses of limits limits in
// all (anything beyond is still served, by allocating).
func newAllowSlabs(items, limits int) *allowSlabs {
	return &allowSlabs{
		resps: make([]limiterv1.AllowResponse, items),
		ptrs:  make([]*limiterv1.LimitStatus, limits),
		stats: make([]limiterv1.LimitStatus, limits),
		durs:  make([]durationpb.Duration, 2*limits+items),
	}
}

// take cuts the next n elements off slab, or allocates them when the slab
// is short.
func take[T any](slab *[]T, n int) []T {
	if len(*slab) < n {
		return make([]T, n)
	}
	out := (*slab)[:n:n]
	*slab = (*slab)[n:]
	return out
}

func (s *server) allow(ctx context.Context, req *limiterv1.AllowRequest, sc *allowScratch, nc *nsCache, b *allowSlabs) (*limiterv1.AllowResponse, error) {
	ns, sy, t, err := s.target(req.GetNamespace(), req.GetAt(), nc)
	if err != nil {
		return nil, err
	}
	if len(req.GetLimits()) > node.MaxLimits {
		return nil, &node.FieldError{Field: "limits", Err: node.ErrInvalidLimit,
			Reason: fmt.Sprintf("at most %d limits, got %d", node.MaxLimits, len(req.GetLimits()))}
	}
	ar := node.AllowRequest{Key: req.GetKey(), Cost: 1, Limits: sc.limits[:0], CountRejected: req.GetCountRejected()}
	if req.Cost != nil {
		ar.Cost = req.GetCost()
	}
	for i, l := range req.GetLimits() {
		size, err := windowSize(l.GetWindowSize())
		if err != nil {
			err.(*node.FieldError).Field = fmt.Sprintf("limits[%d].window_size", i)
			return nil, err
		}
		if size == 0 {
			return nil, &node.FieldError{Field: fmt.Sprintf("limits[%d].window_size", i), Reason: "is required", Err: node.ErrInvalidLimit}
		}
		ar.Limits = append(ar.Limits, node.Limit{Size: size, Limit: l.GetLimit()})
	}
	var d node.Decision
	if sy != nil {
		d, err = sy.AllowAt(ctx, t, ar, sc.statuses[:0])
	} else {
		d, err = ns.AllowAt(t, ar, sc.statuses[:0])
	}
	if err != nil {
		return nil, err
	}
	n := len(d.Limits)
	resp := &take(&b.resps, 1)[0]
	resp.Allowed, resp.Never, resp.Reason = d.Allowed, d.Never, d.Reason
	resp.Limits = take(&b.ptrs, n)
	statuses := take(&b.stats, n)
	durs := take(&b.durs, 2*n+1)
	for i, l := range d.Limits {
		st := &statuses[i]
		st.WindowSize = setDuration(&durs[2*i], l.Size)
		st.Limit, st.Rate, st.Remaining = l.Limit, l.Rate, l.Remaining
		st.ResetAfter = setDuration(&durs[2*i+1], l.ResetAfter)
		resp.Limits[i] = st
	}
	if !d.Allowed && !d.Never {
		resp.RetryAfter = setDuration(&durs[2*n], d.RetryAfter)
	}
	return resp, nil
}

func (s *server) IncrementBatch(ctx context.Context, req *limiterv1.IncrementBatchRequest) (*limiterv1.IncrementBatchResponse, error) {
	items := req.GetItems()
	if n := len(items); n > MaxBatchItems {
		return nil, toStatus(&node.FieldError{Field: "items", Err: node.ErrInvalidValue, Reason: fmt.Sprintf("at most %d items per batch, got %d", MaxBatchItems, n)})
	}
	out := &limiterv1.IncrementBatchResponse{Results: make([]*limiterv1.IncrementResult, len(items))}
	results := make([]limiterv1.IncrementResult, len(items))
	// Size the slabs for the rates each item will return: one for an item
	// naming its window size, else one per size of its namespace.
	var nc nsCache
	rates := 0
	for _, it := range items {
		if it.GetWindowSize() != nil {
			rates++
		} else if ns, _, err := s.namespace(it.GetNamespace(), &nc); err == nil {
			rates += len(ns.Sizes())
		}
	}
	b := newRateSlabs(len(items), rates)
	for i, it := range items {
		resp, err := s.increment(ctx, it, &nc, b)
		out.Results[i] = &results[i]
		out.Results[i].Response = resp
		if err != nil {
			out.Results[i].Error = status.Convert(toStatus(err)).Proto()
		}
	}
	return out, nil
}

func (s *server) AllowBatch(ctx context.Context, req *limiterv1.AllowBatchRequest) (*limiterv1.AllowBatchResponse, error) {
	if n := len(req.GetItems()); n > MaxBatchItems {
		return nil, toStatus(&node.FieldError{Field: "items", Err: node.ErrInvalidValue, Reason: fmt.Sprintf("at most %d items per batch, got %d", MaxBatchItems, n)})
	}
	out := &limiterv1.AllowBatchResponse{Results: make([]*limiterv1.AllowResult, len(req.GetItems()))}
	results := make([]limiterv1.AllowResult, len(req.GetItems()))
	limits := 0
	for _, it := range req.GetItems() {
		limits += min(len(it.GetLimits()), node.MaxLimits)
	}
	b := newAllowSlabs(len(req.GetItems()), limits)
	sc := s.scratch.Get().(*allowScratch)
	defer s.scratch.Put(sc)
	var nc nsCache
	for i, it := range req.GetItems() {
		resp, err := s.allow(ctx, it, sc, &nc, b)
		out.Results[i] = &results[i]
		out.Results[i].Response = resp
		if err != nil {
			out.Results[i].Error = status.Convert(toStatus(err)).Proto()
		}
	}
	return out, nil
}

// toStatus maps engine errors to gRPC statuses; every InvalidArgument names
// its field.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var fe *node.FieldError
	if !errors.As(err, &fe) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return status.FromContextError(err).Err()
		}
		return status.Error(codes.Internal, err.Error())
	}
	code := codes.InvalidArgument
	switch {
	case errors.Is(err, node.ErrUnknownNamespace):
		code = codes.NotFound
	case errors.Is(err, node.ErrKeyLimit):
		code = codes.ResourceExhausted
	}
	st := status.New(code, fe.Error())
	if code == codes.InvalidArgument {
		if ds, derr := st.WithDetails(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{
			{Field: fe.Field, Description: fe.Reason}}}); derr == nil {
			st = ds
		}
	}
	return st.Err()
}
