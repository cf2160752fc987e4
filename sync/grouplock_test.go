package sync_test

import (
	"context"
	"testing"
	"time"

	gosync "sync"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestGroupDecidedInTheStoreIsNoFallback: a group of queued Allows that
// the store decided counts no fallback, and the node's windows are then
// as stored: the next tick has nothing to push.
func TestGroupDecidedInTheStoreIsNoFallback(t *testing.T) {
	clock := fakeclock.New(start)
	f := memory.NewFaulty(memory.New())
	ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Minute}, Shared: true}, clock)
	if err != nil {
		t.Fatal(err)
	}
	m := new(fallbackCount)
	sy, err := clustersync.NewSyncer(ns, clustersync.Synchronous{}, f, clustersync.NewIncarnation("a"), clustersync.NewVersions(clock.Now), clustersync.Config{CallTimeout: time.Minute, NoJitter: true}, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 1e6}}}
	allow := func() {
		if _, err := sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil); err != nil {
			t.Error(err)
		}
	}
	f.Hang()
	var wg gosync.WaitGroup
	wg.Go(allow)
	waitUntil(t, "the first call is in the store", func() bool { return f.Waiting() == 1 })
	for range 3 {
		wg.Go(allow)
	}
	waitUntil(t, "the calls queue", func() bool { return sy.Queued("k") == 3 })
	f.Heal()
	wg.Wait()
	if got := f.Calls().Allow; got != 2 {
		t.Fatalf("%d store calls, want 2 (one, then a group of 3)", got)
	}
	if got := m.n.Load(); got != 0 {
		t.Errorf("%d fallbacks counted for calls the store decided", got)
	}
	pushes := func() int64 { c := f.Calls(); return c.Push + c.PushFetch }
	before := pushes()
	if err := sy.SyncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := pushes() - before; got != 0 {
		t.Errorf("the tick after pushed %d times, want nothing left to push", got)
	}
}

// TestResetBucketsAtLeavesTheKeyUnlocked: a bucket reset returns with the
// key's lock released, so the next call on the key is answered.
func TestResetBucketsAtLeavesTheKeyUnlocked(t *testing.T) {
	clock := fakeclock.New(start)
	a := newNode(t, "a", 0.1, memory.New(memory.WithClock(clock.Now)), clock, clustersync.Config{})
	token := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 4, RefillTime: time.Hour}}
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{token}}
	done := make(chan float64, 1)
	go func() {
		if _, err := a.sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil); err != nil {
			t.Error(err)
		}
		if err := a.sy.Calls().ResetBucketsAt(context.Background(), clock.Now(), "k", []ratelimit.Limit{token}); err != nil {
			t.Error(err)
		}
		d, err := a.sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil)
		if err != nil {
			t.Error(err)
		}
		done <- d.Limits[0].Remaining
	}()
	select {
	case left := <-done:
		if left != 3 {
			t.Errorf("%g tokens left after a reset and one take, want 3", left)
		}
	case <-time.After(10 * time.Second): // a bound on a deadlock, not a timing
		t.Fatal("a call after a bucket reset did not return in 10 s: the key's lock left held")
	}
}
