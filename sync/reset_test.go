package sync_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/ratelimit"
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
	if err := a.sy.Calls().ResetAt(context.Background(), clock.Now(), "k"); err != nil {
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
	if err := c.sy.Calls().ResetAt(context.Background(), clock.Now(), "k"); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("a reset through a failing store: %v, want ErrUnavailable", err)
	}
	if got := c.minuteRate(t, "k"); got != 0 {
		t.Errorf("rate after a reset the store failed = %g, want 0 on the node", got)
	}
}

// TestResetBucketsAt: a bucket reset at one node makes the bucket new
// there at once and, after one tick, at the other node, which had taken
// its share; what the other node took but had not sent when the store
// took the reset counts on top of the new bucket; a store that fails it
// leaves the node reset and says ErrUnavailable.
func TestResetBucketsAt(t *testing.T) {
	clock := fakeclock.New(start)
	store := memory.New(memory.WithClock(clock.Now))
	a := newNode(t, "a", 0.1, store, clock, clustersync.Config{})
	b := newNode(t, "b", 0.1, store, clock, clustersync.Config{})
	nodes := []testNode{a, b}
	token := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 4, RefillTime: time.Hour}}
	take := func(n testNode) ratelimit.Decision {
		t.Helper()
		d, err := n.sy.Calls().AllowAt(context.Background(), clock.Now(), ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{token}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// left is what a read (a take of 0) says is left at node n.
	left := func(n testNode) float64 {
		t.Helper()
		d, err := n.sy.Calls().AllowAt(context.Background(), clock.Now(), ratelimit.AllowRequest{Key: "k", Cost: 0, Limits: []ratelimit.Limit{token}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d.Limits[0].Remaining
	}
	take(a)
	take(a)
	take(b)
	syncAll(t, nodes)
	syncAll(t, nodes)
	if got := left(a); got != 1 {
		t.Fatalf("tokens left before the reset = %g, want 1", got)
	}
	take(b) // not sent yet
	if err := a.sy.Calls().ResetBucketsAt(context.Background(), clock.Now(), "k", []ratelimit.Limit{token}); err != nil {
		t.Fatal(err)
	}
	if got := left(a); got != 4 {
		t.Errorf("the resetting node's tokens = %g, want 4", got)
	}
	syncAll(t, nodes)
	if got := left(b); got != 3 {
		t.Errorf("the other node's tokens one tick after the reset = %g, want 3 (its take not sent before it counts)", got)
	}
	syncAll(t, nodes)
	if got := left(a); got != 3 {
		t.Errorf("the resetting node's tokens once the other's take reached it = %g, want 3", got)
	}

	faulty := memory.NewFaulty(memory.New(memory.WithClock(clock.Now)))
	c := newNode(t, "c", 0.1, faulty, clock, clustersync.Config{TickTimeout: time.Second, CallTimeout: time.Second})
	take(c)
	faulty.Fail(errors.New("down"))
	if err := c.sy.Calls().ResetBucketsAt(context.Background(), clock.Now(), "k", []ratelimit.Limit{token}); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("a reset through a failing store: %v, want ErrUnavailable", err)
	}
	if got := left(c); got != 4 {
		t.Errorf("tokens after a reset the store failed = %g, want 4 on the node", got)
	}
}

// TestClearLeasesAt: a reset of a key's leases at one node frees its
// own at once and every lease the store holds; the node that granted one
// drops it at its next tick and acquires under the limit again; a store
// that fails it says ErrUnavailable, the node's own leases freed.
func TestClearLeasesAt(t *testing.T) {
	clock := fakeclock.New(start)
	store := memory.New(memory.WithClock(clock.Now))
	a := newNode(t, "a", 0.1, store, clock, clustersync.Config{})
	b := newNode(t, "b", 0.1, store, clock, clustersync.Config{})
	nodes := []testNode{a, b}
	acquire := func(n testNode) bool {
		t.Helper()
		g, err := n.sy.Calls().AcquireLease(context.Background(), clock.Now(), "job", 2, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return g.OK
	}
	if !acquire(a) || !acquire(b) {
		t.Fatal("a lease under the limit is refused")
	}
	syncAll(t, nodes)
	syncAll(t, nodes)
	if acquire(a) {
		t.Fatal("a third lease of 2 is granted")
	}
	if ok, err := b.sy.Calls().ClearLeasesAt(context.Background(), clock.Now(), "job"); err != nil || !ok {
		t.Fatalf("ClearLeasesAt = %v, %v; want true, nil", ok, err)
	}
	if !acquire(b) {
		t.Error("the resetting node refuses a lease right after the reset")
	}
	syncAll(t, nodes)
	if !acquire(a) {
		t.Error("the other node refuses a lease one tick after the reset")
	}
	syncAll(t, nodes)
	syncAll(t, nodes)
	if acquire(a) || acquire(b) {
		t.Error("a third lease of 2 is granted after the reset")
	}

	faulty := memory.NewFaulty(memory.New(memory.WithClock(clock.Now)))
	c := newNode(t, "c", 0.1, faulty, clock, clustersync.Config{TickTimeout: time.Second, CallTimeout: time.Second})
	if !acquire(c) {
		t.Fatal("a lease is refused")
	}
	faulty.Fail(errors.New("down"))
	if _, err := c.sy.Calls().ClearLeasesAt(context.Background(), clock.Now(), "job"); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("a reset of leases through a failing store: %v, want ErrUnavailable", err)
	}
	if !acquire(c) || !acquire(c) {
		t.Error("the node's own leases are not freed by a reset the store failed")
	}
}

// resetRows records the rows pushed by reset writers.
type resetRows struct {
	*memory.Store
	rows []clustersync.Row
}

func (r *resetRows) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	if strings.Contains(inc, "/reset") {
		r.rows = append(r.rows, rows...)
	}
	return r.Store.Push(ctx, inc, rows)
}

// TestResetRowsKeptAsWindows: a reset's rows are kept as long as the
// windows they cancel: two window sizes and two sync periods past the
// window's start.
func TestResetRowsKeptAsWindows(t *testing.T) {
	clock := fakeclock.New(start)
	rec := &resetRows{Store: memory.New()}
	a := newNode(t, "a", 0.1, rec, clock, clustersync.Config{})
	a.increment(t, "k", 3)
	syncAll(t, []testNode{a})
	if err := a.sy.Calls().ResetAt(context.Background(), clock.Now(), "k"); err != nil {
		t.Fatal(err)
	}
	if len(rec.rows) == 0 {
		t.Fatal("the reset pushed no rows")
	}
	for _, r := range rec.rows {
		if want := time.Unix(0, r.Start).Add(2*r.Size + 200*time.Millisecond); !r.ExpireAt.Equal(want) {
			t.Errorf("reset row of the %v window from %v kept until %v, want %v", r.Size, time.Unix(0, r.Start), r.ExpireAt, want)
		}
	}
}

// TestClearLeasesAtReportsWhetherAnyWasFreed: a reset of a key's leases
// reports ok when it freed one, here or in the store, and not when the
// key had none.
func TestClearLeasesAtReportsWhetherAnyWasFreed(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New()
	a := newLeaseNode(t, "a", 1, "", mem, clock)
	b := newLeaseNode(t, "b", 1, "", mem, clock)
	if ok, err := a.sy.Calls().ClearLeasesAt(context.Background(), clock.Now(), "none"); err != nil || ok {
		t.Errorf("a reset of a key without leases: ok %v, %v; want not ok", ok, err)
	}
	a.acquire(t, "mine", 2)
	if ok, err := a.sy.Calls().ClearLeasesAt(context.Background(), clock.Now(), "mine"); err != nil || !ok {
		t.Errorf("a reset of a key with a lease of this node's: ok %v, %v; want ok", ok, err)
	}
	b.acquire(t, "theirs", 2)
	syncAll(t, []testNode{b})
	if ok, err := a.sy.Calls().ClearLeasesAt(context.Background(), clock.Now(), "theirs"); err != nil || !ok {
		t.Errorf("a reset of a key with another node's lease in the store: ok %v, %v; want ok", ok, err)
	}

	// A store that fails: ok says what the node freed of its own.
	faulty := memory.NewFaulty(memory.New())
	c := newLeaseNode(t, "c", 1, "", faulty, clock)
	c.acquire(t, "mine", 2)
	faulty.Fail(nil)
	if ok, err := c.sy.Calls().ClearLeasesAt(context.Background(), clock.Now(), "mine"); !errors.Is(err, clustersync.ErrUnavailable) || !ok {
		t.Errorf("a reset through a failing store of a key with a lease of this node's: ok %v, %v; want ok and ErrUnavailable", ok, err)
	}
	if ok, err := c.sy.Calls().ClearLeasesAt(context.Background(), clock.Now(), "none"); !errors.Is(err, clustersync.ErrUnavailable) || ok {
		t.Errorf("a reset through a failing store of a key without leases: ok %v, %v; want not ok and ErrUnavailable", ok, err)
	}
}
