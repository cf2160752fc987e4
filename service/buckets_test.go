package service_test

import (
	"context"
	"errors"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestBucketsFailedPrecondition: the bucket limits a namespace cannot
// serve fail with ErrFailedPrecondition, single or in a batch, counting
// nothing: windows and buckets in one synchronous Allow, and buckets on a
// store that cannot hold them.
func TestBucketsFailedPrecondition(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, s *service.Service, ns *node.Namespace, field string, limits ...[]service.Limit) {
		t.Helper()
		b, _ := s.Batch(1)
		for _, limits := range limits {
			_, err := s.Allow(ctx, service.AllowRequest{Key: "k", Limits: limits}, nil)
			var fe *service.FieldError
			if !errors.Is(err, service.ErrFailedPrecondition) || !errors.As(err, &fe) || fe.Field != field {
				t.Errorf("Allow %v: %v, want ErrFailedPrecondition on %s", limits, err, field)
			}
			if _, err := b.Allow(ctx, service.AllowRequest{Key: "k", Limits: limits}, nil); !errors.Is(err, service.ErrFailedPrecondition) {
				t.Errorf("Batch.Allow %v: %v, want ErrFailedPrecondition", limits, err)
			}
		}
		if n := ns.Stats().ActiveKeys + ns.Stats().ActiveBuckets; n != 0 {
			t.Errorf("%d keys and buckets after refused calls, want 0", n)
		}
	}
	t.Run("synchronous windows and buckets", func(t *testing.T) {
		s, ns := newService(t, 0)
		check(t, s, ns, "limits", []service.Limit{lim(sec, 5), leaky(1, sec, 0)}, []service.Limit{fixed(sec, 1), lim(min, 5)})
	})
	for _, m := range modes[1:] {
		t.Run(m.name+" store without buckets", func(t *testing.T) {
			s, ns := newServiceOn(t, m.syncRate, windowsOnly{memory.New()})
			check(t, s, ns, "limits[0]", []service.Limit{token(1, sec)})
			check(t, s, ns, "limits[1]", []service.Limit{lim(sec, 5), leaky(1, sec, 0)})
		})
	}
}

// windowsOnly is a store that holds and decides windows only: no
// buckets, no leases.
type windowsOnly struct{ s *memory.Store }

func (w windowsOnly) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	return w.s.Push(ctx, inc, rows)
}

func (w windowsOnly) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	return w.s.Fetch(ctx, inc, keys, others)
}

func (w windowsOnly) Close() error { return w.s.Close() }

func (windowsOnly) Abilities() clustersync.Abilities { return clustersync.Decide }

func (w windowsOnly) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	return w.s.AllowGroup(ctx, req, allowed, others)
}

// TestBucketExactUnderConcurrency: 8 callers × 1,000 takes on a bucket
// of 100 with no refill admit exactly 100, with and without a window
// next to it.
func TestBucketExactUnderConcurrency(t *testing.T) {
	for name, limits := range map[string][]service.Limit{
		"token":          {token(100, time.Hour)},
		"leaky":          {leaky(100, time.Hour, 0)},
		"fixed":          {fixed(time.Hour, 100)},
		"window + token": {lim(min, 1e9), token(100, time.Hour)},
	} {
		t.Run(name, func(t *testing.T) {
			s, _ := newService(t, -1)
			var admitted atomic.Int64
			var wg gosync.WaitGroup
			for range 8 {
				wg.Go(func() {
					var buf [2]service.LimitStatus
					for range 1000 {
						d, err := s.Allow(context.Background(), service.AllowRequest{Key: "k", Limits: limits}, buf[:0])
						if err != nil {
							t.Error(err)
							return
						}
						if d.Allowed {
							admitted.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if n := admitted.Load(); n != 100 {
				t.Errorf("%d admitted, want 100", n)
			}
		})
	}
}

// sleepClock is a fake clock that sleeping moves.
type sleepClock struct {
	*fakeclock.Clock
	slept []time.Duration
}

func (c *sleepClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.slept = append(c.slept, d)
	c.Add(d)
	return nil
}

// TestLeakyWaitTimeout: refused only by leaky buckets whose waits fit,
// Allow waits once on the clock and decides again; with a token bucket
// refusing too, or the wait beyond wait_timeout, or ctx done, it does
// not.
func TestLeakyWaitTimeout(t *testing.T) {
	clock := &sleepClock{Clock: fakeclock.New(now)}
	n, err := node.New([]node.Config{node.DefaultConfig()}, clock)
	if err != nil {
		t.Fatal(err)
	}
	s, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	allow := func(ctx context.Context, key string, limits ...service.Limit) (service.Decision, error) {
		return s.Allow(ctx, service.AllowRequest{Key: key, Limits: limits}, nil)
	}
	// Two leaky buckets, drips of 1 s and 2 s, waits of 1.5 s and 3 s.
	l1, l2 := leaky(1, sec, 1500*time.Millisecond), leaky(1, 2*sec, 3*sec)
	for i, wantSlept := range []time.Duration{0, 2 * sec} {
		d, err := allow(ctx, "a", l1, l2)
		if err != nil || !d.Allowed {
			t.Fatalf("call %d: %+v, %v; want allowed", i, d, err)
		}
		if got := sum(clock.slept); got != wantSlept {
			t.Errorf("call %d: slept %v, want %v", i, clock.slept, wantSlept)
		}
	}
	// Drips of 1 s, but a wait of 0.5 s: refused without waiting.
	clock.slept = nil
	short := leaky(1, sec, sec/2)
	allow(ctx, "b", short)
	if d, err := allow(ctx, "b", short); err != nil || d.Allowed || d.Wait != 0 || len(clock.slept) != 0 {
		t.Errorf("short wait: %+v, %v, slept %v; want refused without sleeping", d, err, clock.slept)
	}
	// A token bucket refuses too: no wait.
	tok := token(1, time.Hour)
	allow(ctx, "c", l1, tok)
	if d, err := allow(ctx, "c", l1, tok); err != nil || d.Allowed || d.Wait != 0 || len(clock.slept) != 0 {
		t.Errorf("token refusing too: %+v, %v, slept %v; want refused without sleeping", d, err, clock.slept)
	}
	// ctx done during the wait.
	allow(ctx, "d", l1)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := allow(cctx, "d", l1); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled wait: %v, want context.Canceled", err)
	}
}

func sum(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s
}
