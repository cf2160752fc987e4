package main

import (
	"context"
	"errors"
	"fmt"
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
}

func newServer(d *daemon) *server {
	return &server{node: d.node, syncers: d.syncers}
}

// target resolves a request's namespace and time.
func (s *server) target(namespace string, at *timestamppb.Timestamp) (*node.Namespace, *clustersync.Syncer, time.Time, error) {
	ns, err := s.node.Namespace(namespace)
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
	var sy *clustersync.Syncer
	if ns.Config().Mode() == node.Synchronous {
		sy = s.syncers[ns.Name()]
	}
	return ns, sy, t, nil
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

func (s *server) Increment(ctx context.Context, req *limiterv1.IncrementRequest) (*limiterv1.IncrementResponse, error) {
	resp, err := s.increment(ctx, req)
	return resp, toStatus(err)
}

func (s *server) increment(ctx context.Context, req *limiterv1.IncrementRequest) (*limiterv1.IncrementResponse, error) {
	ns, sy, t, err := s.target(req.GetNamespace(), req.GetAt())
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
	return &limiterv1.IncrementResponse{Rates: rates(rs)}, nil
}

func (s *server) SlidingWindow(ctx context.Context, req *limiterv1.SlidingWindowRequest) (*limiterv1.SlidingWindowResponse, error) {
	ns, sy, t, err := s.target(req.GetNamespace(), req.GetAt())
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
	resp, err := s.allow(ctx, req)
	return resp, toStatus(err)
}

func (s *server) allow(ctx context.Context, req *limiterv1.AllowRequest) (*limiterv1.AllowResponse, error) {
	ns, sy, t, err := s.target(req.GetNamespace(), req.GetAt())
	if err != nil {
		return nil, err
	}
	if len(req.GetLimits()) > node.MaxLimits {
		return nil, &node.FieldError{Field: "limits", Err: node.ErrInvalidLimit,
			Reason: fmt.Sprintf("at most %d limits, got %d", node.MaxLimits, len(req.GetLimits()))}
	}
	// Exact-size buffers: these escape to the heap (go build -gcflags=-m),
	// where MaxLimits-sized arrays cost 900 bytes per call.
	ar := node.AllowRequest{Key: req.GetKey(), Cost: 1, Limits: make([]node.Limit, 0, len(req.GetLimits())), CountRejected: req.GetCountRejected()}
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
	sbuf := make([]node.LimitStatus, 0, len(ar.Limits))
	var d node.Decision
	if sy != nil {
		d, err = sy.AllowAt(ctx, t, ar, sbuf)
	} else {
		d, err = ns.AllowAt(t, ar, sbuf)
	}
	if err != nil {
		return nil, err
	}
	n := len(d.Limits)
	resp := &limiterv1.AllowResponse{Allowed: d.Allowed, Never: d.Never, Reason: d.Reason,
		Limits: make([]*limiterv1.LimitStatus, n)}
	statuses := make([]limiterv1.LimitStatus, n)
	durs := make([]durationpb.Duration, 2*n+1)
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
	if n := len(req.GetItems()); n > MaxBatchItems {
		return nil, toStatus(&node.FieldError{Field: "items", Err: node.ErrInvalidValue, Reason: fmt.Sprintf("at most %d items per batch, got %d", MaxBatchItems, n)})
	}
	out := &limiterv1.IncrementBatchResponse{Results: make([]*limiterv1.IncrementResult, len(req.GetItems()))}
	results := make([]limiterv1.IncrementResult, len(req.GetItems()))
	for i, it := range req.GetItems() {
		resp, err := s.increment(ctx, it)
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
	for i, it := range req.GetItems() {
		resp, err := s.allow(ctx, it)
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
