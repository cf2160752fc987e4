package service_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/limiterd/limiterd/service"
)

// recorder keeps every decision it is told of.
type recorder struct{ got []service.Observed }

func (r *recorder) Decided(o service.Observed) { r.got = append(r.got, o) }

// TestObserverOncePerDecision: each Allow and Acquire decided is reported
// once, with its front, namespace, kind, answer and cost; a batch's items
// each on its own; a call that fails, a probe and the other calls not at
// all.
func TestObserverOncePerDecision(t *testing.T) {
	ctx := context.Background()
	base, _ := newService(t, -1)
	rec := &recorder{}
	s := base.Observe(service.FrontRESP, rec)
	one := func(v float64) *float64 { return &v }
	var st [service.MaxLimits]service.LimitStatus
	calls := []func() error{
		func() error { // allowed
			_, err := s.Allow(ctx, service.AllowRequest{Key: "a", Limits: []service.Limit{lim(time.Minute, 1)}}, st[:0])
			return err
		},
		func() error { // denied
			_, err := s.Allow(ctx, service.AllowRequest{Key: "a", Limits: []service.Limit{lim(time.Minute, 1)}}, st[:0])
			return err
		},
		func() error { // never: the cost is over the limit
			_, err := s.Allow(ctx, service.AllowRequest{Key: "b", Cost: one(5), Limits: []service.Limit{lim(time.Minute, 1)}}, st[:0])
			return err
		},
		func() error {
			_, err := s.Allow(ctx, service.AllowRequest{Key: "t", Limits: []service.Limit{token(2, time.Minute)}}, st[:0])
			return err
		},
		func() error { // a probe: not a decision
			_, err := s.Allow(ctx, service.AllowRequest{Key: "t", Cost: one(0), Probe: true, Limits: []service.Limit{token(2, time.Minute)}}, st[:0])
			return err
		},
		func() error {
			_, err := s.Allow(ctx, service.AllowRequest{Key: "m", Limits: []service.Limit{lim(time.Minute, 5), fixed(time.Minute, 5)}}, st[:0])
			return err
		},
		func() error {
			_, err := s.Acquire(ctx, service.AcquireRequest{Key: "j", Limit: 1, TTL: time.Minute})
			return err
		},
		func() error {
			_, err := s.Increment(ctx, service.IncrementRequest{Key: "i"}, nil)
			return err
		},
		func() error {
			b, _ := s.Batch(3)
			for _, key := range []string{"x", "y"} {
				if _, err := b.Allow(ctx, service.AllowRequest{Key: key, Limits: []service.Limit{leaky(5, time.Minute, 0)}}, st[:0]); err != nil {
					return err
				}
			}
			_, err := b.Allow(ctx, service.AllowRequest{Namespace: "nosuch", Key: "z", Limits: []service.Limit{lim(time.Minute, 1)}}, st[:0])
			if err == nil {
				t.Error("an Allow in an unknown namespace: no error")
			}
			return nil
		},
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	want := []service.Observed{
		{Front: service.FrontRESP, Namespace: "default", Kind: service.SlidingWindow, Allowed: true, Cost: 1},
		{Front: service.FrontRESP, Namespace: "default", Kind: service.SlidingWindow, Cost: 1},
		{Front: service.FrontRESP, Namespace: "default", Kind: service.SlidingWindow, Never: true, Cost: 5},
		{Front: service.FrontRESP, Namespace: "default", Kind: service.TokenKind, Allowed: true, Cost: 1},
		{Front: service.FrontRESP, Namespace: "default", Kind: service.MixedKind, Allowed: true, Cost: 1},
		{Front: service.FrontRESP, Namespace: "default", Kind: service.ConcurrencyKind, Allowed: true, Cost: 1},
		{Front: service.FrontRESP, Namespace: "default", Kind: service.LeakyKind, Allowed: true, Cost: 1},
		{Front: service.FrontRESP, Namespace: "default", Kind: service.LeakyKind, Allowed: true, Cost: 1},
	}
	if !slices.Equal(rec.got, want) {
		t.Errorf("observed\n%+v\nwant\n%+v", rec.got, want)
	}
	// The service it was made from reports to nobody.
	if _, err := base.Allow(ctx, service.AllowRequest{Key: "q", Limits: []service.Limit{lim(time.Minute, 1)}}, st[:0]); err != nil || len(rec.got) != len(want) {
		t.Errorf("the unobserved service: %v, %d decisions reported", err, len(rec.got)-len(want))
	}
}
