package sync_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/config"
	"github.com/limiterd/limiterd/ratelimit"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// start is 10 s into a minute, so one-minute windows hold every check.
var start = time.Unix(1_800_000_000, 0).Truncate(time.Minute).Add(10 * time.Second)

type testNode struct {
	ns *node.Namespace
	sy *clustersync.Syncer
}

func newNode(t testing.TB, name string, syncRate float64, store clustersync.Store, clock node.Clock, cfg clustersync.Config) testNode {
	t.Helper()
	mode := modeOf(t, syncRate)
	ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Second, time.Minute}, Shared: shared(mode)}, clock)
	if err != nil {
		t.Fatal(err)
	}
	tn := testNode{ns: ns}
	if shared(mode) {
		cfg.NoJitter = true
		tn.sy, err = clustersync.NewSyncer(ns, mode, store, clustersync.NewIncarnation(name), clustersync.NewVersions(clock.Now), cfg, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	return tn
}

func (n testNode) increment(t testing.TB, key string, v float64) []ratelimit.Rate {
	t.Helper()
	var rs []ratelimit.Rate
	var err error
	if n.sy != nil && n.sy.Mode() == clustersync.Mode(clustersync.Synchronous{}) {
		rs, err = n.sy.Calls().IncrementAt(context.Background(), n.ns.Now(), key, 0, v, nil)
	} else {
		rs, err = n.ns.IncrementAt(n.ns.Now(), key, 0, v, nil)
	}
	if err != nil {
		t.Fatalf("increment %q: %v", key, err)
	}
	return rs
}

func (n testNode) minuteRate(t testing.TB, key string) float64 {
	t.Helper()
	rs, err := n.ns.RateAt(n.ns.Now(), key, time.Minute, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rs[0].Rate
}

func syncAll(t testing.TB, nodes []testNode) {
	t.Helper()
	for _, n := range nodes {
		if err := n.sy.SyncOnce(context.Background()); err != nil {
			t.Fatalf("SyncOnce: %v", err)
		}
	}
}

func TestPeriodicConverges(t *testing.T) {
	clock := fakeclock.New(start)
	store := memory.New()
	var nodes []testNode
	for i := range 3 {
		nodes = append(nodes, newNode(t, fmt.Sprintf("n%d", i), 0.1, store, clock, clustersync.Config{}))
	}
	exact := map[string]float64{}
	for i := range 300 {
		key := fmt.Sprintf("k%d", i%7)
		v := 0.5 + float64(i%3)
		nodes[i%3].increment(t, key, v)
		exact[key] += v
	}
	// Two rounds: every node pushes, then every node fetches what all pushed.
	syncAll(t, nodes)
	syncAll(t, nodes)
	for key, want := range exact {
		for i, n := range nodes {
			if got := n.minuteRate(t, key); got != want {
				t.Errorf("node %d key %s: rate = %v, want %v", i, key, got, want)
			}
		}
		if got, _ := store.Window(context.Background(), clustersync.WindowKey{Namespace: "api", Size: time.Minute, Start: ratelimit.WindowStart(start.UnixNano(), time.Minute), Key: key}); float64(got)/ratelimit.Micro != want {
			t.Errorf("store window %s = %v, want %v", key, float64(got)/ratelimit.Micro, want)
		}
	}
}

func TestSynchronousEveryAnswerExact(t *testing.T) {
	clock := fakeclock.New(start)
	store := memory.New()
	var nodes []testNode
	for i := range 3 {
		nodes = append(nodes, newNode(t, fmt.Sprintf("n%d", i), 0, store, clock, clustersync.Config{}))
	}
	total := 0.0
	for i := range 90 {
		total++
		rs := nodes[i%3].increment(t, "k", 1)
		if got := rs[1].Rate; got != total {
			t.Fatalf("call %d on node %d: rate = %v, want %v", i, i%3, got, total)
		}
	}
}

func TestLocalOnlyStaysLocal(t *testing.T) {
	clock := fakeclock.New(start)
	a := newNode(t, "a", -1, nil, clock, clustersync.Config{})
	b := newNode(t, "b", -1, nil, clock, clustersync.Config{})
	a.increment(t, "k", 5)
	if got := b.minuteRate(t, "k"); got != 0 {
		t.Fatalf("local-only node b sees %v, want 0", got)
	}
	if got := a.minuteRate(t, "k"); got != 5 {
		t.Fatalf("node a rate = %v, want 5", got)
	}
}

func TestRestartKeepsEarlierHits(t *testing.T) {
	clock := fakeclock.New(start)
	store := memory.New()
	a := newNode(t, "a", 0.1, store, clock, clustersync.Config{})
	b := newNode(t, "b", 0.1, store, clock, clustersync.Config{})
	a.increment(t, "k", 10)
	syncAll(t, []testNode{a})
	// a restarts: a new incarnation with empty memory.
	a = newNode(t, "a", 0.1, store, clock, clustersync.Config{})
	a.increment(t, "k", 1)
	b.increment(t, "k", 2)
	syncAll(t, []testNode{a, b})
	syncAll(t, []testNode{a, b})
	for name, n := range map[string]testNode{"a": a, "b": b} {
		if got := n.minuteRate(t, "k"); got != 13 {
			t.Errorf("node %s rate = %v, want 13", name, got)
		}
	}
}

func TestStoreHangsIncrementsContinue(t *testing.T) {
	for _, syncRate := range []float64{0.1, 0} {
		t.Run(fmt.Sprintf("sync_rate=%v", syncRate), func(t *testing.T) {
			clock := fakeclock.New(start)
			mem := memory.New()
			faulty := memory.NewFaulty(mem)
			n := newNode(t, "a", syncRate, faulty, clock, clustersync.Config{CallTimeout: 2 * time.Millisecond, TickTimeout: 20 * time.Millisecond})
			faulty.Hang()
			var wg gosync.WaitGroup
			for g := range 50 {
				wg.Go(func() {
					for range 20 {
						n.increment(t, fmt.Sprintf("k%d", g%5), 1)
					}
				})
			}
			wg.Wait()
			if err := n.sy.SyncOnce(context.Background()); err == nil {
				t.Fatal("SyncOnce against a hanging store succeeded")
			}
			if got := n.minuteRate(t, "k0"); got != 200 {
				t.Fatalf("local rate during outage = %v, want 200", got)
			}
			faulty.Heal()
			if err := n.sy.SyncOnce(context.Background()); err != nil {
				t.Fatalf("SyncOnce after heal: %v", err)
			}
			ws := ratelimit.WindowStart(start.UnixNano(), time.Minute)
			for k := range 5 {
				key := fmt.Sprintf("k%d", k)
				got, err := mem.Window(context.Background(), clustersync.WindowKey{Namespace: "api", Size: time.Minute, Start: ws, Key: key})
				if err != nil || got != 200*ratelimit.Micro {
					t.Errorf("store %s = %v (%v), want exactly 200 hits", key, float64(got)/ratelimit.Micro, err)
				}
			}
		})
	}
}

func TestShutdownPushesEverything(t *testing.T) {
	clock := fakeclock.New(start)
	store := memory.New()
	n := newNode(t, "a", 30, store, clock, clustersync.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- n.sy.Run(ctx) }()
	for i := range 100 {
		n.increment(t, fmt.Sprintf("k%d", i%10), 1)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	ws := ratelimit.WindowStart(start.UnixNano(), time.Second)
	for i := range 10 {
		got, _ := store.Window(context.Background(), clustersync.WindowKey{Namespace: "api", Size: time.Second, Start: ws, Key: fmt.Sprintf("k%d", i)})
		if got != 10*ratelimit.Micro {
			t.Errorf("k%d stored %v, want 10", i, float64(got)/ratelimit.Micro)
		}
	}
}

func TestVersionsOnlyGrow(t *testing.T) {
	clock := fakeclock.New(start)
	v := clustersync.NewVersions(clock.Now)
	a := v.Next()
	clock.Add(-time.Hour) // the clock steps back
	if b := v.Next(); b <= a {
		t.Fatalf("version after clock step back = %d, want > %d", b, a)
	}
}

func BenchmarkTick100kDirty(b *testing.B) {
	clock := fakeclock.New(start)
	store := memory.New()
	n := newNode(b, "a", 1, store, clock, clustersync.Config{})
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for _, k := range keys {
			n.ns.IncrementAt(n.ns.Now(), k, time.Second, 1, nil)
		}
		b.StartTimer()
		if err := n.sy.SyncOnce(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(keys))*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
}

// recordingStore records which windows a tick pushes and fetches; it is
// not a PushFetcher (recordingPushFetcher is).
type recordingStore struct {
	mem *memory.Store
	// decides declares the memory store's atomic decisions, which a
	// synchronous namespace needs.
	decides  bool
	mu       gosync.Mutex
	pushed   []clustersync.WindowKey // by Push or PushFetch
	readBack []clustersync.WindowKey // by PushFetch
	fetched  []clustersync.WindowKey // by Fetch
}

func (r *recordingStore) Window(ctx context.Context, k clustersync.WindowKey) (int64, error) {
	return r.mem.Window(ctx, k)
}

func (r *recordingStore) Close() error { return r.mem.Close() }

func (r *recordingStore) Abilities() clustersync.Abilities {
	if r.decides {
		return clustersync.Window | clustersync.Decide
	}
	return clustersync.Window
}

func (r *recordingStore) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	return r.mem.AllowGroup(ctx, req, allowed, others)
}

func (r *recordingStore) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	r.mu.Lock()
	for _, row := range rows {
		r.pushed = append(r.pushed, row.WindowKey)
	}
	r.mu.Unlock()
	return r.mem.Push(ctx, inc, rows)
}

func (r *recordingStore) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	r.mu.Lock()
	r.fetched = append(r.fetched, keys...)
	r.mu.Unlock()
	return r.mem.Fetch(ctx, inc, keys, others)
}

type recordingPushFetcher struct{ *recordingStore }

func (r recordingPushFetcher) Abilities() clustersync.Abilities {
	return r.recordingStore.Abilities() | clustersync.PushFetch
}

func (r recordingPushFetcher) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	r.mu.Lock()
	for _, row := range rows {
		r.pushed = append(r.pushed, row.WindowKey)
		r.readBack = append(r.readBack, row.WindowKey)
	}
	r.mu.Unlock()
	return r.mem.PushFetch(ctx, inc, rows, others)
}

func (r *recordingStore) reset() {
	r.mu.Lock()
	r.pushed, r.readBack, r.fetched = nil, nil, nil
	r.mu.Unlock()
}

// TestTickFetchesDirtyWindowsOnce checks that on a PushFetcher a tick reads
// the others' totals of every interest window exactly once: the pushed
// ones through PushFetch, only the rest through Fetch. Without PushFetch
// every interest window is fetched.
func TestTickFetchesDirtyWindowsOnce(t *testing.T) {
	for _, withPF := range []bool{true, false} {
		t.Run(fmt.Sprintf("pushfetch=%v", withPF), func(t *testing.T) {
			clock := fakeclock.New(start)
			mem := memory.New()
			rec := &recordingStore{mem: mem}
			var store clustersync.Store = rec
			if withPF {
				store = recordingPushFetcher{rec}
			}
			a := newNode(t, "a", 0.1, store, clock, clustersync.Config{BatchSize: 7})
			b := newNode(t, "b", 0.1, mem, clock, clustersync.Config{})
			// Keys 0–19 are counted and pushed, then only the even ones
			// change: the odd ones are in the interest set but not dirty.
			for i := range 20 {
				a.increment(t, fmt.Sprintf("k%d", i), 1)
				b.increment(t, fmt.Sprintf("k%d", i), 2)
			}
			syncAll(t, []testNode{a, b})
			for i := 0; i < 20; i += 2 {
				a.increment(t, fmt.Sprintf("k%d", i), 1)
			}
			b.increment(t, "k1", 4)
			syncAll(t, []testNode{b})
			rec.reset()
			syncAll(t, []testNode{a})

			// 20 keys × 2 sizes × (current, previous) windows of interest;
			// the even keys' current windows of both sizes are dirty.
			count := func(ks []clustersync.WindowKey) map[clustersync.WindowKey]int {
				m := map[clustersync.WindowKey]int{}
				for _, k := range ks {
					m[k]++
				}
				return m
			}
			pushed, readBack, fetched := count(rec.pushed), count(rec.readBack), count(rec.fetched)
			if len(rec.pushed) != 20 || len(pushed) != 20 {
				t.Fatalf("pushed %d rows (%d windows), want the 20 dirty windows once", len(rec.pushed), len(pushed))
			}
			interest := 0
			for k, n := range fetched {
				if n != 1 {
					t.Errorf("window %v fetched %d times", k, n)
				}
				if withPF && readBack[k] > 0 {
					t.Errorf("window %v read back by PushFetch and fetched again", k)
				}
				interest++
			}
			if withPF {
				interest += len(readBack)
				for k := range pushed {
					if readBack[k] != 1 {
						t.Errorf("pushed window %v read back %d times, want once", k, readBack[k])
					}
				}
			}
			if interest != 80 {
				t.Errorf("%d interest windows read, want 80", interest)
			}
			// And a's view is right: its own hits plus b's.
			if got := a.minuteRate(t, "k0"); got != 4 {
				t.Errorf("k0 rate on a = %v, want 4", got)
			}
			if got := a.minuteRate(t, "k1"); got != 7 {
				t.Errorf("k1 rate on a = %v, want 7", got)
			}
		})
	}
}

// TestSynchronousOutageFailsFast: once a synchronous call has failed, the
// calls of the next CallTimeout answer from local counts without waiting
// for the store; then one call probes it, and once it answers the calls go
// to it again. Nothing is lost: the background tick pushes the rest.
func TestSynchronousOutageFailsFast(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New()
	faulty := memory.NewFaulty(mem)
	const callTimeout = 20 * time.Millisecond
	n := newNode(t, "a", 0, faulty, clock, clustersync.Config{CallTimeout: callTimeout, TickTimeout: time.Second})
	calls := func() int64 { return faulty.Calls().PushFetch }

	faulty.Hang()
	n.increment(t, "k", 1) // waits callTimeout, then answers locally
	if got := calls(); got != 1 {
		t.Fatalf("store calls = %d, want 1", got)
	}
	for range 1000 {
		n.increment(t, "k", 1)
	}
	if got := calls(); got != 1 {
		t.Fatalf("store calls while presumed down = %d, want still 1", got)
	}
	if got := n.minuteRate(t, "k"); got != 1001 {
		t.Fatalf("local rate = %v, want 1001", got)
	}

	// Still down after callTimeout: one probe, which fails and renews.
	clock.Add(callTimeout)
	n.increment(t, "k", 1)
	n.increment(t, "k", 1)
	if got := calls(); got != 2 {
		t.Fatalf("store calls after callTimeout = %d, want 2 (one probe)", got)
	}

	faulty.Heal()
	clock.Add(callTimeout)
	n.increment(t, "k", 1) // the probe succeeds
	n.increment(t, "k", 1)
	if got := calls(); got != 4 {
		t.Fatalf("store calls after the store came back = %d, want 4", got)
	}
	if err := n.sy.SyncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	ws := ratelimit.WindowStart(clock.Now().UnixNano(), time.Minute)
	got, err := mem.Window(context.Background(), clustersync.WindowKey{Namespace: "api", Size: time.Minute, Start: ws, Key: "k"})
	if err != nil || got != 1005*ratelimit.Micro {
		t.Fatalf("store = %v (%v), want exactly 1005 hits", float64(got)/ratelimit.Micro, err)
	}
}

// fallbackCount counts a Syncer's calls answered from local counts.
type fallbackCount struct {
	clustersync.NopMetrics
	n atomic.Int64
}

func (f *fallbackCount) Fallback(string) { f.n.Add(1) }

// TestFallbackLogsTheFailureOnly: the call whose store call failed logs
// its error; the calls answered locally while the store is presumed down
// are counted, not logged, so a log tail still shows the failure.
func TestFallbackLogsTheFailureOnly(t *testing.T) {
	clock := fakeclock.New(start)
	faulty := memory.NewFaulty(memory.New())
	ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Minute}, Shared: true}, clock)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := new(fallbackCount)
	cfg := clustersync.Config{CallTimeout: 20 * time.Millisecond, TickTimeout: time.Second, NoJitter: true}
	sy, err := clustersync.NewSyncer(ns, clustersync.Synchronous{}, faulty, clustersync.NewIncarnation("a"), clustersync.NewVersions(clock.Now), cfg, log, m)
	if err != nil {
		t.Fatal(err)
	}
	faulty.Hang()
	for range 100 {
		if _, err := sy.Calls().IncrementAt(context.Background(), clock.Now(), "k", 0, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if got := m.n.Load(); got != 100 {
		t.Errorf("%d fallbacks counted, want 100", got)
	}
	lines := strings.Count(logs.String(), "answered from local counts")
	if lines != 1 || !strings.Contains(logs.String(), "deadline exceeded") {
		t.Errorf("%d fallback lines logged, want 1 with the store's error:\n%s", lines, logs.String())
	}
}

// lostReplyStore applies every call and then, while armed, reports it as
// failed: a push whose reply was lost after the store took it.
type lostReplyStore struct {
	*memory.Store
	armed bool
	rows  [][]clustersync.Row // the rows of every PushFetch
}

func (s *lostReplyStore) result(err error) error {
	if err == nil && s.armed {
		return fmt.Errorf("reply lost: %w", clustersync.ErrUnavailable)
	}
	return err
}

func (s *lostReplyStore) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	return s.result(s.Store.Push(ctx, inc, rows))
}

func (s *lostReplyStore) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	s.rows = append(s.rows, append([]clustersync.Row(nil), rows...))
	return s.result(s.Store.PushFetch(ctx, inc, rows, others))
}

// TestFailedPushThatLandedIsRepaired: a push reported failed may still
// have reached the store. When the node's total then returns to the last
// acknowledged one (a release after a hit), the window must be pushed
// again, or the store keeps the failed push's total.
func TestFailedPushThatLandedIsRepaired(t *testing.T) {
	for _, syncRate := range []float64{0.1, 0} {
		t.Run(fmt.Sprintf("sync_rate=%v", syncRate), func(t *testing.T) {
			clock := fakeclock.New(start)
			store := &lostReplyStore{Store: memory.New()}
			const callTimeout = 20 * time.Millisecond
			n := newNode(t, "a", syncRate, store, clock, clustersync.Config{CallTimeout: callTimeout})
			tick := func() error { return n.sy.SyncOnce(context.Background()) }
			n.increment(t, "k", 1)
			if err := tick(); err != nil {
				t.Fatal(err)
			}
			store.armed = true
			n.increment(t, "k", 1) // synchronous: lands, reported failed
			if err := tick(); err == nil {
				t.Fatal("tick with the reply lost: no error")
			}
			store.armed = false
			clock.Add(callTimeout) // past the synchronous back-off
			n.increment(t, "k", -1)
			if err := tick(); err != nil {
				t.Fatal(err)
			}
			ws := ratelimit.WindowStart(clock.Now().UnixNano(), time.Minute)
			got, err := store.Window(context.Background(), clustersync.WindowKey{Namespace: "api", Size: time.Minute, Start: ws, Key: "k"})
			if err != nil || got != 1*ratelimit.Micro {
				t.Fatalf("store = %v hits (%v), want 1", float64(got)/ratelimit.Micro, err)
			}
		})
	}
}

// TestSynchronousCallSendsUnchangedWindowsAsStored: a synchronous call
// sends a window whose total the store already holds with the version it
// was stored with, so the store has nothing to rewrite; a changed window
// gets a new version.
func TestSynchronousCallSendsUnchangedWindowsAsStored(t *testing.T) {
	clock := fakeclock.New(start)
	store := &lostReplyStore{Store: memory.New()}
	n := newNode(t, "a", 0, store, clock, clustersync.Config{})
	n.increment(t, "k", 1)
	clock.Add(time.Second) // a new 1 s window; the minute window goes on
	n.increment(t, "k", 1)
	if len(store.rows) != 2 {
		t.Fatalf("%d synchronous calls, want 2", len(store.rows))
	}
	first := map[clustersync.WindowKey]clustersync.Row{}
	for _, r := range store.rows[0] {
		first[r.WindowKey] = r
	}
	changed := 0
	for _, r := range store.rows[1] {
		before, seen := first[r.WindowKey]
		switch {
		case seen && before.Total == r.Total:
			if r.Version != before.Version {
				t.Errorf("unchanged window %+v sent with version %d, want its stored %d", r.WindowKey, r.Version, before.Version)
			}
		case !seen && r.Total == 0:
			if r.Version != 0 {
				t.Errorf("never-counted window %+v sent with version %d, want 0", r.WindowKey, r.Version)
			}
		default:
			changed++
			if seen && r.Version <= before.Version {
				t.Errorf("changed window %+v sent with version %d, not newer than %d", r.WindowKey, r.Version, before.Version)
			}
		}
	}
	// The minute window and the new 1 s window changed; the previous 1 s
	// window (the first call's current one) and the previous minute did not.
	if changed != 2 {
		t.Errorf("%d windows sent as changed, want 2", changed)
	}
}

// TestSynchronousCallReadsClosedWindowsOnce: the previous windows go with
// the first call after they closed and with the first one CallTimeout
// after that; a call another node started before the boundary and that
// lands in between is seen from then on; later calls in the same windows
// send only the current ones; a late push to a closed window reaches the
// node with the background tick; a new window is read again.
func TestSynchronousCallReadsClosedWindowsOnce(t *testing.T) {
	clock := fakeclock.New(start) // a 1 s boundary: the previous 1 s window just closed
	store := &lostReplyStore{Store: memory.New()}
	const grace = 250 * time.Millisecond
	n := newNode(t, "a", 0, store, clock, clustersync.Config{CallTimeout: grace})
	sent := func() (cur, prev int) {
		t.Helper()
		for _, r := range store.rows[len(store.rows)-1] {
			if at := clock.Now().UnixNano(); r.Start <= at && at < r.Start+int64(r.Size) {
				cur++
			} else {
				prev++
			}
		}
		return cur, prev
	}
	want := func(what string, wantPrev int) {
		t.Helper()
		if cur, prev := sent(); cur != 2 || prev != wantPrev {
			t.Errorf("%s: sent %d current and %d previous windows, want 2 and %d", what, cur, prev, wantPrev)
		}
	}
	secondRate := func(what string, rs []ratelimit.Rate, want float64) {
		t.Helper()
		if got := rs[0].Rate; got < want-1e-6 || got > want+1e-6 {
			t.Errorf("%s: 1 s rate %v, want %v", what, got, want)
		}
	}

	// pushPrev stores inc's total of k's previous window of size.
	pushPrev := func(inc string, size time.Duration, total float64) (start int64) {
		t.Helper()
		start = ratelimit.WindowStart(clock.Now().UnixNano(), size) - int64(size)
		row := clustersync.Row{
			WindowKey: clustersync.WindowKey{Namespace: "api", Size: size, Start: start, Key: "k"},
			Total:     int64(total * ratelimit.Micro), Version: 1, ExpireAt: clock.Now().Add(time.Hour),
		}
		if err := store.Push(context.Background(), inc, []clustersync.Row{row}); err != nil {
			t.Fatal(err)
		}
		return start
	}

	secondRate("at the boundary", n.increment(t, "k", 1), 1)
	want("at the boundary", 2)
	// Another node's call started before the boundary lands now: 5 hits
	// in the previous second.
	pushPrev("other", time.Second, 5)
	clock.Add(grace - 10*time.Millisecond)
	secondRate("within CallTimeout of the boundary", n.increment(t, "k", 1), 2)
	want("within CallTimeout of the boundary", 0)
	clock.Add(20 * time.Millisecond)
	secondRate("the first call after CallTimeout", n.increment(t, "k", 1), 3+5*0.74)
	want("the first call after CallTimeout", 2)
	clock.Add(10 * time.Millisecond)
	secondRate("a later call in the same windows", n.increment(t, "k", 1), 4+5*0.73)
	want("a later call in the same windows", 0)

	// Another incarnation's late push to the closed minute window: the
	// synchronous calls leave it to the background tick.
	prevMinute := pushPrev("late", time.Minute, 60)
	before := n.minuteRate(t, "k")
	n.increment(t, "k", 1)
	want("after a late push", 0)
	if got := n.minuteRate(t, "k"); got != before+1 {
		t.Errorf("minute rate %v after one more hit, want %v: the closed window was read again", got, before+1)
	}
	if err := n.sy.SyncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	elapsed := float64(clock.Now().UnixNano()-(prevMinute+int64(time.Minute))) / float64(time.Minute)
	if got, want := n.minuteRate(t, "k"), before+1+60*(1-elapsed); got < want-1e-6 || got > want+1e-6 {
		t.Errorf("minute rate %v after the background tick, want %v with the late push", got, want)
	}

	// A new 1 s window: its previous window is read again.
	clock.Add(time.Second)
	n.increment(t, "k", 1)
	want("in the next 1 s window", 2)
}

// TestSynchronousOneProbeAtATime: when the store has been presumed down
// for CallTimeout, one call probes it; the calls made while that probe
// waits answer from local counts, without a store call of their own.
func TestSynchronousOneProbeAtATime(t *testing.T) {
	clock := fakeclock.New(start)
	faulty := memory.NewFaulty(memory.New())
	const callTimeout = 50 * time.Millisecond
	n := newNode(t, "a", 0, faulty, clock, clustersync.Config{CallTimeout: callTimeout, TickTimeout: time.Second})
	faulty.Fail(nil)
	n.increment(t, "k", 1) // fails: presumed down for callTimeout
	faulty.Hang()
	clock.Add(callTimeout)
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		if _, err := n.sy.Calls().IncrementAt(context.Background(), clock.Now(), "k", 0, 1, nil); err != nil {
			t.Error(err)
		}
	}()
	for faulty.Waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	for i := range 20 { // other keys: a key's calls queue behind its own
		n.increment(t, fmt.Sprint("other", i), 1)
	}
	if got := faulty.Calls().PushFetch; got != 2 {
		t.Errorf("%d store calls, want 2: the failed one and one probe, the 20 calls made while it waits answered locally", got)
	}
	<-probed
}

// TestSynchronousFailedCallThatLandedIsRepaired: a synchronous call
// reported failed may still have reached the store. The next call whose
// total returns to the last acknowledged one (a release after a hit)
// sends it again as new, with no tick between, or the store keeps the
// failed call's total.
func TestSynchronousFailedCallThatLandedIsRepaired(t *testing.T) {
	clock := fakeclock.New(start)
	store := &lostReplyStore{Store: memory.New()}
	const callTimeout = 20 * time.Millisecond
	n := newNode(t, "a", 0, store, clock, clustersync.Config{CallTimeout: callTimeout})
	n.increment(t, "k", 1)
	store.armed = true
	n.increment(t, "k", 1) // lands, reported failed
	store.armed = false
	clock.Add(callTimeout) // past the back-off
	n.increment(t, "k", -1)
	ws := ratelimit.WindowStart(clock.Now().UnixNano(), time.Minute)
	got, err := store.Window(context.Background(), clustersync.WindowKey{Namespace: "api", Size: time.Minute, Start: ws, Key: "k"})
	if err != nil || got != 1*ratelimit.Micro {
		t.Fatalf("store = %v hits (%v), want 1", float64(got)/ratelimit.Micro, err)
	}
}

// modeOf is the mode sync_rate rate selects, decoded as the config
// loader decodes it.
func modeOf(tb testing.TB, rate float64) clustersync.Mode {
	tb.Helper()
	m, err := config.DecodeSyncRate(&rate)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// shared reports whether mode m syncs.
func shared(m clustersync.Mode) bool { return m != clustersync.Mode(clustersync.Local{}) }
