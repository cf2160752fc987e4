package service_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

// badRequest is one bad request and the first error it must get.
type badRequest struct {
	name     string
	field    string
	sentinel error
	call     func(*service.Service) error
}

func increment(r service.IncrementRequest) func(*service.Service) error {
	return func(s *service.Service) error {
		_, err := s.Increment(context.Background(), r, nil)
		return err
	}
}

func slidingWindow(r service.RateRequest) func(*service.Service) error {
	return func(s *service.Service) error {
		_, err := s.SlidingWindow(context.Background(), r, nil)
		return err
	}
}

func allow(r service.AllowRequest) func(*service.Service) error {
	return func(s *service.Service) error {
		_, err := s.Allow(context.Background(), r, nil)
		return err
	}
}

func lim(size time.Duration, l float64) service.Limit { return service.Limit{Size: size, Limit: l} }

var (
	sec, min = time.Second, time.Minute
	ok1      = []service.Limit{lim(sec, 10)}
	longKey  = strings.Repeat("k", 1025)
)

// badRequests hold, for every field, bad requests that are bad in that
// field only and bad requests that are bad in several fields, whose first
// error the validation order decides.
func badRequests() []badRequest {
	seventeen := make([]service.Limit, 17)
	for i := range seventeen {
		seventeen[i] = lim(sec, 1)
	}
	type inc = service.IncrementRequest
	type rate = service.RateRequest
	type al = service.AllowRequest
	return []badRequest{
		// namespace
		{"increment unknown namespace", "namespace", service.ErrUnknownNamespace, increment(inc{Namespace: "nope", Key: "\xff", WindowSize: 7 * sec})},
		{"rate unknown namespace", "namespace", service.ErrUnknownNamespace, slidingWindow(rate{Namespace: "nope", Key: ""})},
		{"allow unknown namespace", "namespace", service.ErrUnknownNamespace, allow(al{Namespace: "nope", Key: "k"})},
		// at
		{"increment at too early", "at", service.ErrInvalidValue, increment(inc{At: now.Add(-min - 1), Key: ""})},
		{"increment at too late", "at", service.ErrInvalidValue, increment(inc{At: now.Add(sec + 1), Key: "k"})},
		{"rate at far future", "at", service.ErrInvalidValue, slidingWindow(rate{At: now.Add(24 * time.Hour), Key: "\xff"})},
		{"allow at Unix epoch", "at", service.ErrInvalidValue, allow(al{At: time.Unix(0, 0), Key: "k", Limits: ok1})},
		// key
		{"increment empty key", "key", service.ErrInvalidKey, increment(inc{Key: "", WindowSize: 7 * sec, Value: f64(math.NaN())})},
		{"increment long key", "key", service.ErrInvalidKey, increment(inc{Key: longKey})},
		{"increment invalid UTF-8 key, unknown size", "key", service.ErrInvalidKey, increment(inc{Key: "\xff", WindowSize: 7 * sec})},
		{"rate invalid UTF-8 key, unknown size", "key", service.ErrInvalidKey, slidingWindow(rate{Key: "\xff", WindowSize: 7 * sec})},
		{"rate long key, NaN cur_diff", "key", service.ErrInvalidKey, slidingWindow(rate{Key: longKey, CurDiff: math.NaN()})},
		{"allow invalid UTF-8 key, no limits", "key", service.ErrInvalidKey, allow(al{Key: "k\xff"})},
		{"allow empty key, negative cost", "key", service.ErrInvalidKey, allow(al{Key: "", Cost: f64(-1), Limits: ok1})},
		// window_size
		{"increment negative window size", "window_size", service.ErrInvalidWindow, increment(inc{Key: "k", WindowSize: -sec, Value: f64(math.Inf(1))})},
		{"increment unknown window size, NaN value", "window_size", service.ErrUnknownWindow, increment(inc{Key: "k", WindowSize: 7 * sec, Value: f64(math.NaN())})},
		{"increment sub-millisecond window size", "window_size", service.ErrUnknownWindow, increment(inc{Key: "k", WindowSize: 1500 * time.Microsecond})},
		{"rate unknown window size, NaN cur_diff", "window_size", service.ErrUnknownWindow, slidingWindow(rate{Key: "k", WindowSize: time.Hour, CurDiff: math.NaN()})},
		{"rate negative window size", "window_size", service.ErrInvalidWindow, slidingWindow(rate{Key: "k", WindowSize: -1})},
		// value, cur_diff, cost
		{"increment NaN value", "value", service.ErrInvalidValue, increment(inc{Key: "k", Value: f64(math.NaN())})},
		{"increment value above 1e9", "value", service.ErrInvalidValue, increment(inc{Key: "k", Value: f64(1e9 + 1)})},
		{"increment value -Inf", "value", service.ErrInvalidValue, increment(inc{Key: "k", WindowSize: sec, Value: f64(math.Inf(-1))})},
		{"rate cur_diff +Inf", "cur_diff", service.ErrInvalidValue, slidingWindow(rate{Key: "k", CurDiff: math.Inf(1)})},
		{"rate cur_diff below -1e9", "cur_diff", service.ErrInvalidValue, slidingWindow(rate{Key: "k", CurDiff: -2e9})},
		{"allow NaN cost, no limits", "cost", service.ErrInvalidValue, allow(al{Key: "k", Cost: f64(math.NaN())})},
		{"allow negative cost, bad limit", "cost", service.ErrInvalidValue, allow(al{Key: "k", Cost: f64(-0.000001), Limits: []service.Limit{lim(-sec, -1)}})},
		{"allow cost above 1e9", "cost", service.ErrInvalidValue, allow(al{Key: "k", Cost: f64(1e9 + 1), Limits: ok1})},
		// limits
		{"allow no limits", "limits", service.ErrInvalidLimit, allow(al{Key: "k"})},
		{"allow 17 limits", "limits", service.ErrInvalidLimit, allow(al{Key: "k", Limits: seventeen})},
		{"allow limit without window size", "limits[1].window_size", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{lim(sec, 5), {Limit: -5}}})},
		{"allow limit with negative window size", "limits[0].window_size", service.ErrInvalidWindow, allow(al{Key: "k", Limits: []service.Limit{lim(-sec, 5)}})},
		{"allow limit with unknown window size", "limits[1].window_size", service.ErrUnknownWindow, allow(al{Key: "k", Limits: []service.Limit{lim(sec, 5), lim(7*sec, -1)}})},
		{"allow duplicate window size", "limits[2].window_size", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{lim(sec, 5), lim(min, 50), lim(sec, 7)}})},
		{"allow negative limit", "limits[0].limit", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{lim(sec, -1), lim(7*sec, 1)}})},
		{"allow NaN limit", "limits[1].limit", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{lim(sec, 1), lim(min, math.NaN())}})},
		{"allow limit above 1e9", "limits[0].limit", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{lim(min, 2e9)}})},
		// bucket limits: bad in every mode alike, before the mode's refusal
		{"allow token, at beyond a year", "at", service.ErrInvalidValue, allow(al{At: now.Add(-367 * 24 * time.Hour), Key: "k", Limits: []service.Limit{token(1, sec)}})},
		{"allow token and window, at beyond the window", "at", service.ErrInvalidValue, allow(al{At: now.Add(-2 * min), Key: "k", Limits: []service.Limit{token(1, sec), lim(sec, 1)}})},
		{"allow token, bad key", "key", service.ErrInvalidKey, allow(al{Key: "\xff", Limits: []service.Limit{token(0, sec)}})},
		{"allow token, cost above 1e9", "cost", service.ErrInvalidValue, allow(al{Key: "k", Cost: f64(1e9 + 1), Limits: []service.Limit{token(1, sec)}})},
		{"allow token zero max", "limits[1].token.max", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{lim(sec, 1), token(0, -sec)}})},
		{"allow token negative max", "limits[0].token.max", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{token(-1, sec), lim(-sec, 1)}})},
		{"allow token NaN max", "limits[0].token.max", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{token(math.NaN(), sec)}})},
		{"allow token max above 1e9", "limits[0].token.max", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{token(2e9, sec)}})},
		{"allow token zero refill time", "limits[0].token.refill_time", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{token(1, 0)}})},
		{"allow token refill time above a year", "limits[0].token.refill_time", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{token(1, 367*24*time.Hour)}})},
		{"allow token NaN refill amount", "limits[0].token.refill_amount", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{{Kind: service.TokenKind, Token: service.TokenBucket{Max: 1, RefillTime: sec, RefillAmount: math.NaN()}}}})},
		{"allow leaky zero size", "limits[0].leaky.size", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{leaky(0, sec, 0)}})},
		{"allow leaky negative interval", "limits[0].leaky.interval", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{leaky(1, -sec, 0)}})},
		{"allow leaky drip below 1ns", "limits[0].leaky.size", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{leaky(1e9, sec/2, 0)}})},
		{"allow leaky negative wait timeout", "limits[0].leaky.wait_timeout", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{leaky(1, sec, -1)}})},
		{"allow leaky wait timeout above a minute", "limits[0].leaky.wait_timeout", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{leaky(1, sec, min+1)}})},
		{"allow fixed zero period", "limits[0].fixed.period", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{fixed(0, 0)}})},
		{"allow fixed Inf limit", "limits[0].fixed.limit", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{fixed(sec, math.Inf(1))}})},
		{"allow bucket with a window size", "limits[0].window_size", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{{Size: sec, Kind: service.FixedKind, Fixed: service.FixedBucket{Period: sec, Limit: 1}}}})},
		{"allow the same bucket twice", "limits[2].token", service.ErrInvalidLimit, allow(al{Key: "k", Limits: []service.Limit{token(1, sec), fixed(sec, 1), token(1, sec)}})},
	}
}

func token(max float64, refill time.Duration) service.Limit {
	return service.Limit{Kind: service.TokenKind, Token: service.TokenBucket{Max: max, RefillTime: refill}}
}

func leaky(size float64, interval, wait time.Duration) service.Limit {
	return service.Limit{Kind: service.LeakyKind, Leaky: service.LeakyBucket{Size: size, Interval: interval}, WaitTimeout: wait}
}

func fixed(period time.Duration, limit float64) service.Limit {
	return service.Limit{Kind: service.FixedKind, Fixed: service.FixedBucket{Period: period, Limit: limit}}
}

// TestFirstErrorSameInEveryMode is the acceptance test of the validation
// order: a bad request gets the same first error, field, reason and
// sentinel, in a local-only, a periodic and a synchronous namespace, and
// counts nothing.
func TestFirstErrorSameInEveryMode(t *testing.T) {
	for _, c := range badRequests() {
		t.Run(c.name, func(t *testing.T) {
			var first *service.FieldError
			for _, m := range modes {
				s, ns := newService(t, m.syncRate)
				err := c.call(s)
				var fe *service.FieldError
				if !errors.As(err, &fe) {
					t.Fatalf("%s: error %v (%T), want a *FieldError", m.name, err, err)
				}
				if fe.Field != c.field || !errors.Is(err, c.sentinel) {
					t.Errorf("%s: error %q wrapping %v, want field %q wrapping %v", m.name, err, fe.Err, c.field, c.sentinel)
				}
				if first == nil {
					first = fe
				} else if *fe != *first {
					t.Errorf("%s: error %+v\n%s: error %+v", m.name, *fe, modes[0].name, *first)
				}
				if n := ns.Stats().ActiveKeys + ns.Stats().ActiveBuckets; n != 0 {
					t.Errorf("%s: %d active keys and buckets after a rejected call, want 0", m.name, n)
				}
			}
		})
	}
}

// TestServedInEveryMode: a good request is served alike in every mode.
func TestServedInEveryMode(t *testing.T) {
	ctx := context.Background()
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			s, _ := newService(t, m.syncRate)
			rs, err := s.Increment(ctx, service.IncrementRequest{Key: "k", Value: f64(2)}, nil)
			if err != nil || len(rs) != 2 || rs[0].Rate != 2 || rs[1].Rate != 2 {
				t.Fatalf("Increment: %v, %v; want rates 2, 2", rs, err)
			}
			rs, err = s.SlidingWindow(ctx, service.RateRequest{Key: "k", WindowSize: min, CurDiff: 0.5, At: now.Add(-sec)}, nil)
			if err != nil || len(rs) != 1 || rs[0].Size != min {
				t.Fatalf("SlidingWindow: %v, %v", rs, err)
			}
			d, err := s.Allow(ctx, service.AllowRequest{Key: "k", Limits: []service.Limit{lim(sec, 3)}}, nil)
			if err != nil || !d.Allowed || d.Limits[0].Rate != 3 {
				t.Fatalf("Allow: %+v, %v; want allowed at rate 3", d, err)
			}
			d, err = s.Allow(ctx, service.AllowRequest{Key: "k", At: now.Add(sec), Limits: []service.Limit{lim(min, 3)}}, nil)
			if err != nil || d.Allowed {
				t.Fatalf("Allow over the limit: %+v, %v; want denied", d, err)
			}
		})
	}
}

func TestAtRange(t *testing.T) {
	s, _ := newService(t, -1)
	lo, hi, err := s.AtRange(service.SlidingWindow, "")
	if err != nil || !lo.Equal(now.Add(-min)) || !hi.Equal(now.Add(service.MaxFuture)) {
		t.Fatalf("AtRange = %v, %v, %v; want %v, %v", lo, hi, err, now.Add(-min), now.Add(service.MaxFuture))
	}
	for _, at := range []time.Time{lo, hi} {
		if _, err := s.Increment(context.Background(), service.IncrementRequest{At: at, Key: "k"}, nil); err != nil {
			t.Errorf("Increment at %v, an end of the range: %v", at, err)
		}
	}
	if _, _, err := s.AtRange(service.SlidingWindow, "nope"); !errors.Is(err, service.ErrUnknownNamespace) {
		t.Errorf("AtRange of an unknown namespace: %v, want ErrUnknownNamespace", err)
	}
}

func TestNewNeedsTheSyncersOfSharedNamespaces(t *testing.T) {
	_, ns := newService(t, 0)
	n, err := node.New([]node.Config{ns.Config()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := service.New(n); err == nil {
		t.Errorf("New without the syncer of synchronous %s: no error", ns)
	}
}

func TestBatch(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, -1)
	if _, err := s.Batch(service.MaxBatchItems + 1); !errors.Is(err, service.ErrInvalidValue) || err.(*service.FieldError).Field != "items" {
		t.Errorf("Batch(%d): %v, want an error on items", service.MaxBatchItems+1, err)
	}
	b, err := s.Batch(service.MaxBatchItems)
	if err != nil {
		t.Fatalf("Batch(%d): %v", service.MaxBatchItems, err)
	}
	if got := b.Sizes(""); got != 2 {
		t.Errorf("Sizes(\"\") = %d, want 2", got)
	}
	if got := b.Sizes("nope"); got != 0 {
		t.Errorf("Sizes(\"nope\") = %d, want 0", got)
	}
	// A bad item fails alone, and the namespace it named does not stick.
	for i, it := range []service.IncrementRequest{{Key: "a"}, {Namespace: "nope", Key: "a"}, {Key: ""}, {Namespace: "default", Key: "a"}} {
		_, err := b.Increment(ctx, it, nil)
		if bad := i == 1 || i == 2; (err != nil) != bad {
			t.Errorf("item %d: error %v, want one: %v", i, err, bad)
		}
	}
	d, err := b.Allow(ctx, service.AllowRequest{Key: "a", Limits: []service.Limit{lim(sec, 10)}}, nil)
	if err != nil || d.Limits[0].Rate != 3 {
		t.Errorf("Allow after two counted items: %+v, %v; want rate 3", d, err)
	}
}
