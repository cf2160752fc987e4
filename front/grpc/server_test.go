package grpcfront

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/service"
)

var bg = context.Background()

// TestSeedWorkedExampleOverGRPC is the seed's example through the API: 40
// hits in the previous minute, 10 in the current one, 30 s into it the
// 60 s rate is 10 + 40 × (60 − 30) / 60 = 30.
func TestSeedWorkedExampleOverGRPC(t *testing.T) {
	clock := fakeclock.New(minute.Add(30 * time.Second))
	s := newTestServer(t, clock)
	inc := func(at time.Time, v float64) *limiterv1.IncrementResponse {
		t.Helper()
		resp, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Key: "k", WindowSize: dur(time.Minute), Value: f64(v), At: ts(at)})
		if err != nil {
			t.Fatalf("Increment(%v at %v): %v", v, at, err)
		}
		return resp
	}
	resp := inc(minute.Add(-20*time.Second), 40) // previous minute
	checkRates(t, "after 40 in the previous minute", resp.GetRates(), rate{time.Minute, 40})
	resp = inc(minute.Add(10*time.Second), 10) // current minute, 10 s in
	// 10 + 40 × 50/60
	checkRates(t, "after 10 in the current minute", resp.GetRates(), rate{time.Minute, 10 + 40*50.0/60})

	sw, err := s.client.SlidingWindow(bg, &limiterv1.SlidingWindowRequest{Key: "k", WindowSize: dur(time.Minute), At: ts(minute.Add(30 * time.Second))})
	if err != nil {
		t.Fatal(err)
	}
	if got := sw.GetRates(); len(got) != 1 || got[0].GetRate() != 30 || got[0].GetWindowSize().AsDuration() != time.Minute {
		t.Fatalf("SlidingWindow at 30 s = %v, want exactly [60s: 30]", got)
	}
	// Without `at` the server's clock (30 s in) gives the same; without a
	// window size every size answers, ascending. The 1 s window saw
	// nothing: the hits were counted in the 60 s window only.
	sw, err = s.client.SlidingWindow(bg, &limiterv1.SlidingWindowRequest{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	checkRates(t, "SlidingWindow now, every size", sw.GetRates(), rate{time.Second, 0}, rate{time.Minute, 30})
}

func TestIncrement(t *testing.T) {
	clock := fakeclock.New(minute.Add(500 * time.Millisecond))
	s := newTestServer(t, clock)
	inc := func(req *limiterv1.IncrementRequest) []*limiterv1.WindowRate {
		t.Helper()
		resp, err := s.client.Increment(bg, req)
		if err != nil {
			t.Fatalf("Increment(%v): %v", req, err)
		}
		return resp.GetRates()
	}

	t.Run("missing value means 1, every size ascending", func(t *testing.T) {
		checkRates(t, "first", inc(&limiterv1.IncrementRequest{Key: "a"}), rate{time.Second, 1}, rate{time.Minute, 1})
		checkRates(t, "second", inc(&limiterv1.IncrementRequest{Key: "a"}), rate{time.Second, 2}, rate{time.Minute, 2})
	})
	t.Run("explicit 0 counts nothing", func(t *testing.T) {
		checkRates(t, "zero", inc(&limiterv1.IncrementRequest{Key: "a", Value: f64(0)}), rate{time.Second, 2}, rate{time.Minute, 2})
	})
	t.Run("one window size", func(t *testing.T) {
		checkRates(t, "1s only", inc(&limiterv1.IncrementRequest{Key: "a", WindowSize: dur(time.Second)}), rate{time.Second, 3})
		got := s.rates(t, "", "a", nil)
		if want := []rate{{time.Second, 3}, {time.Minute, 2}}; !equalRates(got, want) {
			t.Errorf("rates = %v, want %v", got, want)
		}
	})
	t.Run("empty namespace means default", func(t *testing.T) {
		checkRates(t, "named default", inc(&limiterv1.IncrementRequest{Namespace: "default", Key: "a", Value: f64(10)}),
			rate{time.Second, 13}, rate{time.Minute, 12})
		if got := s.rates(t, "", "a", nil); !equalRates(got, []rate{{time.Second, 13}, {time.Minute, 12}}) {
			t.Errorf("read via \"\": %v", got)
		}
		// "api" is a different namespace: the same key there is untouched.
		s.checkUncounted(t, "api", "a")
	})
	t.Run("fractional, negative, micro-hit rounding", func(t *testing.T) {
		checkRates(t, "0.5", inc(&limiterv1.IncrementRequest{Key: "f", Value: f64(0.5)}), rate{time.Second, 0.5}, rate{time.Minute, 0.5})
		checkRates(t, "-0.25", inc(&limiterv1.IncrementRequest{Key: "f", Value: f64(-0.25)}), rate{time.Second, 0.25}, rate{time.Minute, 0.25})
		// 0.0000005 hit is half a micro-hit: rounded away from zero.
		checkRates(t, "half micro", inc(&limiterv1.IncrementRequest{Key: "f", Value: f64(0.0000005), WindowSize: dur(time.Second)}),
			rate{time.Second, 0.250001})
		checkRates(t, "-half micro", inc(&limiterv1.IncrementRequest{Key: "f", Value: f64(-0.0000005), WindowSize: dur(time.Second)}),
			rate{time.Second, 0.25})
		checkRates(t, "below negative", inc(&limiterv1.IncrementRequest{Key: "f", Value: f64(-1), WindowSize: dur(time.Second)}),
			rate{time.Second, -0.75})
	})
	t.Run("largest value and key", func(t *testing.T) {
		key := strings.Repeat("é", 512) // 1024 bytes
		checkRates(t, "1e9", inc(&limiterv1.IncrementRequest{Key: key, Value: f64(1e9)}), rate{time.Second, 1e9}, rate{time.Minute, 1e9})
		checkRates(t, "-1e9", inc(&limiterv1.IncrementRequest{Key: key, Value: f64(-1e9)}), rate{time.Second, 0}, rate{time.Minute, 0})
	})
	t.Run("keys stay distinct", func(t *testing.T) {
		for _, k := range []string{"x|y", "x:y", "x y", "x\x00y", "x"} {
			inc(&limiterv1.IncrementRequest{Key: k})
		}
		for _, k := range []string{"x|y", "x:y", "x y", "x\x00y", "x"} {
			if got := s.rates(t, "", k, nil); !equalRates(got, []rate{{time.Second, 1}, {time.Minute, 1}}) {
				t.Errorf("%q: %v, want 1 each", k, got)
			}
		}
	})
	t.Run("at pins time; sub-second windows", func(t *testing.T) {
		// api has 100ms, 1s and 1h windows; the clock is 500 ms past a minute.
		at := minute.Add(250 * time.Millisecond)
		checkRates(t, "at 250ms", inc(&limiterv1.IncrementRequest{Namespace: "api", Key: "p", Value: f64(4), At: ts(at)}),
			rate{100 * time.Millisecond, 4}, rate{time.Second, 4}, rate{time.Hour, 4})
		// Now (500 ms): the 100 ms window of 250 ms is two windows old.
		got := s.rates(t, "api", "p", nil)
		if want := []rate{{100 * time.Millisecond, 0}, {time.Second, 4}, {time.Hour, 4}}; !equalRates(got, want) {
			t.Errorf("now: %v, want %v", got, want)
		}
		// At 320 ms, 20 ms into the next 100 ms window: 4 × 80/100.
		got = s.rates(t, "api", "p", ts(minute.Add(320*time.Millisecond)))
		if want := []rate{{100 * time.Millisecond, 3.2}, {time.Second, 4}, {time.Hour, 4}}; !equalRates(got, want) {
			t.Errorf("at 320ms: %v, want %v", got, want)
		}
		// The boundaries of `at` are accepted: now − largest window, now + 1 s.
		for _, at := range []time.Time{clock.Now().Add(-time.Hour), clock.Now().Add(time.Second)} {
			if _, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Namespace: "api", Key: "edge", Value: f64(0), At: ts(at)}); err != nil {
				t.Errorf("at %v: %v", at, err)
			}
		}
	})
}

func equalRates(got, want []rate) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].size != want[i].size || !sameFloat(got[i].rate, want[i].rate) {
			return false
		}
	}
	return true
}

func TestSlidingWindowCurDiffCountsNothing(t *testing.T) {
	clock := fakeclock.New(minute.Add(15 * time.Second))
	s := newTestServer(t, clock)
	sw := func(key string, curDiff *float64) []*limiterv1.WindowRate {
		t.Helper()
		resp, err := s.client.SlidingWindow(bg, &limiterv1.SlidingWindowRequest{Key: key, CurDiff: curDiff})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetRates()
	}
	// A key never counted: the what-if is cur_diff itself, and no key is
	// created.
	checkRates(t, "unknown key, cur_diff 5", sw("new", f64(5)), rate{time.Second, 5}, rate{time.Minute, 5})
	if n := s.activeKeys(); n != 0 {
		t.Errorf("active keys after a what-if = %d, want 0", n)
	}
	checkRates(t, "unknown key, missing cur_diff", sw("new", nil), rate{time.Second, 0}, rate{time.Minute, 0})

	// Previous minute 6, current 2; 15 s in: 2 + 6 × 45/60 = 6.5.
	if _, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Key: "k", WindowSize: dur(time.Minute), Value: f64(6), At: ts(minute.Add(-time.Second))}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Key: "k", Value: f64(2)}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		checkRates(t, "cur_diff 1.5", sw("k", f64(1.5)), rate{time.Second, 3.5}, rate{time.Minute, 8})
		checkRates(t, "cur_diff -2", sw("k", f64(-2)), rate{time.Second, 0}, rate{time.Minute, 4.5})
	}
	checkRates(t, "after the what-ifs", sw("k", nil), rate{time.Second, 2}, rate{time.Minute, 6.5})
}

func TestAllow(t *testing.T) {
	clock := fakeclock.New(minute.Add(250 * time.Millisecond))
	s := newTestServer(t, clock)
	var allow func(req *limiterv1.AllowRequest) *limiterv1.AllowResponse
	use := func(t *testing.T) {
		allow = func(req *limiterv1.AllowRequest) *limiterv1.AllowResponse {
			t.Helper()
			resp, err := s.client.Allow(bg, req)
			if err != nil {
				t.Fatalf("Allow(%v): %v", req, err)
			}
			return resp
		}
	}
	type status struct {
		size                   time.Duration
		limit, rate, remaining float64
		resetAfter             time.Duration
	}
	checkLimits := func(t *testing.T, resp *limiterv1.AllowResponse, want ...status) {
		t.Helper()
		got := make([]status, len(resp.GetLimits()))
		ok := len(got) == len(want)
		for i, l := range resp.GetLimits() {
			got[i] = status{l.GetWindowSize().AsDuration(), l.GetLimit(), l.GetRate(), l.GetRemaining(), l.GetResetAfter().AsDuration()}
			if ok {
				w := want[i]
				ok = got[i].size == w.size && got[i].limit == w.limit && sameFloat(got[i].rate, w.rate) &&
					sameFloat(got[i].remaining, w.remaining) && got[i].resetAfter == w.resetAfter
			}
		}
		if !ok {
			t.Errorf("limits = %+v\nwant     %+v", got, want)
		}
	}
	lims := func(kv ...any) []*limiterv1.Limit {
		var out []*limiterv1.Limit
		for i := 0; i < len(kv); i += 2 {
			out = append(out, &limiterv1.Limit{WindowSize: dur(kv[i].(time.Duration)), Limit: kv[i+1].(float64)})
		}
		return out
	}

	t.Run("allowed: statuses in request order, counted in every size", func(t *testing.T) {
		use(t)
		resp := allow(&limiterv1.AllowRequest{Key: "a", Cost: f64(2), Limits: lims(time.Minute, 10.0, time.Second, 5.0)})
		if !resp.GetAllowed() || resp.GetNever() || resp.GetReason() != "" || resp.GetRetryAfter() != nil {
			t.Errorf("decision = %v, want allowed without retry_after, never, reason", resp)
		}
		checkLimits(t, resp,
			status{time.Minute, 10, 2, 8, 59750 * time.Millisecond},
			status{time.Second, 5, 2, 3, 750 * time.Millisecond})
		// A limit on one size still counts the cost in every size.
		resp = allow(&limiterv1.AllowRequest{Key: "a", Limits: lims(time.Second, 5.0)})
		checkLimits(t, resp, status{time.Second, 5, 3, 2, 750 * time.Millisecond})
		if got := s.rates(t, "", "a", nil); !equalRates(got, []rate{{time.Second, 3}, {time.Minute, 3}}) {
			t.Errorf("read back %v, want 3 in both sizes (missing cost means 1)", got)
		}
	})

	t.Run("denied: retry_after, nothing counted", func(t *testing.T) {
		use(t)
		// 3 hits at 200 ms; at 500 ms a 1-hit request over 3/s is denied.
		// In the next second, rate = 3 × (1 − x) + 1 <= 3 once x >= 1/3:
		// retry after 500 ms + 333.3 ms.
		if _, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Key: "d", Value: f64(3), At: ts(minute.Add(200 * time.Millisecond))}); err != nil {
			t.Fatal(err)
		}
		t0 := minute.Add(500 * time.Millisecond)
		clock.Set(t0) // so that t0 + retry_after is a valid `at`
		defer clock.Set(minute.Add(250 * time.Millisecond))
		req := &limiterv1.AllowRequest{Key: "d", Limits: lims(time.Second, 3.0, time.Minute, 100.0), At: ts(t0)}
		resp := allow(req)
		if resp.GetAllowed() || resp.GetNever() || resp.GetReason() != "" {
			t.Errorf("decision = %v, want denied, not never", resp)
		}
		checkLimits(t, resp,
			status{time.Second, 3, 3, 0, 500 * time.Millisecond},
			status{time.Minute, 100, 3, 97, 59500 * time.Millisecond})
		retry := resp.GetRetryAfter().AsDuration()
		if lo, hi := 833333333*time.Nanosecond, 833334334*time.Nanosecond; resp.GetRetryAfter() == nil || retry < lo || retry > hi {
			t.Fatalf("retry_after = %v, want in [%v, %v]", resp.GetRetryAfter(), lo, hi)
		}
		if got := s.rates(t, "", "d", ts(t0)); !equalRates(got, []rate{{time.Second, 3}, {time.Minute, 3}}) {
			t.Errorf("after the denial: %v, want 3 in both sizes", got)
		}
		// retry_after is the least wait: a millisecond earlier is still
		// denied, at retry_after the same request is admitted.
		req.At = ts(t0.Add(retry - time.Millisecond))
		if resp := allow(req); resp.GetAllowed() {
			t.Errorf("allowed 1 ms before retry_after: %v", resp)
		}
		req.At = ts(t0.Add(retry))
		if resp := allow(req); !resp.GetAllowed() || resp.GetRetryAfter() != nil {
			t.Errorf("at retry_after: %v, want allowed without retry_after", resp)
		}
	})

	t.Run("never: cost above a limit", func(t *testing.T) {
		use(t)
		resp := allow(&limiterv1.AllowRequest{Key: "n", Cost: f64(5), Limits: lims(time.Minute, 100.0, time.Second, 3.0)})
		if resp.GetAllowed() || !resp.GetNever() || resp.GetRetryAfter() != nil {
			t.Errorf("decision = %v, want never, no retry_after", resp)
		}
		if want := "cost 5 exceeds the limit 3 per 1s"; !strings.Contains(resp.GetReason(), want) {
			t.Errorf("reason = %q, want it to contain %q", resp.GetReason(), want)
		}
		checkLimits(t, resp,
			status{time.Minute, 100, 0, 100, 59750 * time.Millisecond},
			status{time.Second, 3, 0, 3, 750 * time.Millisecond})
		s.checkUncounted(t, "", "n")
	})

	t.Run("cost 0 checks and counts nothing", func(t *testing.T) {
		use(t)
		allow(&limiterv1.AllowRequest{Key: "z", Cost: f64(3), Limits: lims(time.Second, 3.0)})
		resp := allow(&limiterv1.AllowRequest{Key: "z", Cost: f64(0), Limits: lims(time.Second, 3.0)})
		if !resp.GetAllowed() {
			t.Errorf("cost 0 at the limit: %v, want allowed (rate + 0 <= limit)", resp)
		}
		checkLimits(t, resp, status{time.Second, 3, 3, 0, 750 * time.Millisecond})
		if got := s.rates(t, "", "z", nil); !equalRates(got, []rate{{time.Second, 3}, {time.Minute, 3}}) {
			t.Errorf("read back %v, want 3", got)
		}
	})

	t.Run("count_rejected counts the denied cost", func(t *testing.T) {
		use(t)
		req := &limiterv1.AllowRequest{Key: "c", Cost: f64(2), Limits: lims(time.Second, 3.0), CountRejected: true}
		if resp := allow(req); !resp.GetAllowed() {
			t.Fatalf("first: %v", resp)
		}
		resp := allow(req)
		if resp.GetAllowed() || resp.GetNever() || resp.GetRetryAfter() == nil {
			t.Errorf("second = %v, want denied with retry_after", resp)
		}
		checkLimits(t, resp, status{time.Second, 3, 4, 0, 750 * time.Millisecond})
		if got := s.rates(t, "", "c", nil); !equalRates(got, []rate{{time.Second, 4}, {time.Minute, 4}}) {
			t.Errorf("read back %v, want 4 (the penalty counted)", got)
		}
		// Without count_rejected the same denial counts nothing.
		req.CountRejected = false
		allow(req)
		if got := s.rates(t, "", "c", nil); !equalRates(got, []rate{{time.Second, 4}, {time.Minute, 4}}) {
			t.Errorf("read back %v, want still 4", got)
		}
	})

	t.Run("empty namespace means default", func(t *testing.T) {
		use(t)
		allow(&limiterv1.AllowRequest{Namespace: "default", Key: "dn", Limits: lims(time.Second, 3.0)})
		allow(&limiterv1.AllowRequest{Key: "dn", Limits: lims(time.Second, 3.0)})
		if got := s.rates(t, "default", "dn", nil); !equalRates(got, []rate{{time.Second, 2}, {time.Minute, 2}}) {
			t.Errorf("read back %v, want 2", got)
		}
	})
}

// TestAllowExactUnderConcurrency: racing Allows over gRPC never take more
// than the limit.
func TestAllowExactUnderConcurrency(t *testing.T) {
	s := newTestServer(t, fakeclock.New(minute))
	const limit, callers = 10, 40
	var mu sync.Mutex
	allowed := 0
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			resp, err := s.client.Allow(bg, &limiterv1.AllowRequest{Key: "hot", Limits: []*limiterv1.Limit{{WindowSize: dur(time.Minute), Limit: limit}}})
			if err != nil {
				t.Error(err)
				return
			}
			if resp.GetAllowed() {
				mu.Lock()
				allowed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if allowed != limit {
		t.Errorf("%d of %d racing calls allowed, want exactly %d", allowed, callers, limit)
	}
}

func TestIncrementBatch(t *testing.T) {
	clock := fakeclock.New(minute.Add(30 * time.Second))
	s := newTestServer(t, clock)
	resp, err := s.client.IncrementBatch(bg, &limiterv1.IncrementBatchRequest{Items: []*limiterv1.IncrementRequest{
		{Key: "k", WindowSize: dur(time.Minute), Value: f64(40), At: ts(minute.Add(-20 * time.Second))},
		{Key: "k", WindowSize: dur(time.Minute), Value: f64(10), At: ts(minute.Add(10 * time.Second))},
		{Namespace: "api", Key: "k"},
		{Key: "", Value: f64(7)}, // fails alone
		{Key: "k", WindowSize: dur(time.Minute), Value: f64(0)},
		{Namespace: "nope", Key: "k"}, // fails alone
	}})
	if err != nil {
		t.Fatal(err)
	}
	res := resp.GetResults()
	if len(res) != 6 {
		t.Fatalf("%d results for 6 items", len(res))
	}
	for i, r := range res {
		if (r.GetResponse() == nil) == (r.GetError() == nil) {
			t.Errorf("result %d: want exactly one of response and error, got %v", i, r)
		}
	}
	checkRates(t, "item 0", res[0].GetResponse().GetRates(), rate{time.Minute, 40})
	checkRates(t, "item 1", res[1].GetResponse().GetRates(), rate{time.Minute, 10 + 40*50.0/60})
	checkRates(t, "item 2", res[2].GetResponse().GetRates(), rate{100 * time.Millisecond, 1}, rate{time.Second, 1}, rate{time.Hour, 1})
	checkRates(t, "item 4", res[4].GetResponse().GetRates(), rate{time.Minute, 30}) // the seed's example
	if c := codes.Code(res[3].GetError().GetCode()); c != codes.InvalidArgument || !strings.HasPrefix(res[3].GetError().GetMessage(), "key: ") {
		t.Errorf("item 3 error = %v, want INVALID_ARGUMENT on key", res[3].GetError())
	}
	if c := codes.Code(res[5].GetError().GetCode()); c != codes.NotFound || !strings.Contains(res[5].GetError().GetMessage(), `"nope"`) {
		t.Errorf("item 5 error = %v, want NOT_FOUND naming \"nope\"", res[5].GetError())
	}
	if got := s.rates(t, "", "k", nil); !equalRates(got, []rate{{time.Second, 0}, {time.Minute, 30}}) {
		t.Errorf("read back %v, want 60s: 30", got)
	}
	if n := s.activeKeys(); n != 2 {
		t.Errorf("active keys = %d, want 2 (default/k, api/k)", n)
	}
}

func TestAllowBatch(t *testing.T) {
	clock := fakeclock.New(minute.Add(250 * time.Millisecond))
	s := newTestServer(t, clock)
	lim := func(d time.Duration, l float64) []*limiterv1.Limit {
		return []*limiterv1.Limit{{WindowSize: dur(d), Limit: l}}
	}
	items := []*limiterv1.AllowRequest{
		{Key: "a", Cost: f64(2), Limits: lim(time.Second, 3)},  // allowed
		{Key: "a", Cost: f64(2), Limits: lim(time.Second, 3)},  // denied: items are decided in order
		{Key: "a", Cost: f64(-1), Limits: lim(time.Second, 3)}, // error
		{Key: "a", Cost: f64(1), Limits: lim(time.Second, 3)},  // allowed: independent of the failure
		{Key: "b", Cost: f64(9), Limits: lim(time.Second, 3)},  // never
		{Namespace: "tiny", Key: "c", Limits: lim(2*time.Second, 3)},
	}
	resp, err := s.client.AllowBatch(bg, &limiterv1.AllowBatchRequest{Items: items})
	if err != nil {
		t.Fatal(err)
	}
	res := resp.GetResults()
	if len(res) != len(items) {
		t.Fatalf("%d results for %d items", len(res), len(items))
	}
	for i, r := range res {
		if (r.GetResponse() == nil) == (r.GetError() == nil) {
			t.Errorf("result %d: want exactly one of response and error, got %v", i, r)
		}
	}
	type want struct{ allowed, never, retry bool }
	for i, w := range map[int]want{0: {true, false, false}, 1: {false, false, true}, 3: {true, false, false}, 4: {false, true, false}} {
		r := res[i].GetResponse()
		if r.GetAllowed() != w.allowed || r.GetNever() != w.never || (r.GetRetryAfter() != nil) != w.retry {
			t.Errorf("item %d = %v, want %+v", i, r, w)
		}
	}
	if e := res[2].GetError(); codes.Code(e.GetCode()) != codes.InvalidArgument || !strings.HasPrefix(e.GetMessage(), "cost: ") {
		t.Errorf("item 2 error = %v, want INVALID_ARGUMENT on cost", e)
	}
	if e := res[5].GetError(); codes.Code(e.GetCode()) != codes.InvalidArgument || !strings.HasPrefix(e.GetMessage(), "limits[0].window_size: ") ||
		!strings.Contains(e.GetMessage(), "configured: 1s, 1m0s") {
		t.Errorf("item 5 error = %v, want INVALID_ARGUMENT on limits[0].window_size listing 1s, 1m0s", e)
	}
	if got := s.rates(t, "", "a", nil); !equalRates(got, []rate{{time.Second, 3}, {time.Minute, 3}}) {
		t.Errorf("a: %v, want 3 (items 0 and 3)", got)
	}
	s.checkUncounted(t, "", "b")
	s.checkUncounted(t, "tiny", "c")
}

// TestBatchItemLimit: 10,000 items are served; 10,001 are refused whole,
// counting nothing.
func TestBatchItemLimit(t *testing.T) {
	s := newTestServer(t, fakeclock.New(minute))
	incs := make([]*limiterv1.IncrementRequest, service.MaxBatchItems+1)
	allows := make([]*limiterv1.AllowRequest, service.MaxBatchItems+1)
	for i := range incs {
		incs[i] = &limiterv1.IncrementRequest{Key: "i"}
		allows[i] = &limiterv1.AllowRequest{Key: "a", Limits: []*limiterv1.Limit{{WindowSize: dur(time.Second), Limit: 1e9}}}
	}
	_, err := s.client.IncrementBatch(bg, &limiterv1.IncrementBatchRequest{Items: incs})
	checkStatus(t, err, codes.InvalidArgument, "items", "at most 10000", "got 10001")
	_, err = s.client.AllowBatch(bg, &limiterv1.AllowBatchRequest{Items: allows})
	checkStatus(t, err, codes.InvalidArgument, "items", "at most 10000", "got 10001")
	if n := s.activeKeys(); n != 0 {
		t.Fatalf("active keys = %d after refused batches, want 0", n)
	}

	ir, err := s.client.IncrementBatch(bg, &limiterv1.IncrementBatchRequest{Items: incs[:service.MaxBatchItems]})
	if err != nil {
		t.Fatal(err)
	}
	ar, err := s.client.AllowBatch(bg, &limiterv1.AllowBatchRequest{Items: allows[:service.MaxBatchItems]})
	if err != nil {
		t.Fatal(err)
	}
	if len(ir.GetResults()) != service.MaxBatchItems || len(ar.GetResults()) != service.MaxBatchItems {
		t.Fatalf("results: %d and %d, want %d", len(ir.GetResults()), len(ar.GetResults()), service.MaxBatchItems)
	}
	checkRates(t, "last increment", ir.GetResults()[service.MaxBatchItems-1].GetResponse().GetRates(), rate{time.Second, service.MaxBatchItems}, rate{time.Minute, service.MaxBatchItems})
	if got := s.rates(t, "", "a", nil); !equalRates(got, []rate{{time.Second, service.MaxBatchItems}, {time.Minute, service.MaxBatchItems}}) {
		t.Errorf("a: %v, want %d", got, service.MaxBatchItems)
	}
}

// TestKeyCap: a namespace at max_keys refuses new keys with
// RESOURCE_EXHAUSTED, counting nothing, and keeps serving its keys.
func TestKeyCap(t *testing.T) {
	s := newTestServer(t, fakeclock.New(minute))
	tiny, _ := s.node.Namespace("tiny")
	lim := []*limiterv1.Limit{{WindowSize: dur(time.Second), Limit: 100}}
	for _, k := range []string{"a", "b"} {
		if _, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Namespace: "tiny", Key: k}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Namespace: "tiny", Key: "c"})
	checkStatus(t, err, codes.ResourceExhausted, "key", `"tiny"`, "maximum of 2 active keys")
	_, err = s.client.Allow(bg, &limiterv1.AllowRequest{Namespace: "tiny", Key: "c", Limits: lim})
	checkStatus(t, err, codes.ResourceExhausted, "key", `"tiny"`, "maximum of 2 active keys")

	ib, err := s.client.IncrementBatch(bg, &limiterv1.IncrementBatchRequest{Items: []*limiterv1.IncrementRequest{
		{Namespace: "tiny", Key: "a"}, {Namespace: "tiny", Key: "c"}, {Namespace: "tiny", Key: "b"}, {Key: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	ab, err := s.client.AllowBatch(bg, &limiterv1.AllowBatchRequest{Items: []*limiterv1.AllowRequest{
		{Namespace: "tiny", Key: "c", Limits: lim}, {Namespace: "tiny", Key: "a", Limits: lim}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []*limiterv1.IncrementResult{ib.GetResults()[1]} {
		if codes.Code(e.GetError().GetCode()) != codes.ResourceExhausted {
			t.Errorf("batch item for a new key: %v, want RESOURCE_EXHAUSTED", e)
		}
	}
	if codes.Code(ab.GetResults()[0].GetError().GetCode()) != codes.ResourceExhausted || !ab.GetResults()[1].GetResponse().GetAllowed() {
		t.Errorf("allow batch = %v, want RESOURCE_EXHAUSTED then allowed", ab.GetResults())
	}
	for i, r := range ib.GetResults() {
		if i != 1 && r.GetError() != nil {
			t.Errorf("item %d: %v", i, r.GetError())
		}
	}
	s.checkUncounted(t, "tiny", "c")
	for k, want := range map[string]float64{"a": 3, "b": 2} {
		if got := s.rates(t, "tiny", k, nil); !equalRates(got, []rate{{time.Second, want}, {time.Minute, want}}) {
			t.Errorf("%s: %v, want %v", k, got, want)
		}
	}
	if n := tiny.Stats().ActiveKeys; n != 2 {
		t.Errorf("tiny active keys = %d, want 2", n)
	}
	if n := tiny.Stats().RefusedKeys; n != 4 {
		t.Errorf("tiny refused keys = %d, want 4", n)
	}
	// The cap is per namespace: default took its own "c".
	if got := s.rates(t, "", "c", nil); !equalRates(got, []rate{{time.Second, 1}, {time.Minute, 1}}) {
		t.Errorf("default/c: %v, want 1", got)
	}
}
