package grpcfront

import (
	"context"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/service"
)

// Concurrency leases: decode, one service call, encode, as the other calls.

// toTTL decodes a lease's ttl. A missing one decodes to 0, which the
// service refuses naming "ttl", so both a missing and a malformed ttl are
// INVALID_ARGUMENT on "ttl".
func toTTL(d *durationpb.Duration) (time.Duration, error) {
	return toDuration("ttl", d, service.ErrInvalidValue)
}

func acquireRequest(req *limiterv1.AcquireRequest) (service.AcquireRequest, error) {
	ttl, err := toTTL(req.GetTtl())
	if err != nil {
		return service.AcquireRequest{}, err
	}
	return service.AcquireRequest{Namespace: req.GetNamespace(), Key: req.GetKey(), Limit: req.GetLimit(), TTL: ttl}, nil
}

// setTimestamp sets ts to t, as timestamppb.New does.
func setTimestamp(ts *timestamppb.Timestamp, t time.Time) *timestamppb.Timestamp {
	ts.Seconds, ts.Nanos = t.Unix(), int32(t.Nanosecond())
	return ts
}

// acquireAnswer is an AcquireResponse and the messages it points to,
// allocated together (one allocation per answer, one slice per batch).
type acquireAnswer struct {
	resp  limiterv1.AcquireResponse
	exp   timestamppb.Timestamp
	retry durationpb.Duration
}

func (a *acquireAnswer) encode(g service.Acquired) *limiterv1.AcquireResponse {
	r := &a.resp
	r.Acquired, r.Held = g.OK, g.Held
	if g.OK {
		r.Lease, r.ExpiresAt = g.Lease, setTimestamp(&a.exp, g.ExpiresAt)
	} else if g.RetryAfter > 0 {
		// 0 is "unknown" (no expiry known to this node): left unset rather
		// than telling the caller to retry at once.
		r.RetryAfter = setDuration(&a.retry, g.RetryAfter)
	}
	return r
}

// renewAnswer is acquireAnswer's counterpart for Renew.
type renewAnswer struct {
	resp limiterv1.RenewResponse
	exp  timestamppb.Timestamp
}

func (a *renewAnswer) encode(r service.Renewed) *limiterv1.RenewResponse {
	a.resp.Renewed = r.OK
	if r.OK {
		a.resp.ExpiresAt = setTimestamp(&a.exp, r.ExpiresAt)
	}
	return &a.resp
}

func releaseResponse(dst *limiterv1.ReleaseResponse, r service.Released) *limiterv1.ReleaseResponse {
	dst.Released, dst.Pending = r.OK, r.Pending
	return dst
}

func (h *handler) Acquire(ctx context.Context, req *limiterv1.AcquireRequest) (*limiterv1.AcquireResponse, error) {
	r, err := acquireRequest(req)
	if err != nil {
		return nil, toStatus(err)
	}
	g, err := h.svc.Acquire(ctx, r)
	if err != nil {
		return nil, toStatus(err)
	}
	return new(acquireAnswer).encode(g), nil
}

func (h *handler) Release(ctx context.Context, req *limiterv1.ReleaseRequest) (*limiterv1.ReleaseResponse, error) {
	r, err := h.svc.Release(ctx, req.GetLease())
	if err != nil {
		return nil, toStatus(err)
	}
	return releaseResponse(new(limiterv1.ReleaseResponse), r), nil
}

func (h *handler) Renew(ctx context.Context, req *limiterv1.RenewRequest) (*limiterv1.RenewResponse, error) {
	ttl, err := toTTL(req.GetTtl())
	if err != nil {
		return nil, toStatus(err)
	}
	r, err := h.svc.Renew(ctx, req.GetLease(), ttl)
	if err != nil {
		return nil, toStatus(err)
	}
	return new(renewAnswer).encode(r), nil
}

// leaseBatch serves the items of a lease batch, each on its own: serve
// answers item i into *r, or returns its error, which fail stores in *r.
func leaseBatch[I, R any](h *handler, items []I, serve func(b *service.Batch, i int, it I, r *R) error,
	fail func(r *R, err error)) ([]*R, error) {
	b, err := h.svc.Batch(len(items))
	if err != nil {
		return nil, toStatus(err)
	}
	out := make([]*R, len(items))
	results := make([]R, len(items))
	for i, it := range items {
		out[i] = &results[i]
		if err := serve(&b, i, it, &results[i]); err != nil {
			fail(&results[i], err)
		}
	}
	return out, nil
}

func (h *handler) AcquireBatch(ctx context.Context, req *limiterv1.AcquireBatchRequest) (*limiterv1.AcquireBatchResponse, error) {
	answers := make([]acquireAnswer, len(req.GetItems()))
	results, err := leaseBatch(h, req.GetItems(), func(b *service.Batch, i int, it *limiterv1.AcquireRequest, r *limiterv1.AcquireResult) error {
		ar, err := acquireRequest(it)
		if err != nil {
			return err
		}
		g, err := b.Acquire(ctx, ar)
		r.Response = answers[i].encode(g)
		return err
	}, func(r *limiterv1.AcquireResult, err error) {
		r.Response, r.Error = nil, status.Convert(toStatus(err)).Proto()
	})
	if err != nil {
		return nil, err
	}
	return &limiterv1.AcquireBatchResponse{Results: results}, nil
}

func (h *handler) ReleaseBatch(ctx context.Context, req *limiterv1.ReleaseBatchRequest) (*limiterv1.ReleaseBatchResponse, error) {
	answers := make([]limiterv1.ReleaseResponse, len(req.GetItems()))
	results, err := leaseBatch(h, req.GetItems(), func(b *service.Batch, i int, it *limiterv1.ReleaseRequest, r *limiterv1.ReleaseResult) error {
		rel, err := b.Release(ctx, it.GetLease())
		r.Response = releaseResponse(&answers[i], rel)
		return err
	}, func(r *limiterv1.ReleaseResult, err error) {
		r.Response, r.Error = nil, status.Convert(toStatus(err)).Proto()
	})
	if err != nil {
		return nil, err
	}
	return &limiterv1.ReleaseBatchResponse{Results: results}, nil
}

func (h *handler) RenewBatch(ctx context.Context, req *limiterv1.RenewBatchRequest) (*limiterv1.RenewBatchResponse, error) {
	answers := make([]renewAnswer, len(req.GetItems()))
	results, err := leaseBatch(h, req.GetItems(), func(b *service.Batch, i int, it *limiterv1.RenewRequest, r *limiterv1.RenewResult) error {
		ttl, err := toTTL(it.GetTtl())
		if err != nil {
			return err
		}
		rn, err := b.Renew(ctx, it.GetLease(), ttl)
		r.Response = answers[i].encode(rn)
		return err
	}, func(r *limiterv1.RenewResult, err error) {
		r.Response, r.Error = nil, status.Convert(toStatus(err)).Proto()
	})
	if err != nil {
		return nil, err
	}
	return &limiterv1.RenewBatchResponse{Results: results}, nil
}
