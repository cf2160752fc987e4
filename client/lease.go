package client

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// Acquire asks for one of req.limit concurrent leases of req.key, for
// req.ttl. A refusal is no error: the answer's acquired is false, with the
// leases held and a retry_after. Unlike Allow, Acquire returns the error
// of a failed call and follows no failure policy: the caller holds no
// lease then, and decides whether to go on without one. It is never
// retried: the server may have granted a lease before the answer was lost
// (that lease expires after its ttl).
func (c *Client) Acquire(ctx context.Context, req *limiterv1.AcquireRequest) (*limiterv1.AcquireResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	resp, err := c.rpc.Acquire(ctx, req)
	if err != nil {
		c.report("Acquire", err)
	}
	return resp, err
}

// Release frees lease, as Acquire returned it. Releasing a lease that has
// expired or was released already is harmless (released false). It is
// retried on UNAVAILABLE (WithRetries), since a release that is lost
// holds its place until the lease expires, and one sent twice frees it
// once. Call it with a context that outlives the work the lease guarded
// (context.WithoutCancel), so that a cancelled request still releases.
func (c *Client) Release(ctx context.Context, lease string) (*limiterv1.ReleaseResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	req := &limiterv1.ReleaseRequest{Lease: lease}
	resp, err := retried(ctx, c.cfg.retries, func(ctx context.Context) (*limiterv1.ReleaseResponse, error) {
		return c.rpc.Release(ctx, req)
	})
	if err != nil {
		c.report("Release", err)
	}
	return resp, err
}

// Renew sets a live lease to expire ttl from now; renewed false means it
// is no longer live (acquire a new one). It is retried on UNAVAILABLE
// (WithRetries): a second renewal sets the same expiry, a little later.
func (c *Client) Renew(ctx context.Context, lease string, ttl time.Duration) (*limiterv1.RenewResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	req := &limiterv1.RenewRequest{Lease: lease, Ttl: durationpb.New(ttl)}
	resp, err := retried(ctx, c.cfg.retries, func(ctx context.Context) (*limiterv1.RenewResponse, error) {
		return c.rpc.Renew(ctx, req)
	})
	if err != nil {
		c.report("Renew", err)
	}
	return resp, err
}

// Lease is an AcquireRequest for one of limit concurrent leases of key in
// the default namespace, for ttl.
func Lease(key string, limit int64, ttl time.Duration) *limiterv1.AcquireRequest {
	return &limiterv1.AcquireRequest{Key: key, Limit: limit, Ttl: durationpb.New(ttl)}
}
