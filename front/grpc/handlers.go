package grpcfront

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/service"
)

// handler translates the RateLimiter calls to service calls.
type handler struct {
	limiterv1.UnimplementedRateLimiterServer
	svc     *service.Service
	scratch sync.Pool // of *scratch
}

// NewRateLimiterServer returns the limiter.v1.RateLimiter implementation
// over svc that the gRPC server serves, for other fronts that serve the
// same API in another wire format (front/http): they then give the same
// answers and the same errors, statuses with google.rpc.BadRequest details
// included.
func NewRateLimiterServer(svc *service.Service) limiterv1.RateLimiterServer { return newHandler(svc) }

func newHandler(svc *service.Service) *handler {
	h := &handler{svc: svc}
	h.scratch.New = func() any { return new(scratch) }
	return h
}

// scratch is what a call works in: the service keeps none of it, so it is
// pooled, and a batch reuses it item after item. (On the stack it would
// escape through the syncer's call.)
type scratch struct {
	rates    [service.MaxWindowSizes]service.Rate
	limits   [service.MaxLimits]service.Limit
	statuses [service.MaxLimits]service.LimitStatus
}

// Decoding: what the service cannot be given, refused here.

func toTime(at *timestamppb.Timestamp) (time.Time, error) {
	if at == nil {
		return time.Time{}, nil
	}
	if err := at.CheckValid(); err != nil {
		return time.Time{}, &service.FieldError{Field: "at", Reason: err.Error(), Err: service.ErrInvalidValue}
	}
	return at.AsTime(), nil
}

func toSize(field string, d *durationpb.Duration) (time.Duration, error) {
	return toDuration(field, d, service.ErrInvalidWindow)
}

// toDuration decodes d (nil: 0); an invalid d is an error on field
// wrapping sentinel.
func toDuration(field string, d *durationpb.Duration, sentinel error) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, &service.FieldError{Field: field, Reason: err.Error(), Err: sentinel}
	}
	return d.AsDuration(), nil
}

// bucketDuration decodes a bucket's duration named field of limits[i].
func bucketDuration(i int, field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil || d.CheckValid() == nil {
		return d.AsDuration(), nil // nil: 0, refused by the service
	}
	return toDuration(fmt.Sprintf("limits[%d].%s", i, field), d, service.ErrInvalidLimit)
}

// toLimit decodes limits[i].
func toLimit(i int, l *limiterv1.Limit) (service.Limit, error) {
	size, err := toSize("", l.GetWindowSize())
	if err != nil {
		err.(*service.FieldError).Field = fmt.Sprintf("limits[%d].window_size", i)
		return service.Limit{}, err
	}
	out := service.Limit{Size: size, Limit: l.GetLimit()}
	var errs [2]error
	switch k := l.GetKind().(type) {
	case *limiterv1.Limit_Token:
		out.Kind, out.Strict = service.TokenKind, k.Token.GetStrict()
		out.Token = service.TokenBucket{Max: k.Token.GetMax(), RefillAmount: k.Token.GetRefillAmount()}
		out.Token.RefillTime, errs[0] = bucketDuration(i, "token.refill_time", k.Token.GetRefillTime())
	case *limiterv1.Limit_Leaky:
		out.Kind, out.Leaky.Size = service.LeakyKind, k.Leaky.GetSize()
		out.Leaky.Interval, errs[0] = bucketDuration(i, "leaky.interval", k.Leaky.GetInterval())
		out.WaitTimeout, errs[1] = bucketDuration(i, "leaky.wait_timeout", k.Leaky.GetWaitTimeout())
	case *limiterv1.Limit_Fixed:
		out.Kind, out.Fixed.Limit = service.FixedKind, k.Fixed.GetLimit()
		out.Fixed.Period, errs[0] = bucketDuration(i, "fixed.period", k.Fixed.GetPeriod())
	}
	for _, err := range errs {
		if err != nil {
			return service.Limit{}, err
		}
	}
	return out, nil
}

func incrementRequest(req *limiterv1.IncrementRequest) (service.IncrementRequest, error) {
	at, err := toTime(req.GetAt())
	if err != nil {
		return service.IncrementRequest{}, err
	}
	size, err := toSize("window_size", req.GetWindowSize())
	if err != nil {
		return service.IncrementRequest{}, err
	}
	return service.IncrementRequest{Namespace: req.GetNamespace(), At: at, Key: req.GetKey(), WindowSize: size, Value: req.Value}, nil
}

// allowRequest decodes req, its limits into sc.
func allowRequest(req *limiterv1.AllowRequest, sc *scratch) (service.AllowRequest, error) {
	at, err := toTime(req.GetAt())
	if err != nil {
		return service.AllowRequest{}, err
	}
	limits := sc.limits[:0]
	if n := len(req.GetLimits()); n > len(sc.limits) {
		limits = make([]service.Limit, 0, n) // refused by the service
	}
	for i, l := range req.GetLimits() {
		lim, err := toLimit(i, l)
		if err != nil {
			return service.AllowRequest{}, err
		}
		limits = append(limits, lim)
	}
	return service.AllowRequest{Namespace: req.GetNamespace(), At: at, Key: req.GetKey(), Cost: req.Cost,
		Limits: limits, CountRejected: req.GetCountRejected(), Policy: req.GetPolicy()}, nil
}

// Encoding. Responses are built from slabs (one allocation per message
// type rather than one per message): a response's parts live and die
// together.

// setDuration sets d to v, as durationpb.New does.
func setDuration(d *durationpb.Duration, v time.Duration) *durationpb.Duration {
	d.Seconds = int64(v / time.Second)
	d.Nanos = int32(v % time.Second)
	return d
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

// rates encodes rs, cutting the messages off b.
func (b *rateSlabs) rates(rs []service.Rate) []*limiterv1.WindowRate {
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

// response encodes d, cutting the messages off b.
func (b *allowSlabs) response(d service.Decision) *limiterv1.AllowResponse {
	n := len(d.Limits)
	resp := &take(&b.resps, 1)[0]
	resp.Allowed, resp.Never, resp.Reason = d.Allowed, d.Never, d.Reason
	resp.DryRun, resp.WouldAllow = d.DryRun, d.WouldAllow
	resp.Limits = take(&b.ptrs, n)
	statuses := take(&b.stats, n)
	durs := take(&b.durs, 2*n+1)
	for i, l := range d.Limits {
		st := &statuses[i]
		if l.Kind == service.SlidingWindow {
			st.WindowSize = setDuration(&durs[2*i], l.Size)
		}
		st.Limit, st.Rate, st.Remaining, st.Before = l.Limit, l.Rate, l.Remaining, l.Before
		if l.Kind == service.SlidingWindow || l.ResetAfter != 0 {
			st.ResetAfter = setDuration(&durs[2*i+1], l.ResetAfter)
		}
		resp.Limits[i] = st
	}
	if !d.WouldAllow && !d.Never {
		resp.RetryAfter = setDuration(&durs[2*n], d.RetryAfter)
	}
	return resp
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

// The calls.

func (h *handler) Increment(ctx context.Context, req *limiterv1.IncrementRequest) (*limiterv1.IncrementResponse, error) {
	r, err := incrementRequest(req)
	if err != nil {
		return nil, toStatus(err)
	}
	var buf [service.MaxWindowSizes]service.Rate
	rs, err := h.svc.Increment(ctx, r, buf[:0])
	if err != nil {
		return nil, toStatus(err)
	}
	return &limiterv1.IncrementResponse{Rates: newRateSlabs(0, len(rs)).rates(rs)}, nil
}

func (h *handler) SlidingWindow(ctx context.Context, req *limiterv1.SlidingWindowRequest) (*limiterv1.SlidingWindowResponse, error) {
	at, err := toTime(req.GetAt())
	if err != nil {
		return nil, toStatus(err)
	}
	size, err := toSize("window_size", req.GetWindowSize())
	if err != nil {
		return nil, toStatus(err)
	}
	var buf [service.MaxWindowSizes]service.Rate
	rs, err := h.svc.SlidingWindow(ctx, service.RateRequest{Namespace: req.GetNamespace(), At: at, Key: req.GetKey(),
		WindowSize: size, CurDiff: req.GetCurDiff()}, buf[:0])
	if err != nil {
		return nil, toStatus(err)
	}
	return &limiterv1.SlidingWindowResponse{Rates: newRateSlabs(0, len(rs)).rates(rs)}, nil
}

func (h *handler) Allow(ctx context.Context, req *limiterv1.AllowRequest) (*limiterv1.AllowResponse, error) {
	sc := h.scratch.Get().(*scratch)
	defer h.scratch.Put(sc)
	r, err := allowRequest(req, sc)
	if err != nil {
		return nil, toStatus(err)
	}
	d, err := h.svc.Allow(ctx, r, sc.statuses[:0])
	if err != nil {
		return nil, toStatus(err)
	}
	return newAllowSlabs(1, len(d.Limits)).response(d), nil
}

func (h *handler) IncrementBatch(ctx context.Context, req *limiterv1.IncrementBatchRequest) (*limiterv1.IncrementBatchResponse, error) {
	items := req.GetItems()
	b, err := h.svc.Batch(len(items))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &limiterv1.IncrementBatchResponse{Results: make([]*limiterv1.IncrementResult, len(items))}
	results := make([]limiterv1.IncrementResult, len(items))
	// Size the slabs for the rates each item will return: one for an item
	// naming its window size, else one per size of its namespace.
	rates := 0
	for _, it := range items {
		if it.GetWindowSize() != nil {
			rates++
		} else {
			rates += b.Sizes(it.GetNamespace())
		}
	}
	slabs := newRateSlabs(len(items), rates)
	sc := h.scratch.Get().(*scratch)
	defer h.scratch.Put(sc)
	for i, it := range items {
		out.Results[i] = &results[i]
		r, err := incrementRequest(it)
		if err == nil {
			var rs []service.Rate
			if rs, err = b.Increment(ctx, r, sc.rates[:0]); err == nil {
				resp := &take(&slabs.resps, 1)[0]
				resp.Rates = slabs.rates(rs)
				results[i].Response = resp
			}
		}
		if err != nil {
			results[i].Error = status.Convert(toStatus(err)).Proto()
		}
	}
	return out, nil
}

func (h *handler) AllowBatch(ctx context.Context, req *limiterv1.AllowBatchRequest) (*limiterv1.AllowBatchResponse, error) {
	items := req.GetItems()
	b, err := h.svc.Batch(len(items))
	if err != nil {
		return nil, toStatus(err)
	}
	out := &limiterv1.AllowBatchResponse{Results: make([]*limiterv1.AllowResult, len(items))}
	results := make([]limiterv1.AllowResult, len(items))
	limits := 0
	for _, it := range items {
		limits += min(len(it.GetLimits()), service.MaxLimits)
	}
	slabs := newAllowSlabs(len(items), limits)
	sc := h.scratch.Get().(*scratch)
	defer h.scratch.Put(sc)
	for i, it := range items {
		out.Results[i] = &results[i]
		r, err := allowRequest(it, sc)
		if err == nil {
			var d service.Decision
			if d, err = b.Allow(ctx, r, sc.statuses[:0]); err == nil {
				results[i].Response = slabs.response(d)
			}
		}
		if err != nil {
			results[i].Error = status.Convert(toStatus(err)).Proto()
		}
	}
	return out, nil
}

func (h *handler) Reset(ctx context.Context, req *limiterv1.ResetRequest) (*limiterv1.ResetResponse, error) {
	var buf [service.MaxWindowSizes]service.Rate
	sreq := service.ResetRequest{Namespace: req.GetNamespace(), Key: req.GetKey(), Leases: req.GetLeases()}
	if bs := req.GetBuckets(); len(bs) > 0 {
		sreq.Buckets = make([]service.Limit, len(bs))
		for i, l := range bs {
			lim, err := toLimit(i, l)
			if err != nil {
				if fe, ok := err.(*service.FieldError); ok {
					fe.Field = "buckets" + strings.TrimPrefix(fe.Field, "limits")
				}
				return nil, toStatus(err)
			}
			sreq.Buckets[i] = lim
		}
	}
	rs, err := h.svc.Reset(ctx, sreq, buf[:0])
	if err != nil {
		return nil, toStatus(err)
	}
	return &limiterv1.ResetResponse{Rates: newRateSlabs(0, len(rs)).rates(rs)}, nil
}
