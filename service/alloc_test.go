package service_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/service"
)

// TestNoAllocation: a call on an existing key allocates nothing, single or
// in a batch, whatever the service adds to the engine.
func TestNoAllocation(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, 0.1)
	var rates [service.MaxWindowSizes]service.Rate
	var statuses [service.MaxLimits]service.LimitStatus
	limits := []service.Limit{lim(time.Second, 1e9), lim(time.Minute, 1e9)}
	b, _ := s.Batch(2)
	local, _ := newService(t, -1)
	observed := s.Observe(service.FrontGRPC, &countObserver{})
	kinds := []service.Limit{lim(time.Second, 1e9), token(1e9, time.Second), leaky(1e9, time.Second, 0), fixed(time.Second, 1e9)}
	for name, f := range map[string]func() error{
		"Allow with buckets": func() error {
			_, err := local.Allow(ctx, service.AllowRequest{Key: "k", Limits: kinds}, statuses[:0])
			return err
		},
		"Increment": func() error {
			_, err := s.Increment(ctx, service.IncrementRequest{Key: "k", At: now}, rates[:0])
			return err
		},
		"SlidingWindow": func() error {
			_, err := s.SlidingWindow(ctx, service.RateRequest{Key: "k", WindowSize: time.Second}, rates[:0])
			return err
		},
		"Allow": func() error {
			_, err := s.Allow(ctx, service.AllowRequest{Key: "k", Limits: limits}, statuses[:0])
			return err
		},
		"Allow observed": func() error {
			_, err := observed.Allow(ctx, service.AllowRequest{Key: "k", Limits: limits}, statuses[:0])
			return err
		},
		"Batch.Increment": func() error {
			_, err := b.Increment(ctx, service.IncrementRequest{Key: "k"}, rates[:0])
			return err
		},
		"Batch.Allow": func() error {
			_, err := b.Allow(ctx, service.AllowRequest{Key: "k", Limits: limits}, statuses[:0])
			return err
		},
	} {
		if err := f(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := testing.AllocsPerRun(100, func() { f() }); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, n)
		}
	}
}

// countObserver counts the decisions it is told of.
type countObserver struct{ n atomic.Int64 }

func (c *countObserver) Decided(service.Observed) { c.n.Add(1) }

// BenchmarkObserved is an Allow with and without an Observer: the
// report of a decision allocates nothing.
func BenchmarkObserved(b *testing.B) {
	ctx := context.Background()
	s, _ := newService(b, -1)
	var statuses [service.MaxLimits]service.LimitStatus
	limits := []service.Limit{lim(time.Second, 1e9), lim(time.Minute, 1e9)}
	obs := &countObserver{}
	for name, svc := range map[string]*service.Service{"bare": s, "observed": s.Observe(service.FrontGRPC, obs)} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				svc.Allow(ctx, service.AllowRequest{Key: "some-client-key", Limits: limits}, statuses[:0])
			}
		})
	}
	if obs.n.Load() == 0 {
		b.Fatal("no decision observed")
	}
}

func BenchmarkService(b *testing.B) {
	ctx := context.Background()
	s, _ := newService(b, -1)
	var rates [service.MaxWindowSizes]service.Rate
	var statuses [service.MaxLimits]service.LimitStatus
	limits := []service.Limit{lim(time.Second, 1e9), lim(time.Minute, 1e9)}
	b.Run("Increment", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Increment(ctx, service.IncrementRequest{Key: "some-client-key"}, rates[:0])
		}
	})
	b.Run("Allow", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Allow(ctx, service.AllowRequest{Key: "some-client-key", Limits: limits}, statuses[:0])
		}
	})
}
