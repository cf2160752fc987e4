package sync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestResetAt: a reset at one node reads 0 there at once and, after one
// tick of each, at the other node, though both had pushed their hits and
// the resetting node had counted more since its last push; hits after it
// count; a store that fails it leaves the node reset and says
// ErrUnavailable.
func TestResetAt(t *testing.T) {
	clock := fakeclock.New(start)
	store := memory.New(memory.WithClock(clock.Now))
	a := newNode(t, "a", 0.1, store, clock, clustersync.Config{})
	b := newNode(t, "b", 0.1, store, clock, clustersync.Config{})
	nodes := []testNode{a, b}
	a.increment(t, "k", 3)
	b.increment(t, "k", 4)
	syncAll(t, nodes)
	syncAll(t, nodes)
	a.increment(t, "k", 2) // not pushed yet
	if got := a.minuteRate(t, "k"); got != 9 {
		t.Fatalf("rate before the reset = %g, want 9", got)
	}
	if err := a.sy.ResetAt(context.Background(), clock.Now(), "k"); err != nil {
		t.Fatal(err)
	}
	if got := a.minuteRate(t, "k"); got != 0 {
		t.Errorf("the resetting node's rate = %g, want 0", got)
	}
	syncAll(t, nodes)
	for i, n := range nodes {
		if got := n.minuteRate(t, "k"); got != 0 {
			t.Errorf("node %d: rate one tick after the reset = %g, want 0", i, got)
		}
	}
	b.increment(t, "k", 1)
	syncAll(t, nodes)
	syncAll(t, nodes)
	for i, n := range nodes {
		if got := n.minuteRate(t, "k"); got != 1 {
			t.Errorf("node %d: rate after 1 hit since the reset = %g, want 1", i, got)
		}
	}

	faulty := memory.NewFaulty(memory.New(memory.WithClock(clock.Now)))
	c := newNode(t, "c", 0.1, faulty, clock, clustersync.Config{TickTimeout: time.Second})
	c.increment(t, "k", 5)
	faulty.Fail(errors.New("down"))
	if err := c.sy.ResetAt(context.Background(), clock.Now(), "k"); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("a reset through a failing store: %v, want ErrUnavailable", err)
	}
	if got := c.minuteRate(t, "k"); got != 0 {
		t.Errorf("rate after a reset the store failed = %g, want 0 on the node", got)
	}
}
