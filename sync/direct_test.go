package sync_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// allowStores are the three paths of a synchronous Allow: the store
// decides (GroupAllower), or one PushFetch or one Push and Fetch bring
// the others' totals before the node decides.
func allowStores() []struct {
	name  string
	store func(mem *memory.Store) clustersync.Store
} {
	return []struct {
		name  string
		store func(mem *memory.Store) clustersync.Store
	}{
		{"atomic", func(mem *memory.Store) clustersync.Store { return mem }},
		{"push fetch", func(mem *memory.Store) clustersync.Store {
			return recordingPushFetcher{&recordingStore{mem: mem, decides: true}}
		}},
		{"push then fetch", func(mem *memory.Store) clustersync.Store { return &recordingStore{mem: mem, decides: true} }},
	}
}

// TestSynchronousAllow: calls taking turns on several nodes admit exactly
// the limit, whether the store's Increments push and fetch in one call or
// two; what they admit (and, with CountRejected, what they deny) reaches
// the store by the call itself.
func TestSynchronousAllow(t *testing.T) {
	for _, st := range allowStores() {
		for _, countRejected := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/count_rejected=%v", st.name, countRejected), func(t *testing.T) {
				testSynchronousAllow(t, st.store, 3, countRejected)
			})
		}
	}
}

func testSynchronousAllow(t *testing.T, store func(*memory.Store) clustersync.Store, nodeCount int, countRejected bool) {
	clock := fakeclock.New(start)
	mem := memory.New()
	var nodes []testNode
	for i := range nodeCount {
		nodes = append(nodes, newNode(t, fmt.Sprintf("n%d", i), 0, store(mem), clock, clustersync.Config{}))
	}
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, CountRejected: countRejected,
		Limits: []ratelimit.Limit{{Size: time.Second, Limit: 100}, {Size: time.Minute, Limit: 10}}}
	allowed := 0
	for i := range 30 {
		d, err := nodes[i%nodeCount].sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed {
			allowed++
		}
		want := float64(min(i+1, 10))
		if countRejected {
			want = float64(i + 1)
		}
		if d.Allowed != (i < 10) || d.Limits[1].Rate != want {
			t.Errorf("call %d: allowed %v, minute rate %v; want %v, %v", i, d.Allowed, d.Limits[1].Rate, i < 10, want)
		}
	}
	if allowed != 10 {
		t.Errorf("admitted %d, want exactly 10", allowed)
	}
	want := int64(10)
	if countRejected {
		want = 30
	}
	ws := ratelimit.WindowStart(clock.Now().UnixNano(), time.Minute)
	if got, err := mem.Window(context.Background(), clustersync.WindowKey{Namespace: "api", Size: time.Minute, Start: ws, Key: "k"}); err != nil || got != want*ratelimit.Micro {
		t.Errorf("store holds %v hits (%v), want %d", float64(got)/ratelimit.Micro, err, want)
	}
	for i, n := range nodes {
		var tick node.Tick
		if n.ns.TakeTick(clock.Now(), &tick, node.PushWindows); len(tick.Push) != 0 {
			t.Errorf("node %d: %d windows dirty, want 0", i, len(tick.Push))
		}
	}
}

// TestSynchronousAllowStoreFails: a failed store call answers from local
// counts and leaves the windows it may have written dirty, so the
// background tick stores them.
func TestSynchronousAllowStoreFails(t *testing.T) {
	for _, st := range allowStores() {
		t.Run(st.name, func(t *testing.T) {
			clock := fakeclock.New(start)
			mem := memory.New()
			faulty := memory.NewFaulty(st.store(mem))
			n := newNode(t, "a", 0, faulty.Store(), clock, clustersync.Config{CallTimeout: 10 * time.Millisecond})
			req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 3}}}
			allow := func() bool {
				t.Helper()
				d, err := n.sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil)
				if err != nil {
					t.Fatal(err)
				}
				return d.Allowed
			}
			allow()
			faulty.Fail(nil)
			if !allow() || !allow() || allow() {
				t.Error("during the outage: want two more admitted from local counts, then denied")
			}
			faulty.Heal()
			if err := n.sy.SyncOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			ws := ratelimit.WindowStart(clock.Now().UnixNano(), time.Minute)
			if got, err := mem.Window(context.Background(), clustersync.WindowKey{Namespace: "api", Size: time.Minute, Start: ws, Key: "k"}); err != nil || got != 3*ratelimit.Micro {
				t.Errorf("store holds %v hits (%v) after the tick, want 3", float64(got)/ratelimit.Micro, err)
			}
		})
	}
}

// TestSynchronousRateAtCurDiff: an invalid cur_diff is reported as such.
func TestSynchronousRateAtCurDiff(t *testing.T) {
	n := newNode(t, "a", 0, memory.New(), fakeclock.New(start), clustersync.Config{})
	_, err := n.sy.Calls().RateAt(context.Background(), start, "k", 0, 2e9, nil)
	var fe *ratelimit.FieldError
	if !errors.As(err, &fe) || fe.Field != "cur_diff" || !errors.Is(err, ratelimit.ErrInvalidValue) {
		t.Errorf("RateAt with cur_diff 2e9: error %v, want a FieldError for cur_diff wrapping ErrInvalidValue", err)
	}
}

// BenchmarkSynchronousCall measures a synchronous call on an existing key
// against the in-memory store: the Syncer's own cost, allocations
// included.
func BenchmarkSynchronousCall(b *testing.B) {
	clock := fakeclock.New(start)
	n := newNode(b, "a", 0, memory.New(), clock, clustersync.Config{})
	ctx := context.Background()
	rates := make([]ratelimit.Rate, 0, 2)
	statuses := make([]ratelimit.LimitStatus, 0, 2)
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1e9}, {Size: time.Minute, Limit: 1e9}}}
	for _, bc := range []struct {
		name string
		call func() error
	}{
		{"IncrementAt", func() error { _, err := n.sy.Calls().IncrementAt(ctx, clock.Now(), "k", 0, 1, rates); return err }},
		{"RateAt", func() error { _, err := n.sy.Calls().RateAt(ctx, clock.Now(), "k", 0, 0, rates); return err }},
		{"AllowAt", func() error { _, err := n.sy.Calls().AllowAt(ctx, clock.Now(), req, statuses); return err }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.call(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSynchronousCallReadsTheOthers: a synchronous call brings back what
// the other nodes' calls stored, in its one PushFetch or in the Fetch
// after its Push: the rate it answers counts them, with no tick.
func TestSynchronousCallReadsTheOthers(t *testing.T) {
	for _, st := range allowStores()[1:] {
		t.Run(st.name, func(t *testing.T) {
			clock := fakeclock.New(start)
			store := st.store(memory.New())
			a := newNode(t, "a", 0, store, clock, clustersync.Config{})
			b := newNode(t, "b", 0, store, clock, clustersync.Config{})
			a.increment(t, "k", 3)
			rs := b.increment(t, "k", 1)
			if got := rs[len(rs)-1].Rate; got != 4 {
				t.Errorf("b's minute rate after a's 3 and its 1 = %v, want 4", got)
			}
		})
	}
}
