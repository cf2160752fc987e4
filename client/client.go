package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
)

// DefaultTimeout is the deadline of a call when WithTimeout is not given.
const DefaultTimeout = 50 * time.Millisecond

// Client calls limiterd. It is safe for concurrent use.
type Client struct {
	conn    *grpc.ClientConn
	rpc     limiterv1.RateLimiterClient
	cfg     config
	batcher *batcher
}

type config struct {
	dial       []grpc.DialOption
	timeout    time.Duration
	failClosed bool
	retries    int
	onError    func(method string, err error)
	batchWait  time.Duration
	batchItems int
}

// Option configures a Client.
type Option func(*config)

// WithDialOptions passes opts to grpc.NewClient, after the default
// grpc.WithTransportCredentials(insecure.NewCredentials()), which a
// credentials option given here replaces.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(c *config) { c.dial = append(c.dial, opts...) }
}

// WithTimeout sets every call's deadline (default DefaultTimeout). A
// context with an earlier deadline wins.
func WithTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithFailClosed makes Allow refuse when limiterd does not answer (the
// default is to admit).
func WithFailClosed() Option { return func(c *config) { c.failClosed = true } }

// WithRetries sets how many times a read-only SlidingWindow, a Release
// and a Renew are retried on UNAVAILABLE (default 1; 0 disables). Calls
// that count (Allow, Increment, Acquire) are never retried.
func WithRetries(n int) Option { return func(c *config) { c.retries = max(n, 0) } }

// WithErrorHook calls hook with the method name ("Allow", ...) and the error
// of every failed call. hook is called concurrently and must not block.
func WithErrorHook(hook func(method string, err error)) Option {
	return func(c *config) { c.onError = hook }
}

// WithBatching gathers concurrent Allow calls into one AllowBatch: a batch
// is sent maxWait after its first call, or at once when it holds maxItems
// (at most 10,000, AllowBatch's limit). The calls' contexts bound how long
// each waits, but their metadata does not travel.
func WithBatching(maxWait time.Duration, maxItems int) Option {
	return func(c *config) { c.batchWait, c.batchItems = maxWait, min(max(maxItems, 1), maxBatch) }
}

// maxBatch is the most items an AllowBatch takes.
const maxBatch = 10_000

// New returns a Client of the limiterd at target (a gRPC target such as
// "127.0.0.1:7070" or "dns:///limiterd:7070"). It does not connect yet.
func New(target string, opts ...Option) (*Client, error) {
	cfg := config{timeout: DefaultTimeout, retries: 1}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.timeout <= 0 {
		return nil, fmt.Errorf("client: timeout %v must be positive", cfg.timeout)
	}
	dial := append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, cfg.dial...)
	conn, err := grpc.NewClient(target, dial...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	c := &Client{conn: conn, rpc: limiterv1.NewRateLimiterClient(conn), cfg: cfg}
	if cfg.batchWait > 0 {
		c.batcher = &batcher{c: c, wait: cfg.batchWait, items: cfg.batchItems}
	}
	return c, nil
}

// Close closes the connection; calls in flight fail.
func (c *Client) Close() error { return c.conn.Close() }

// Decision is an Allow's answer.
type Decision struct {
	// Allowed reports whether the request may proceed. When Err is not
	// nil, it is the failure policy's answer (fail-open: true).
	Allowed bool
	// Limits holds one status per limit of the request, in its order;
	// nil when Err is not nil.
	Limits []*limiterv1.LimitStatus
	// RetryAfter is the least wait after which the cost is admitted
	// (refused requests only).
	RetryAfter time.Duration
	// Never is set when the cost exceeds a limit's capacity.
	Never bool
	// Reason explains Never.
	Reason string
	// DryRun is set when the call was a dry run (its namespace or policy
	// is in shadow mode on the server): Allowed is true, and WouldAllow
	// is what the limits decided.
	DryRun bool
	// WouldAllow is what the limits decided: Allowed, but in a dry run
	// (and false when Err is set).
	WouldAllow bool
	// Err is why limiterd gave no answer, or nil.
	Err error
}

// Allow asks limiterd whether req's cost is admitted, under req's limits
// or under the server's policy req names. It never returns an
// error: a failed call yields a Decision with Err set and Allowed per the
// failure policy. Allow is never retried, as limiterd may have counted it.
func (c *Client) Allow(ctx context.Context, req *limiterv1.AllowRequest) Decision {
	var resp *limiterv1.AllowResponse
	var err error
	if c.batcher != nil {
		resp, err = c.batcher.allow(ctx, req)
	} else {
		ctx, cancel := context.WithTimeout(ctx, c.allowTimeout(req))
		resp, err = c.rpc.Allow(ctx, req)
		cancel()
	}
	if err != nil {
		return c.failed("Allow", err)
	}
	return decision(resp)
}

func decision(resp *limiterv1.AllowResponse) Decision {
	return Decision{
		Allowed:    resp.GetAllowed(),
		Limits:     resp.GetLimits(),
		RetryAfter: resp.GetRetryAfter().AsDuration(),
		Never:      resp.GetNever(),
		Reason:     resp.GetReason(),
		DryRun:     resp.GetDryRun(),
		WouldAllow: resp.GetWouldAllow(),
	}
}

// AllowPolicy asks limiterd whether cost (at least 0) more of key are
// admitted under policy, one of namespace's policies held by the server
// (an empty namespace is "default"). It is Allow with the request's
// policy set instead of its limits.
func (c *Client) AllowPolicy(ctx context.Context, namespace, policy, key string, cost float64) Decision {
	return c.Allow(ctx, &limiterv1.AllowRequest{Namespace: namespace, Key: key, Policy: policy, Cost: &cost})
}

// failed is the failure policy's Decision after err.
func (c *Client) failed(method string, err error) Decision {
	c.report(method, err)
	return Decision{Allowed: !c.cfg.failClosed, Err: err}
}

// report hands err to the error hook.
func (c *Client) report(method string, err error) {
	if c.cfg.onError != nil {
		c.cfg.onError(method, err)
	}
}

// allowTimeout is the timeout plus the longest wait_timeout of req's leaky
// buckets, which the server may spend waiting.
func (c *Client) allowTimeout(req *limiterv1.AllowRequest) time.Duration {
	var wait time.Duration
	for _, l := range req.GetLimits() {
		wait = max(wait, l.GetLeaky().GetWaitTimeout().AsDuration())
	}
	return c.cfg.timeout + wait
}

// Reset forgets req.key's counts in req.namespace, on the node that
// takes it and, through its store, on every node of the cluster by its
// next sync: its sliding-window counts, or, when req names them, only
// the buckets of req.buckets (each starts again as a new bucket) and,
// with req.leases, its leases (all freed). It needs the admin grant when limiterd
// authorizes calls. Taking it again is harmless, so it is retried on
// UNAVAILABLE (WithRetries) within the one deadline.
func (c *Client) Reset(ctx context.Context, req *limiterv1.ResetRequest) (*limiterv1.ResetResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	resp, err := retried(ctx, c.cfg.retries, func(ctx context.Context) (*limiterv1.ResetResponse, error) {
		return c.rpc.Reset(ctx, req)
	})
	if err != nil {
		c.report("Reset", err)
	}
	return resp, err
}

// Increment counts req.value (default 1) on req.key. It is never retried.
func (c *Client) Increment(ctx context.Context, req *limiterv1.IncrementRequest) (*limiterv1.IncrementResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	resp, err := c.rpc.Increment(ctx, req)
	if err != nil {
		c.report("Increment", err)
	}
	return resp, err
}

// SlidingWindow reads req.key's rates. Without cur_diff it only reads and
// is retried on UNAVAILABLE (WithRetries) within the one deadline.
func (c *Client) SlidingWindow(ctx context.Context, req *limiterv1.SlidingWindowRequest) (*limiterv1.SlidingWindowResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel()
	retries := c.cfg.retries
	if req.CurDiff != nil {
		retries = 0
	}
	resp, err := retried(ctx, retries, func(ctx context.Context) (*limiterv1.SlidingWindowResponse, error) {
		return c.rpc.SlidingWindow(ctx, req)
	})
	if err != nil {
		c.report("SlidingWindow", err)
		return nil, err
	}
	return resp, nil
}

// retried makes call, again up to retries times while it fails with
// UNAVAILABLE, retryPause apart, within ctx.
func retried[T any](ctx context.Context, retries int, call func(context.Context) (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		resp, err := call(ctx)
		if err == nil || attempt >= retries || status.Code(err) != codes.Unavailable || !pause(ctx, retryPause) {
			return resp, err
		}
	}
}

// retryPause is the wait before a retry.
const retryPause = 5 * time.Millisecond

// pause waits d, and reports false if ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ErrBatchShort is a batch answer that lacks an item's result.
var ErrBatchShort = errors.New("client: AllowBatch answered fewer results than items")

// Window is a sliding-window limit: limit per size.
func Window(limit float64, size time.Duration) *limiterv1.Limit {
	return &limiterv1.Limit{WindowSize: durationpb.New(size), Limit: limit}
}

// Leaky is Sidekiq's leaky bucket: size drops draining over interval; the
// server waits up to wait for room (0: no wait).
func Leaky(size float64, interval, wait time.Duration) *limiterv1.Limit {
	lb := &limiterv1.LeakyBucket{Size: size, Interval: durationpb.New(interval)}
	if wait > 0 {
		lb.WaitTimeout = durationpb.New(wait)
	}
	return &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: lb}}
}

// Token is Smyte's token bucket: max tokens, all refilled every refill.
func Token(max float64, refill time.Duration) *limiterv1.Limit {
	return &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: max, RefillTime: durationpb.New(refill)}}}
}

// Fixed is Sidekiq's bucket: limit per period aligned to the Unix epoch.
func Fixed(limit float64, period time.Duration) *limiterv1.Limit {
	return &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Period: durationpb.New(period), Limit: limit}}}
}
