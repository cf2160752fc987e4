package grpcfront

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// sleepClock is a fake clock that sleeping moves.
type sleepClock struct{ *fakeclock.Clock }

func (c sleepClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Add(d)
	return nil
}

func tokenLimit(max float64, refill time.Duration, strict bool) *limiterv1.Limit {
	return &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: max, RefillTime: dur(refill), Strict: strict}}}
}

// bucketCall is one Allow on a bucket and what it must answer.
type bucketCall struct {
	advance time.Duration // the clock moves by this before the call
	cost    *float64
	at      time.Time // the request's at, when not zero
	allowed bool
	before  float64
}

// runBucketCalls runs calls on key with limit in order, checking each
// answer's allowed and before.
func runBucketCalls(t *testing.T, s *testServer, clock *fakeclock.Clock, key string, limit *limiterv1.Limit, calls []bucketCall) []*limiterv1.AllowResponse {
	t.Helper()
	var out []*limiterv1.AllowResponse
	for i, c := range calls {
		clock.Add(c.advance)
		req := &limiterv1.AllowRequest{Key: key, Cost: c.cost, Limits: []*limiterv1.Limit{limit}}
		if !c.at.IsZero() {
			req.At = ts(c.at)
		}
		resp, err := s.client.Allow(bg, req)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if got := resp.GetLimits()[0]; resp.GetAllowed() != c.allowed || got.GetBefore() != c.before {
			t.Errorf("call %d: allowed %v, before %v; want %v, %v (%v)", i, resp.GetAllowed(), got.GetBefore(), c.allowed, c.before, resp)
		}
		out = append(out, resp)
	}
	return out
}

// TestSmyteTranscript: RL.REDUCE TwoPerMin 2 60, three times, answers 2,
// 1, 0.
func TestSmyteTranscript(t *testing.T) {
	clock := fakeclock.New(minute)
	s := newTestServer(t, clock)
	resps := runBucketCalls(t, s, clock, "TwoPerMin", tokenLimit(2, time.Minute, false), []bucketCall{
		{allowed: true, before: 2}, {allowed: true, before: 1}, {allowed: false, before: 0},
	})
	last := resps[2]
	st := last.GetLimits()[0]
	if st.GetWindowSize() != nil || st.GetLimit() != 2 || st.GetRemaining() != 0 || last.GetNever() ||
		last.GetRetryAfter().AsDuration() != time.Minute || st.GetResetAfter().AsDuration() != time.Minute {
		t.Errorf("third call = %v; want limit 2, remaining 0, reset and retry after 1m, no window size", last)
	}
	// A minute later the bucket is full again.
	runBucketCalls(t, s, clock, "TwoPerMin", tokenLimit(2, time.Minute, false), []bucketCall{{advance: time.Minute, allowed: true, before: 2}})
}

// TestSmyteRefill: REFILL 2 adds 2 tokens per refill time, up to max.
func TestSmyteRefill(t *testing.T) {
	clock := fakeclock.New(minute)
	s := newTestServer(t, clock)
	lim := &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 10, RefillTime: dur(time.Minute), RefillAmount: f64(2)}}}
	runBucketCalls(t, s, clock, "refill", lim, []bucketCall{
		{cost: f64(10), allowed: true, before: 10},
		{advance: 59 * time.Second, cost: f64(0), allowed: true, before: 0},
		{advance: time.Second, cost: f64(0), allowed: true, before: 2},
		{advance: 2 * time.Minute, cost: f64(0), allowed: true, before: 6},
		{advance: time.Hour, cost: f64(0), allowed: true, before: 10},
	})
}

// TestSmyteTake: TAKE n takes n; a refused take empties the bucket, as
// Smyte's code does; a take above max is never admitted.
func TestSmyteTake(t *testing.T) {
	clock := fakeclock.New(minute)
	s := newTestServer(t, clock)
	lim := tokenLimit(5, time.Minute, false)
	resps := runBucketCalls(t, s, clock, "take", lim, []bucketCall{
		{cost: f64(3), allowed: true, before: 5},
		{cost: f64(3), allowed: false, before: 2},
		{cost: f64(0), allowed: true, before: 0},
		{cost: f64(6), allowed: false, before: 0},
	})
	if r := resps[1]; r.GetNever() || r.GetRetryAfter().AsDuration() != time.Minute {
		t.Errorf("refused take = %v; want retry after 1m", r)
	}
	if r := resps[3]; !r.GetNever() || r.GetRetryAfter() != nil || r.GetReason() == "" {
		t.Errorf("take above max = %v; want never, a reason, no retry_after", r)
	}
}

// TestSmyteStrict: with STRICT a client that keeps trying stays refused
// until it pauses a whole refill time; without, it gets the refill.
func TestSmyteStrict(t *testing.T) {
	for _, strict := range []bool{false, true} {
		clock := fakeclock.New(minute)
		s := newTestServer(t, clock)
		runBucketCalls(t, s, clock, "strict", tokenLimit(1, time.Minute, strict), []bucketCall{
			{allowed: true, before: 1},
			{advance: 30 * time.Second, allowed: false, before: 0},
			// 70 s: a refill at 60 s, unless STRICT restarted the clock at 30 s.
			{advance: 40 * time.Second, allowed: !strict, before: map[bool]float64{false: 1, true: 0}[strict]},
			// 130 s: STRICT restarted at 70 s; without it, the refill at 120 s.
			{advance: time.Minute, allowed: true, before: 1},
		})
	}
}

// TestSmyteAt: AT gives client time for historical data; a time before
// the bucket's last update counts as that update.
func TestSmyteAt(t *testing.T) {
	clock := fakeclock.New(minute.Add(24 * time.Hour))
	s := newTestServer(t, clock)
	past := minute // a day ago
	runBucketCalls(t, s, clock, "at", tokenLimit(2, time.Minute, false), []bucketCall{
		{at: past, allowed: true, before: 2},
		{at: past.Add(time.Second), allowed: true, before: 1},
		{at: past.Add(61 * time.Second), allowed: true, before: 2},
		// Older than the last update: no refill, and time does not go back.
		{at: past, allowed: true, before: 1},
		{at: past.Add(2 * time.Second), allowed: false, before: 0},
	})
	_, err := s.client.Allow(bg, &limiterv1.AllowRequest{Key: "at", At: ts(clock.Now().Add(-367 * 24 * time.Hour)),
		Limits: []*limiterv1.Limit{tokenLimit(2, time.Minute, false)}})
	checkStatus(t, err, codes.InvalidArgument, "at", "must be within")
	// With a sliding window too, at must be within the window's range.
	_, err = s.client.Allow(bg, &limiterv1.AllowRequest{Key: "at", At: ts(past),
		Limits: []*limiterv1.Limit{tokenLimit(2, time.Minute, false), {WindowSize: dur(time.Minute), Limit: 5}}})
	checkStatus(t, err, codes.InvalidArgument, "at", "must be within")
}

// TestSidekiqLeaky: leaky(name, 10, 10 s): 10 calls within a second pass,
// the 11th is refused with next_drip in (0, 1 s], and a call after that
// drip passes.
func TestSidekiqLeaky(t *testing.T) {
	clock := fakeclock.New(minute)
	s := newTestServer(t, clock)
	lim := &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: 10, Interval: dur(10 * time.Second)}}}
	req := &limiterv1.AllowRequest{Key: "ip-127.0.0.1", Limits: []*limiterv1.Limit{lim}}
	for i := range 10 {
		resp, err := s.client.Allow(bg, req)
		if err != nil || !resp.GetAllowed() {
			t.Fatalf("call %d: %v, %v; want allowed", i+1, resp, err)
		}
		clock.Add(50 * time.Millisecond)
	}
	clock.Add(200 * time.Millisecond) // 0.7 s after the first call
	resp, err := s.client.Allow(bg, req)
	if err != nil || resp.GetAllowed() || resp.GetNever() {
		t.Fatalf("11th call: %v, %v; want refused", resp, err)
	}
	drip := resp.GetLimits()[0].GetResetAfter().AsDuration()
	retry := resp.GetRetryAfter().AsDuration()
	if drip <= 0 || drip > time.Second || retry != drip {
		t.Errorf("11th call: next drip %v, retry after %v; want equal, in (0, 1s]", drip, retry)
	}
	clock.Add(drip)
	if resp, err := s.client.Allow(bg, req); err != nil || !resp.GetAllowed() {
		t.Errorf("call after the drip: %v, %v; want allowed", resp, err)
	}
}

// TestLeakyWaitTimeout: refused only by a leaky bucket whose drip fits
// wait_timeout, the call waits on the clock and passes.
func TestLeakyWaitTimeout(t *testing.T) {
	clock := fakeclock.New(minute)
	s := newTestServer(t, sleepClock{clock})
	lim := &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: 1, Interval: dur(time.Second), WaitTimeout: dur(time.Second)}}}
	req := &limiterv1.AllowRequest{Key: "w", Limits: []*limiterv1.Limit{lim}}
	for i := range 2 {
		if resp, err := s.client.Allow(bg, req); err != nil || !resp.GetAllowed() {
			t.Fatalf("call %d: %v, %v; want allowed", i, resp, err)
		}
	}
	if got := clock.Now().Sub(minute); got != time.Second {
		t.Errorf("the clock moved %v, want the 1s wait", got)
	}
	lim.GetLeaky().WaitTimeout = dur(999 * time.Millisecond)
	if resp, err := s.client.Allow(bg, req); err != nil || resp.GetAllowed() {
		t.Errorf("call with a wait_timeout short of the drip: %v, %v; want refused", resp, err)
	}
}

// TestFixedBucket: at most limit per clock-aligned period.
func TestFixedBucket(t *testing.T) {
	clock := fakeclock.New(minute.Add(50 * time.Second))
	s := newTestServer(t, clock)
	lim := &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Period: dur(time.Minute), Limit: 2}}}
	resps := runBucketCalls(t, s, clock, "fixed", lim, []bucketCall{
		{allowed: true, before: 0}, {allowed: true, before: 1}, {allowed: false, before: 2},
		{advance: 10 * time.Second, allowed: true, before: 0},
	})
	if r := resps[2]; r.GetRetryAfter().AsDuration() != 10*time.Second || r.GetLimits()[0].GetResetAfter().AsDuration() != 10*time.Second {
		t.Errorf("refused call = %v; want reset and retry after 10s (the period's end)", r)
	}
}

// TestMixedAllOrNone: a window and a token bucket on one key admit the
// cost together or not at all.
func TestMixedAllOrNone(t *testing.T) {
	clock := fakeclock.New(minute)
	s := newTestServer(t, clock)
	window := &limiterv1.Limit{WindowSize: dur(time.Second), Limit: 2}
	call := func(key string, token *limiterv1.Limit) *limiterv1.AllowResponse {
		t.Helper()
		resp, err := s.client.Allow(bg, &limiterv1.AllowRequest{Key: key, Limits: []*limiterv1.Limit{window, token}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// The window refuses: the token bucket keeps its tokens.
	big := tokenLimit(10, time.Hour, false)
	for i, want := range []bool{true, true, false, false} {
		resp := call("a", big)
		ws, tb := resp.GetLimits()[0], resp.GetLimits()[1]
		wantTokens := 10 - float64(min(i+1, 2))
		if resp.GetAllowed() != want || tb.GetRemaining() != wantTokens || ws.GetWindowSize().AsDuration() != time.Second {
			t.Errorf("a, call %d: %v; want allowed %v, %v tokens left", i, resp, want, wantTokens)
		}
	}
	// Rate 2 of 2 in the current second falls to 1 half a second into
	// the next.
	if resp := call("a", big); resp.GetRetryAfter().AsDuration() != 1500*time.Millisecond {
		t.Errorf("retry after = %v, want the window's 1.5s", resp.GetRetryAfter().AsDuration())
	}
	// The token bucket refuses: the window counts nothing. Its refill
	// comes at the next whole hour (a full bucket's refill mark is on the
	// refill grid).
	small := tokenLimit(1, time.Hour, false)
	call("b", small)
	resp := call("b", small)
	refill := clock.Now().Truncate(time.Hour).Add(time.Hour).Sub(clock.Now())
	if resp.GetAllowed() || resp.GetLimits()[0].GetRate() != 1 || resp.GetRetryAfter().AsDuration() != refill {
		t.Errorf("b, second call: %v; want refused, window rate 1, retry after %v", resp, refill)
	}
	if got := s.rates(t, "", "b", nil); got[0].rate != 1 {
		t.Errorf("b: window rates %v after a refused call, want 1", got)
	}
}

// TestBucketNotLocal: windows and buckets in one Allow of a synchronous
// namespace fail with FAILED_PRECONDITION (the other cases: service's
// tests).
func TestBucketNotLocal(t *testing.T) {
	cfg := node.Config{Name: "default", WindowSizes: []time.Duration{time.Second}, Shared: true}
	clock := fakeclock.New(minute)
	s := newSyncingTestServer(t, clock, func(n *node.Node) []*clustersync.Syncer {
		ns, _ := n.Namespace("")
		sy, err := clustersync.NewSyncer(ns, clustersync.Synchronous{}, memory.New(), "test/1", clustersync.NewVersions(clock.Now), clustersync.Config{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return []*clustersync.Syncer{sy}
	}, cfg)
	_, err := s.client.Allow(bg, &limiterv1.AllowRequest{Key: "k", Limits: []*limiterv1.Limit{{WindowSize: dur(time.Second), Limit: 1}, tokenLimit(1, time.Minute, false)}})
	checkStatus(t, err, codes.FailedPrecondition, "limits", "one Allow cannot hold both")
	// A bad parameter is still INVALID_ARGUMENT first.
	_, err = s.client.Allow(bg, &limiterv1.AllowRequest{Key: "k", Limits: []*limiterv1.Limit{tokenLimit(0, time.Minute, false)}})
	checkStatus(t, err, codes.InvalidArgument, "limits[0].token.max")
}

// TestBucketBadParameters: every bad parameter is INVALID_ARGUMENT naming
// its field.
func TestBucketBadParameters(t *testing.T) {
	s := newTestServer(t, fakeclock.New(minute))
	leaky := func(size float64, interval, wait time.Duration) *limiterv1.Limit {
		return &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: size, Interval: dur(interval), WaitTimeout: dur(wait)}}}
	}
	fixed := func(period time.Duration, limit float64) *limiterv1.Limit {
		return &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Period: dur(period), Limit: limit}}}
	}
	for _, c := range []struct {
		name   string
		cost   *float64
		limits []*limiterv1.Limit
		field  string
	}{
		{"zero max", nil, []*limiterv1.Limit{tokenLimit(0, time.Minute, false)}, "limits[0].token.max"},
		{"negative refill time", nil, []*limiterv1.Limit{tokenLimit(1, -time.Minute, false)}, "limits[0].token.refill_time"},
		{"no refill time", nil, []*limiterv1.Limit{{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 1}}}}, "limits[0].token.refill_time"},
		{"invalid refill time", nil, []*limiterv1.Limit{{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 1, RefillTime: dur(time.Second)}}}, {Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 1, RefillTime: &durationpb.Duration{Seconds: -1, Nanos: 1}}}}}, "limits[1].token.refill_time"},
		{"negative refill amount", nil, []*limiterv1.Limit{{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 1, RefillTime: dur(time.Second), RefillAmount: f64(-1)}}}}, "limits[0].token.refill_amount"},
		{"max overflow", nil, []*limiterv1.Limit{tokenLimit(2e9, time.Minute, false)}, "limits[0].token.max"},
		{"zero size", nil, []*limiterv1.Limit{leaky(0, time.Second, 0)}, "limits[0].leaky.size"},
		{"zero interval", nil, []*limiterv1.Limit{leaky(1, 0, 0)}, "limits[0].leaky.interval"},
		{"negative wait timeout", nil, []*limiterv1.Limit{leaky(1, time.Second, -1)}, "limits[0].leaky.wait_timeout"},
		{"zero period", nil, []*limiterv1.Limit{fixed(0, 1)}, "limits[0].fixed.period"},
		{"negative limit", nil, []*limiterv1.Limit{fixed(time.Second, -1)}, "limits[0].fixed.limit"},
		{"window size in a bucket", nil, []*limiterv1.Limit{{WindowSize: dur(time.Second), Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Period: dur(time.Second), Limit: 1}}}}, "limits[0].window_size"},
		{"the same bucket twice", nil, []*limiterv1.Limit{fixed(time.Second, 1), tokenLimit(1, time.Second, false), fixed(time.Second, 1)}, "limits[2].fixed"},
		{"take above 1e9", f64(1e9 + 1), []*limiterv1.Limit{tokenLimit(1, time.Second, false)}, "cost"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.client.Allow(bg, &limiterv1.AllowRequest{Key: "k", Cost: c.cost, Limits: c.limits})
			checkStatus(t, err, codes.InvalidArgument, c.field)
		})
	}
	if n := s.node.Namespaces()[0].Stats().ActiveBuckets; n != 0 {
		t.Errorf("%d buckets after rejected calls, want 0", n)
	}
}
