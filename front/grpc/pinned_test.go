package grpcfront

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/service"
)

// TestInvalidBucketDurationRefused: a bucket's duration that is not a
// valid google.protobuf.Duration (seconds and nanos of opposite signs, or
// nanos past a second) is INVALID_ARGUMENT naming its field, even when
// the value it would convert to is positive and so acceptable to the
// service.
func TestInvalidBucketDurationRefused(t *testing.T) {
	s := newTestServer(t, fakeclock.New(minute))
	signs := &durationpb.Duration{Seconds: 1, Nanos: -1}
	past := &durationpb.Duration{Seconds: 1, Nanos: 1_000_000_000}
	for _, c := range []struct {
		field string
		limit func(*durationpb.Duration) *limiterv1.Limit
	}{
		{"limits[0].token.refill_time", func(d *durationpb.Duration) *limiterv1.Limit {
			return &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 1, RefillTime: d}}}
		}},
		{"limits[0].leaky.interval", func(d *durationpb.Duration) *limiterv1.Limit {
			return &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: 1, Interval: d}}}
		}},
		{"limits[0].leaky.wait_timeout", func(d *durationpb.Duration) *limiterv1.Limit {
			return &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: 1, Interval: dur(time.Second), WaitTimeout: d}}}
		}},
		{"limits[0].fixed.period", func(d *durationpb.Duration) *limiterv1.Limit {
			return &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Limit: 1, Period: d}}}
		}},
	} {
		for _, d := range []*durationpb.Duration{signs, past} {
			_, err := s.client.Allow(bg, &limiterv1.AllowRequest{Key: "k", Limits: []*limiterv1.Limit{c.limit(d)}})
			checkStatus(t, err, codes.InvalidArgument, c.field)
		}
	}
	if n := s.node.Namespaces()[0].Stats().ActiveBuckets; n != 0 {
		t.Errorf("%d buckets after refused calls, want 0", n)
	}
}

// TestUnaryAuthWithoutTap: UnaryAuth alone (no TapAuth before it) puts
// the principal of the call's bearer token in the handler's context, and
// none for a call without a credential; a principal the tap already put
// there is kept, not looked up again.
func TestUnaryAuthWithoutTap(t *testing.T) {
	a := newAuthorizer(t)
	interceptor := UnaryAuth(a)
	seen := func(ctx context.Context) *auth.Principal {
		var p *auth.Principal
		_, err := interceptor(ctx, nil, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
			p = auth.FromContext(ctx)
			return nil, nil
		})
		if err != nil {
			t.Fatalf("interceptor: %v", err)
		}
		return p
	}
	withMD := func(ctx context.Context, v string) context.Context {
		return metadata.NewIncomingContext(ctx, metadata.Pairs("authorization", v))
	}
	if p := seen(withMD(bg, "Bearer "+testToken)); p == nil || p.Name() != "t" {
		t.Errorf("a call with the token: principal %v, want the token's", p)
	}
	if p := seen(bg); p != nil {
		t.Errorf("a call without a credential: principal %q, want none", p.Name())
	}
	tapped := auth.NewPrincipal("from-the-tap", []string{"api"}, auth.Read)
	if p := seen(withMD(auth.WithPrincipal(bg, tapped), "Bearer "+testToken)); p != tapped {
		t.Errorf("a call the tap authenticated: principal %v, want the tap's", p)
	}
}

// TestWatchStreamEndsOnlyWhenStopping: a health Watch stream ends as soon
// as it has sent NOT_SERVING once shutdown began; a SERVING sent then, or
// a NOT_SERVING sent while the server is not stopping (a service marked
// down), leaves it open.
func TestWatchStreamEndsOnlyWhenStopping(t *testing.T) {
	stopped := make(chan struct{})
	close(stopped)
	for _, c := range []struct {
		name     string
		stopping chan struct{}
		status   healthpb.HealthCheckResponse_ServingStatus
		ends     bool
	}{
		{"NOT_SERVING while stopping", stopped, healthpb.HealthCheckResponse_NOT_SERVING, true},
		{"SERVING while stopping", stopped, healthpb.HealthCheckResponse_SERVING, false},
		{"NOT_SERVING while running", make(chan struct{}), healthpb.HealthCheckResponse_NOT_SERVING, false},
	} {
		ctx, cancel := context.WithCancel(bg)
		w := &watchStream{Health_WatchServer: sentWatch{}, ctx: ctx, cancel: cancel, stopping: c.stopping}
		if err := w.Send(&healthpb.HealthCheckResponse{Status: c.status}); err != nil {
			t.Fatalf("%s: Send: %v", c.name, err)
		}
		if ended := ctx.Err() != nil; ended != c.ends {
			t.Errorf("%s: stream ended %v, want %v", c.name, ended, c.ends)
		}
		cancel()
	}
}

// sentWatch is a Watch stream whose sends succeed.
type sentWatch struct{ healthpb.Health_WatchServer }

func (sentWatch) Send(*healthpb.HealthCheckResponse) error { return nil }

// TestRefusedLeaseWithoutKnownExpiry: a refused Acquire whose retry is
// unknown (0: no expiry known to the node) carries no retry_after rather
// than one of 0, which would tell the caller to retry at once; a known
// retry is carried.
func TestRefusedLeaseWithoutKnownExpiry(t *testing.T) {
	var a acquireAnswer
	if r := a.encode(service.Acquired{Held: 2}); r.GetAcquired() || r.GetHeld() != 2 || r.RetryAfter != nil {
		t.Errorf("refused, retry unknown: %v; want held 2 and no retry_after", r)
	}
	var b acquireAnswer
	if r := b.encode(service.Acquired{Held: 2, RetryAfter: time.Second}); r.GetRetryAfter().AsDuration() != time.Second {
		t.Errorf("refused, retry in 1s: %v; want retry_after 1s", r)
	}
}

// TestResetAfterPresence: an Allow's sliding window and fixed bucket
// carry reset_after; a token or leaky bucket that time alone will not
// change (full, or empty, after a cost of 0) carries none rather than one
// of 0.
func TestResetAfterPresence(t *testing.T) {
	s := newTestServer(t, fakeclock.New(minute))
	resp, err := s.client.Allow(bg, &limiterv1.AllowRequest{Namespace: "api", Key: "k", Cost: f64(0), Limits: []*limiterv1.Limit{
		{WindowSize: dur(time.Second), Limit: 10},
		{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Period: dur(time.Second), Limit: 10}}},
		{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 10, RefillTime: dur(time.Second)}}},
		{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: 10, Interval: dur(time.Second)}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ls := resp.GetLimits()
	if len(ls) != 4 {
		t.Fatalf("%d limit statuses, want 4", len(ls))
	}
	if ls[0].GetResetAfter().AsDuration() != time.Second || ls[1].GetResetAfter().AsDuration() != time.Second ||
		ls[2].ResetAfter != nil || ls[3].ResetAfter != nil {
		t.Errorf("reset_after = %v, %v, %v, %v; want 1s (sliding window), 1s (fixed bucket), absent (token and leaky buckets)",
			ls[0].ResetAfter, ls[1].ResetAfter, ls[2].ResetAfter, ls[3].ResetAfter)
	}
}

// TestBatchAllocationsPerBatch: a batch's answers are cut from slabs
// sized for all its items, so a batch of 100 items allocates no more than
// one of 10: with items of every limit count up to service.MaxLimits, and
// Increment items with and without a window size (a third with).
func TestBatchAllocationsPerBatch(t *testing.T) {
	s := newTestServer(t, fakeclock.New(minute))
	windows := []*limiterv1.Limit{{WindowSize: dur(time.Second), Limit: 1e9}, {WindowSize: dur(time.Hour), Limit: 1e9}}
	var buckets []*limiterv1.Limit
	for i := range service.MaxLimits {
		buckets = append(buckets, &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{
			Period: dur(time.Duration(i+1) * time.Second), Limit: 1e9}}})
	}
	allowBatch := func(limits []*limiterv1.Limit) func(items int) func() error {
		return func(items int) func() error {
			req := &limiterv1.AllowBatchRequest{}
			for range items {
				req.Items = append(req.Items, &limiterv1.AllowRequest{Namespace: "api", Key: "k", Limits: limits})
			}
			return func() error {
				resp, err := s.srv.AllowBatch(bg, req)
				if err != nil {
					return err
				}
				for i, r := range resp.GetResults() {
					if r.GetError() != nil {
						return fmt.Errorf("item %d: %v", i, r.GetError())
					}
				}
				return nil
			}
		}
	}
	incrementBatch := func(items int) func() error {
		req := &limiterv1.IncrementBatchRequest{}
		for i := range items {
			it := &limiterv1.IncrementRequest{Namespace: "api", Key: "k"}
			if i%3 == 0 { // a third: half and half would size the slab alike with the two kinds swapped
				it.WindowSize = dur(time.Second)
			}
			req.Items = append(req.Items, it)
		}
		return func() error {
			resp, err := s.srv.IncrementBatch(bg, req)
			if err != nil {
				return err
			}
			for i, r := range resp.GetResults() {
				if r.GetError() != nil {
					return fmt.Errorf("item %d: %v", i, r.GetError())
				}
			}
			return nil
		}
	}
	for _, c := range []struct {
		name string
		call func(items int) func() error
	}{
		{"AllowBatch of two sliding windows", allowBatch(windows)},
		{fmt.Sprintf("AllowBatch of %d buckets", service.MaxLimits), allowBatch(buckets)},
		{"IncrementBatch", incrementBatch},
	} {
		allocs := map[int]float64{}
		for _, items := range []int{10, 100} {
			call := c.call(items)
			if err := call(); err != nil {
				t.Fatalf("%s of %d items: %v", c.name, items, err)
			}
			allocs[items] = testing.AllocsPerRun(20, func() { call() })
		}
		// The pool of scratch space may be emptied by a collection: a
		// call or two of slack.
		if allocs[100] > allocs[10]+2 {
			t.Errorf("%s: %v allocations for 10 items, %v for 100; want no more per item", c.name, allocs[10], allocs[100])
		}
	}
}
