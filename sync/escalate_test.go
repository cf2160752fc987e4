package sync_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// escalations counts a Syncer's escalated calls.
type escalations struct {
	clustersync.NopMetrics
	n atomic.Int64
}

func (e *escalations) Escalated(string) { e.n.Add(1) }

// plainStore hides every optional ability of a store (Cassandra's case:
// no GroupAllower).
type plainStore struct{ clustersync.Store }

func (plainStore) Abilities() clustersync.Abilities { return 0 }

// periodicPair is two periodic nodes (sync_rate 0.1 s) of one store; a
// counts its escalations.
func periodicPair(t *testing.T, store clustersync.Store, clock *fakeclock.Clock, cfg clustersync.Config) (a, b testNode, esc *escalations) {
	t.Helper()
	esc = new(escalations)
	mk := func(name string, m clustersync.Metrics) testNode {
		ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Second, time.Minute}, Shared: true}, clock)
		if err != nil {
			t.Fatal(err)
		}
		cfg := cfg
		cfg.NoJitter = true
		sy, err := clustersync.NewSyncer(ns, clustersync.Periodic{Period: 100 * time.Millisecond}, store, clustersync.NewIncarnation(name), clustersync.NewVersions(clock.Now), cfg, nil, m)
		if err != nil {
			t.Fatal(err)
		}
		return testNode{ns: ns, sy: sy}
	}
	return mk("a", esc), mk("b", nil), esc
}

func allowOne(t *testing.T, n testNode, key string, limit float64) ratelimit.Decision {
	t.Helper()
	req := ratelimit.AllowRequest{Key: key, Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: limit}}}
	d, err := n.sy.Calls().AllowAt(context.Background(), n.ns.Now(), req, nil)
	if err != nil {
		t.Fatalf("allow %q: %v", key, err)
	}
	return d
}

func incrementAt(t *testing.T, n testNode, key string, v float64) {
	t.Helper()
	if _, err := n.ns.IncrementAt(n.ns.Now(), key, 0, v, nil); err != nil {
		t.Fatal(err)
	}
}

func syncOnce(t *testing.T, n testNode) {
	t.Helper()
	if err := n.sy.SyncOnce(context.Background()); err != nil {
		t.Fatalf("SyncOnce: %v", err)
	}
}

// TestEscalateNearLimit: node a's view of b is one tick old. Near the
// limit a asks the store, which knows b's newest hits and refuses what a
// alone would admit; with escalation off a admits it. Far from the limit
// a decides alone, and a key a never fetched goes to the store first.
func TestEscalateNearLimit(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         clustersync.Config
		wantAllowed bool
		wantEsc     int64
	}{
		// Escalations: k new to a, k near the limit, far new to a.
		{"auto", clustersync.Config{}, false, 3},
		{"never", clustersync.Config{NoEscalate: true}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(start.Add(500 * time.Millisecond)) // half a second into a window
			mem := memory.New()
			a, b, esc := periodicPair(t, mem, clock, tc.cfg)
			if a.sy.Escalates() == tc.cfg.NoEscalate {
				t.Fatalf("Escalates() = %v with NoEscalate %v", a.sy.Escalates(), tc.cfg.NoEscalate)
			}
			incrementAt(t, b, "k", 60)
			syncOnce(t, b)
			// The first Allow on a key a never fetched: the store decides
			// (escalating), else a alone.
			if d := allowOne(t, a, "k", 100); !d.Allowed {
				t.Fatalf("first allow refused: %+v", d)
			}
			syncOnce(t, a) // a sees b's 60
			incrementAt(t, b, "k", 39)
			syncOnce(t, b) // the store: b 99, a 1
			// a's view: 61 + 1 ≤ 100, but b's 60 in half a window expect
			// 48 more within the blind time: near, so the store decides.
			d := allowOne(t, a, "k", 100)
			if d.Allowed != tc.wantAllowed {
				t.Errorf("allowed %v, want %v (rate %v)", d.Allowed, tc.wantAllowed, d.Limits[0].Rate)
			}
			if tc.wantAllowed {
				if got := d.Limits[0].Rate; got != 62 {
					t.Errorf("rate after a local decision %v, want a's stale view 62", got)
				}
			} else if got := d.Limits[0].Rate; got != 100 {
				t.Errorf("rate after the store refused %v, want 100 (b's 99 read back + a's 1)", got)
			}

			// Far from the limit: a decides alone.
			incrementAt(t, b, "far", 10)
			syncOnce(t, b)
			allowOne(t, a, "far", 100) // a key new to a
			syncOnce(t, a)
			before := esc.n.Load()
			for range 20 {
				if d := allowOne(t, a, "far", 100); !d.Allowed {
					t.Fatalf("far from the limit: refused %+v", d)
				}
			}
			if got := esc.n.Load() - before; got != 0 {
				t.Errorf("%d escalations far from the limit, want 0", got)
			}
			if got := esc.n.Load(); got != tc.wantEsc {
				t.Errorf("%d escalations, want %d", got, tc.wantEsc)
			}
		})
	}
}

// TestEscalateWithoutAtomicStore: on a store that cannot decide
// atomically (no Decide declared) nothing escalates, by default too: the
// node decides alone, as with escalate: never. (A config refuses
// escalate: auto asked of such a store.)
func TestEscalateWithoutAtomicStore(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         clustersync.Config
		wantAllowed bool
	}{
		{"default", clustersync.Config{}, true},
		{"never", clustersync.Config{NoEscalate: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(start.Add(500 * time.Millisecond))
			store := plainStore{memory.New()}
			a, b, esc := periodicPair(t, store, clock, tc.cfg)
			incrementAt(t, b, "k", 60)
			syncOnce(t, b)
			// Never fetched: a decides alone, knowing only its own hits.
			if d := allowOne(t, a, "k", 100); !d.Allowed {
				t.Fatalf("first allow refused: %+v", d)
			}
			syncOnce(t, a)
			d := allowOne(t, a, "k", 100) // 61 + 1 + 48 expected > 100
			if d.Allowed != tc.wantAllowed {
				t.Errorf("allowed %v, want %v", d.Allowed, tc.wantAllowed)
			}
			if !d.Allowed && d.RetryAfter <= 0 {
				t.Errorf("refused with retry after %v, want > 0", d.RetryAfter)
			}
			if got := esc.n.Load(); got != 0 {
				t.Errorf("%d escalations without an atomic store, want 0", got)
			}
		})
	}
}

// TestEscalateNotWhileStoreDown: after a failed store call the store is
// presumed down and the node decides alone, calling the store again only
// for one probe after CallTimeout.
func TestEscalateNotWhileStoreDown(t *testing.T) {
	clock := fakeclock.New(start.Add(500 * time.Millisecond))
	mem := memory.New()
	faulty := memory.NewFaulty(mem)
	const callTimeout = 20 * time.Millisecond
	a, _, esc := periodicPair(t, faulty, clock, clustersync.Config{CallTimeout: callTimeout})
	faulty.Fail(errors.New("down"))
	// Every call is for a new key: each would escalate.
	for i := range 10 {
		if d := allowOne(t, a, string(rune('a'+i)), 100); !d.Allowed {
			t.Fatalf("call %d refused while the store is down: %+v", i, d)
		}
	}
	if got := faulty.Calls().Allow; got != 1 {
		t.Errorf("store Allow calls while presumed down: %d, want 1", got)
	}
	if got := esc.n.Load(); got != 1 {
		t.Errorf("%d escalations while presumed down, want 1", got)
	}
	faulty.Heal()
	clock.Add(callTimeout)
	allowOne(t, a, "x", 100) // the probe
	allowOne(t, a, "y", 100)
	if got := faulty.Calls().Allow; got != 3 {
		t.Errorf("store Allow calls after the store came back: %d, want 3", got)
	}
}

// TestNewKeyFetchedInBackground: a key new to a running node gets the
// others' totals without waiting for the next tick (an hour away here).
func TestNewKeyFetchedInBackground(t *testing.T) {
	clock := fakeclock.New(start.Add(500 * time.Millisecond))
	mem := memory.New()
	mk := func(name string, cfg clustersync.Config) testNode {
		return newNode(t, name, 3600, mem, clock, cfg)
	}
	for _, tc := range []struct {
		name string
		cfg  clustersync.Config
		want float64
	}{
		{"auto", clustersync.Config{}, 15},
		{"never", clustersync.Config{NoEscalate: true}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := mk("a-"+tc.name, tc.cfg), mk("b-"+tc.name, tc.cfg)
			key := "new-" + tc.name
			b.increment(t, key, 10)
			syncOnce(t, b)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error)
			go func() { done <- a.sy.Run(ctx) }()
			defer func() { cancel(); <-done }()
			for last, _ := a.sy.Status(); last.IsZero(); last, _ = a.sy.Status() {
				time.Sleep(time.Millisecond) // the first tick, at once
			}
			a.increment(t, key, 5)
			deadline := time.Now().Add(10 * time.Second) // a wait, ended by the fetch
			got := a.minuteRate(t, key)
			for got != tc.want && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
				got = a.minuteRate(t, key)
			}
			if tc.want == 5 {
				time.Sleep(50 * time.Millisecond) // a fetch that should not come
				got = a.minuteRate(t, key)
			}
			if got != tc.want {
				t.Errorf("a's minute rate %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEscalateNewKeysAfterStart: keys never fetched go to the store
// always by default, or only for Config.EscalateNewKeys after the node
// starts, or never.
func TestEscalateNewKeysAfterStart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     clustersync.Config
		after   time.Duration
		wantEsc int64
	}{
		{"default, at start", clustersync.Config{}, 0, 1},
		{"default, a day later", clustersync.Config{}, 24 * time.Hour, 1},
		{"a minute, just before", clustersync.Config{EscalateNewKeys: time.Minute}, time.Minute - time.Millisecond, 1},
		{"a minute, after", clustersync.Config{EscalateNewKeys: time.Minute}, time.Minute, 0},
		{"never", clustersync.Config{EscalateNewKeys: -1}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(start)
			a, b, esc := periodicPair(t, memory.New(), clock, tc.cfg)
			clock.Add(tc.after)
			incrementAt(t, b, "k", 100)
			syncOnce(t, b)
			d := allowOne(t, a, "k", 100)
			if got := esc.n.Load(); got != tc.wantEsc {
				t.Errorf("%d escalations, want %d", got, tc.wantEsc)
			}
			// The store knows b's 100 and refuses; a alone, knowing only
			// its own hits, admits.
			if want := tc.wantEsc == 0; d.Allowed != want {
				t.Errorf("allowed %v, want %v", d.Allowed, want)
			}
		})
	}
}

// gatedFetches is the memory store whose Fetch, once armed, waits for the
// gate to open, and which records the keys of every Fetch.
type gatedFetches struct {
	*memory.Store
	armed   atomic.Bool
	waiting atomic.Int64
	gate    chan struct{}
	mu      gosync.Mutex
	batches []int // distinct keys per Fetch
}

func (g *gatedFetches) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	if g.armed.Load() {
		g.waiting.Add(1)
		<-g.gate
		distinct := map[string]bool{}
		for _, k := range keys {
			distinct[k.Key] = true
		}
		g.mu.Lock()
		g.batches = append(g.batches, len(distinct))
		g.mu.Unlock()
	}
	return g.Store.Fetch(ctx, inc, keys, others)
}

// TestNewKeysFetchedInBatches: the keys new to a running node that queue
// while a background fetch is in flight are read by the next fetches, at
// most FreshBatch keys each.
func TestNewKeysFetchedInBatches(t *testing.T) {
	clock := fakeclock.New(start.Add(500 * time.Millisecond))
	g := &gatedFetches{Store: memory.New(), gate: make(chan struct{})}
	a := newNode(t, "a", 3600, g, clock, clustersync.Config{TickTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.sy.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for last, _ := a.sy.Status(); last.IsZero(); last, _ = a.sy.Status() {
		time.Sleep(time.Millisecond) // the first tick, at once
	}
	g.armed.Store(true)
	a.increment(t, "first", 1)
	waitUntil(t, "the first new key's fetch is in flight", func() bool { return g.waiting.Load() == 1 })
	queued := 2*clustersync.FreshBatch + 1
	for i := range queued {
		a.increment(t, fmt.Sprint("new", i), 1)
	}
	close(g.gate)
	want := []int{1, clustersync.FreshBatch, clustersync.FreshBatch, 1}
	waitUntil(t, "the new keys are fetched", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.batches) >= len(want)
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	if !slices.Equal(g.batches, want) {
		t.Errorf("fetches of %v keys, want %v", g.batches, want)
	}
}
