package sync_test

import (
	"context"
	"errors"
	"fmt"
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

var (
	tokens100 = ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 100, RefillTime: time.Hour}}
	leaky10   = ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 10, Interval: time.Hour}}
)

func (n testNode) take(t testing.TB, key string, limits ...ratelimit.Limit) ratelimit.Decision {
	t.Helper()
	d, err := n.sy.Calls().AllowAt(context.Background(), n.ns.Now(), ratelimit.AllowRequest{Key: key, Cost: 1, Limits: limits}, nil)
	if err != nil {
		t.Fatalf("AllowAt %q: %v", key, err)
	}
	return d
}

// storeLevel reads a bucket's level in store as a new incarnation would.
func storeLevel(t testing.TB, store clustersync.BucketStore, clock node.Clock, key string, l ratelimit.Limit) float64 {
	t.Helper()
	ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Minute}, Shared: true}, clock)
	if err != nil {
		t.Fatal(err)
	}
	req := ratelimit.AllowRequest{Key: key, Cost: 0, Limits: []ratelimit.Limit{l}}
	c, err := ns.CheckAllow(req)
	if err != nil {
		t.Fatal(err)
	}
	r := make([]clustersync.BucketReply, 1)
	_, err = ns.ExchangeBuckets(clock.Now(), req, &c, nil, func(tx *node.BucketTx) error {
		b := &tx.Buckets[0]
		call := clustersync.BucketCall{Namespace: "api", Bucket: b.Spec, Life: b.Life, Version: 1, ExpireAt: clock.Now().Add(time.Hour)}
		_, err := store.Buckets(context.Background(), clustersync.NewIncarnation("reader"), clock.Now().UnixNano(), 0, []clustersync.BucketCall{call}, r)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return float64(r[0].After.Level) / ratelimit.Micro
}

// TestBucketsSynchronousExact: three nodes, eight callers each, on one
// bucket with no refill, admit exactly its capacity.
func TestBucketsSynchronousExact(t *testing.T) {
	for _, l := range []ratelimit.Limit{tokens100, leaky10} {
		t.Run(l.Kind.String(), func(t *testing.T) {
			clock := fakeclock.New(start)
			store := memory.New()
			var admitted atomic.Int64
			var wg gosync.WaitGroup
			for i := range 3 {
				n := newNode(t, fmt.Sprintf("n%d", i), 0, store, clock, clustersync.Config{})
				for range 8 {
					wg.Go(func() {
						for range 50 {
							if n.take(t, "k", l).Allowed {
								admitted.Add(1)
							}
						}
					})
				}
			}
			wg.Wait()
			capacity := max(l.Token.Max, l.Leaky.Size)
			if got := admitted.Load(); float64(got) != capacity {
				t.Errorf("admitted %d, want %v", got, capacity)
			}
		})
	}
}

// lostReplies applies calls and then reports a failure, as a store whose
// answer never arrives, while lose is set.
type lostReplies struct {
	*memory.Store
	lose atomic.Bool
}

func (s *lostReplies) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	ok, err := s.Store.Buckets(ctx, inc, at, take, calls, replies)
	if err == nil && s.lose.Load() {
		return false, fmt.Errorf("reply lost: %w", clustersync.ErrUnavailable)
	}
	return ok, err
}

// TestBucketsLostReplyCountedOnce: a synchronous take the store applied
// but whose answer was lost is decided locally, and the tick that brings
// this node's consumption to the store counts it once.
func TestBucketsLostReplyCountedOnce(t *testing.T) {
	clock := fakeclock.New(start)
	store := &lostReplies{Store: memory.New()}
	n := newNode(t, "n", 0, store, clock, clustersync.Config{})
	n.take(t, "k", tokens100)
	store.lose.Store(true)
	if d := n.take(t, "k", tokens100); !d.Allowed {
		t.Fatalf("a take answered locally after a lost reply: refused")
	}
	store.lose.Store(false)
	clock.Add(time.Second) // past the presumed-down time
	syncAll(t, []testNode{n})
	if got := storeLevel(t, store, clock, "k", tokens100); got != 98 {
		t.Errorf("store level after 2 takes, one with a lost reply: %v, want 98", got)
	}
	n.take(t, "k", tokens100)
	if got := storeLevel(t, store, clock, "k", tokens100); got != 97 {
		t.Errorf("store level after 3 takes: %v, want 97", got)
	}
}

// TestBucketsPeriodic: a periodic node decides from its own takes at once
// and the others' after a tick of each.
func TestBucketsPeriodic(t *testing.T) {
	clock := fakeclock.New(start)
	store := memory.New()
	a := newNode(t, "a", 0.1, store, clock, clustersync.Config{})
	b := newNode(t, "b", 0.1, store, clock, clustersync.Config{})
	for range 60 {
		if !a.take(t, "k", tokens100).Allowed {
			t.Fatal("a: refused before 60 of 100")
		}
	}
	b.take(t, "k", tokens100) // b's first call reads the store: a has pushed nothing yet
	syncAll(t, []testNode{a, b})
	admitted := 0
	for b.take(t, "k", tokens100).Allowed {
		admitted++
	}
	if admitted != 39 {
		t.Errorf("b admitted %d more after a's 60 and its own 1, want 39", admitted)
	}
	syncAll(t, []testNode{b, a})
	if a.take(t, "k", tokens100).Allowed {
		t.Error("a admitted a take after b emptied the bucket and both synced")
	}
}

// TestBucketsRestart: a node restarted (a new incarnation, nothing in
// memory) refuses a bucket the previous one emptied, in both modes.
func TestBucketsRestart(t *testing.T) {
	for _, rate := range []float64{0, 0.1} {
		t.Run(fmt.Sprint("sync_rate=", rate), func(t *testing.T) {
			clock := fakeclock.New(start)
			store := memory.New()
			old := newNode(t, "n", rate, store, clock, clustersync.Config{})
			for old.take(t, "k", tokens100).Allowed {
			}
			syncAll(t, []testNode{old}) // the last tick before the kill
			restarted := newNode(t, "n", rate, store, clock, clustersync.Config{})
			if d := restarted.take(t, "k", tokens100); d.Allowed {
				t.Errorf("the restarted node admitted a take from an empty bucket: %+v", d)
			}
		})
	}
}

// TestBucketsOutage: during an outage two synchronous nodes decide
// locally; after it, the store holds exactly what they admitted.
func TestBucketsOutage(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New()
	store := memory.NewFaulty(mem)
	a := newNode(t, "a", 0, store, clock, clustersync.Config{})
	b := newNode(t, "b", 0, store, clock, clustersync.Config{})
	for range 10 {
		a.take(t, "k", tokens100)
	}
	store.Fail(nil)
	admitted := 0
	for range 150 {
		for _, n := range []testNode{a, b} {
			if n.take(t, "k", tokens100).Allowed {
				admitted++
			}
		}
	}
	// a knew of its 10; b started from a full bucket.
	if admitted != 90+100 {
		t.Errorf("admitted %d during the outage, want 190", admitted)
	}
	for _, n := range []testNode{a, b} {
		if err := n.sy.SyncOnce(context.Background()); !errors.Is(err, clustersync.ErrUnavailable) {
			t.Errorf("a tick during the outage: %v, want ErrUnavailable", err)
		}
	}
	store.Heal()
	syncAll(t, []testNode{a, b})
	if got := storeLevel(t, mem, clock, "k", tokens100); got != 100-200 {
		t.Errorf("store level after 200 admitted: %v, want -100 (in debt)", got)
	}
	clock.Add(time.Second)
	if a.take(t, "k", tokens100).Allowed || b.take(t, "k", tokens100).Allowed {
		t.Error("a take admitted from a bucket in debt")
	}
}

// TestApplyBucketsReplayAndLate: ApplyBuckets, step by step on one row of
// a fixed bucket of 5 per hour. A call whose Version the row's record
// holds is a replay, answered from the record without a change: admitted
// if its take was; an older Version is late and decides nothing; a call
// of a newer Version with a greater Total catches the row up first.
func TestApplyBucketsReplayAndLate(t *testing.T) {
	const hit = ratelimit.Micro
	at := start.Truncate(time.Hour).UnixNano()
	spec := ratelimit.BucketSpec{Kind: ratelimit.FixedLimit, A: int64(time.Hour), B: 5 * hit, Key: "f"}
	exp := start.Add(time.Hour)
	rows := []*clustersync.BucketRow{nil}
	steps := []struct {
		name                 string
		version, total, take int64
		allowed              bool
		level, applied, seq  int64
	}{
		{"a take of 2", 1, 0, 2 * hit, true, 2 * hit, 2 * hit, 1},
		{"its replay", 1, 0, 2 * hit, true, 2 * hit, 2 * hit, 1},
		{"a take of 1", 3, 2 * hit, hit, true, 3 * hit, 3 * hit, 2},
		{"a late call", 2, 2 * hit, hit, false, 3 * hit, 3 * hit, 2},
		{"the first replayed late", 1, 0, 2 * hit, false, 3 * hit, 3 * hit, 2},
		{"the take of 1 replayed", 3, 2 * hit, hit, true, 3 * hit, 3 * hit, 2},
		{"a refused take of 3", 4, 3 * hit, 3 * hit, false, 3 * hit, 3 * hit, 3},
		{"its replay", 4, 3 * hit, 3 * hit, false, 3 * hit, 3 * hit, 3},
		// The node counted 1 more while the store was away: caught up
		// to 4, then the take of 1 fills the bucket.
		{"a catch-up and a take of 1", 5, 4 * hit, hit, true, 5 * hit, 5 * hit, 4},
		{"a replay of it", 5, 4 * hit, hit, true, 5 * hit, 5 * hit, 4},
	}
	for _, s := range steps {
		calls := []clustersync.BucketCall{{Namespace: "api", Bucket: spec, Life: 1, Total: s.total, ApplyAt: at, Version: s.version, ExpireAt: exp}}
		replies := make([]clustersync.BucketReply, 1)
		changed := make([]bool, 1)
		allowed := clustersync.ApplyBuckets("inc", at, s.take, calls, rows, replies, changed)
		r := replies[0]
		if allowed != s.allowed || r.After.Level != s.level || r.Applied != s.applied || r.Seq != s.seq {
			t.Errorf("%s (version %d, total %d, take %d): allowed %v, level %d, applied %d, seq %d; want %v, %d, %d, %d",
				s.name, s.version, s.total, s.take, allowed, r.After.Level, r.Applied, r.Seq, s.allowed, s.level, s.applied, s.seq)
		}
	}
}

// TestBucketsRowMadeAnew: a bucket's row that expired while the store was
// away starts its write count over; a node that read the old row many
// times takes the new row's state all the same, and so sees the other
// node's takes. (It ignored every answer of a lower count than the old
// row's and decided alone until the new count passed it: 15 admitted of
// a fixed bucket of 10.)
func TestBucketsRowMadeAnew(t *testing.T) {
	fixed10 := ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: 2 * time.Second, Limit: 10}}
	clock := fakeclock.New(start.Truncate(2 * time.Second))
	mem := memory.New(memory.WithClock(clock.Now))
	store := memory.NewFaulty(mem)
	a := newNode(t, "a", 0.1, store, clock, clustersync.Config{})
	b := newNode(t, "b", 0.1, store, clock, clustersync.Config{})
	for range 15 { // the old row's write count grows, a period each
		a.take(t, "k", fixed10)
		b.take(t, "k", fixed10)
		syncAll(t, []testNode{a, b})
		clock.Add(2 * time.Second)
	}
	store.Fail(nil)
	clock.Add(6 * time.Second) // the row expires meanwhile
	store.Heal()
	syncAll(t, []testNode{a, b}) // a new row
	for range 5 {
		if !a.take(t, "k", fixed10).Allowed {
			t.Fatal("a refused one of its first 5 takes in a new period")
		}
	}
	syncAll(t, []testNode{a, b})
	admitted := 0
	for b.take(t, "k", fixed10).Allowed {
		admitted++
	}
	if admitted != 5 {
		t.Errorf("b admitted %d after a's 5 of 10 and a tick of each, want 5", admitted)
	}
}

// TestApplyBucketsStoresWhatTheTakeLeft: ApplyBuckets on one row of a
// token bucket of 5 refilled whole every hour, step by step, with the
// state each call leaves and the one its take was decided from. A refused
// take empties the bucket (Smyte's rule) and the row keeps it, though
// the take consumed nothing; a call with nothing to catch up on decides
// from the row's state as stored; a catch-up applies the consumption at
// its ApplyAt, refills included.
func TestApplyBucketsStoresWhatTheTakeLeft(t *testing.T) {
	const hit = ratelimit.Micro
	h := time.Hour.Nanoseconds()
	at := start.Truncate(time.Hour).UnixNano()
	spec := ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: 5 * hit, B: h, C: 5 * hit, Key: "t"}
	exp := start.Add(3 * time.Hour)
	rows := []*clustersync.BucketRow{nil}
	steps := []struct {
		name                     string
		at, version, total, take int64
		lastAt                   int64
		allowed                  bool
		before, after            int64 // levels
		applied                  int64
	}{
		{"a take of 3", at, 1, 0, 3 * hit, 0, true, 5 * hit, 2 * hit, 3 * hit},
		// 2 tokens left: a take of 3 is refused and empties the bucket,
		// which counts as the 2 it took.
		{"a refused take of 3", at + 1, 2, 3 * hit, 3 * hit, at, false, 2 * hit, 0, 5 * hit},
		{"a take of 1 after the refusal", at + 2, 3, 5 * hit, hit, at + 1, false, 0, 0, 5 * hit},
		// Nothing to catch up on (Total = Applied): the take is decided
		// from the stored state, refilled at the call's time only.
		{"a take of 1 an hour later", at + h + 2, 4, 5 * hit, hit, at + h, true, 0, 4 * hit, 6 * hit},
		// 2 taken meanwhile by this incarnation alone: caught up at its
		// ApplyAt, then the take.
		{"a catch-up of 2 and a take of 1", at + h + 3, 5, 8 * hit, hit, at + h + 1, true, 2 * hit, hit, 9 * hit},
		// A call that only syncs, a refill later, takes nothing and
		// leaves the state as it was, not refilled to its time: a later
		// catch-up applies from its own time.
		{"a sync an hour later", at + 2*h + 3, 6, 9 * hit, 0, at + h + 3, true, hit, hit, 9 * hit},
	}
	for _, s := range steps {
		calls := []clustersync.BucketCall{{Namespace: "api", Bucket: spec, Life: 1, Total: s.total, ApplyAt: s.lastAt, Version: s.version, ExpireAt: exp}}
		replies := make([]clustersync.BucketReply, 1)
		changed := make([]bool, 1)
		allowed := clustersync.ApplyBuckets("inc", s.at, s.take, calls, rows, replies, changed)
		r := replies[0]
		if allowed != s.allowed || r.Before.Level != s.before || r.After.Level != s.after || r.Applied != s.applied || rows[0].State != r.After {
			t.Errorf("%s: allowed %v, level %d before and %d after (row %d), applied %d; want %v, %d, %d, %d",
				s.name, allowed, r.Before.Level, r.After.Level, rows[0].State.Level, r.Applied, s.allowed, s.before, s.after, s.applied)
		}
	}
}

// bucketRecorder keeps every Buckets call a store is sent.
type bucketRecorder struct {
	*memory.Store
	mu    gosync.Mutex
	calls [][]clustersync.BucketCall
}

func (r *bucketRecorder) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	r.mu.Lock()
	r.calls = append(r.calls, append([]clustersync.BucketCall(nil), calls...))
	r.mu.Unlock()
	return r.Store.Buckets(ctx, inc, at, take, calls, replies)
}

// TestBucketsTickOneCallPerKey: a tick syncs a key's buckets in one store
// call, one call per key (the store applies one key's buckets
// atomically), and each row is kept for the bucket's hold time and two
// sync periods past the tick.
func TestBucketsTickOneCallPerKey(t *testing.T) {
	fixed10 := ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Minute, Limit: 10}}
	clock := fakeclock.New(start)
	rec := &bucketRecorder{Store: memory.New()}
	n := newNode(t, "a", 0.1, rec, clock, clustersync.Config{})
	n.take(t, "a", tokens100, fixed10)
	n.take(t, "b", leaky10)
	n.take(t, "c", fixed10, leaky10)
	rec.calls = nil // the first calls' reads
	syncAll(t, []testNode{n})
	keys := map[string]int{}
	for _, call := range rec.calls {
		for _, c := range call {
			if c.Bucket.Key != call[0].Bucket.Key {
				t.Errorf("one store call holds buckets of keys %q and %q", call[0].Bucket.Key, c.Bucket.Key)
			}
			spec := c.Bucket
			if want := clock.Now().Add(spec.Hold() + 200*time.Millisecond); !c.ExpireAt.Equal(want) {
				t.Errorf("key %q: row kept until %s, want the tick's time + hold %s + 2 × 100ms", c.Bucket.Key, c.ExpireAt.Sub(start), spec.Hold())
			}
		}
		keys[call[0].Bucket.Key] += len(call)
	}
	if len(rec.calls) != 3 || keys["a"] != 2 || keys["b"] != 1 || keys["c"] != 2 {
		t.Errorf("a tick sent %d store calls, buckets per key %v; want 3 calls: a 2, b 1, c 2", len(rec.calls), keys)
	}
}

// TestBucketsFallbackCounted: a synchronous bucket call answered from the
// store counts no fallback; one the store failed, and those made while it
// is presumed down, count one each.
func TestBucketsFallbackCounted(t *testing.T) {
	clock := fakeclock.New(start)
	faulty := memory.NewFaulty(memory.New())
	ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Minute}, Shared: true}, clock)
	if err != nil {
		t.Fatal(err)
	}
	m := new(fallbackCount)
	cfg := clustersync.Config{CallTimeout: time.Second, TickTimeout: time.Second, NoJitter: true}
	sy, err := clustersync.NewSyncer(ns, clustersync.Synchronous{}, faulty, clustersync.NewIncarnation("a"), clustersync.NewVersions(clock.Now), cfg, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	n := testNode{ns: ns, sy: sy}
	for i := range 3 {
		if !n.take(t, "k", tokens100).Allowed {
			t.Fatalf("take %d of a bucket of 100 refused", i+1)
		}
	}
	if got := m.n.Load(); got != 0 {
		t.Errorf("%d fallbacks counted for 3 calls the store answered, want 0", got)
	}
	faulty.Fail(nil)
	for range 3 {
		n.take(t, "k", tokens100)
	}
	if got := m.n.Load(); got != 3 {
		t.Errorf("%d fallbacks counted for a failed call and 2 while the store is presumed down, want 3", got)
	}
}

// TestBucketsPeriodicFirstCallsReturn: in a periodic namespace the first
// call on a bucket reads its row from the store, then decides locally;
// it and the next return (the read leaves the bucket unlocked).
func TestBucketsPeriodicFirstCallsReturn(t *testing.T) {
	clock := fakeclock.New(start)
	n := newNode(t, "a", 0.1, memory.New(), clock, clustersync.Config{})
	done := make(chan int)
	go func() {
		admitted := 0
		for range 2 {
			if n.take(t, "k", tokens100).Allowed {
				admitted++
			}
		}
		done <- admitted
	}()
	select {
	case got := <-done:
		if got != 2 {
			t.Errorf("%d of the first 2 takes of a bucket of 100 admitted", got)
		}
	case <-time.After(10 * time.Second): // a bound on a deadlock, not a timing
		t.Fatal("the first calls on a periodic namespace's bucket did not return in 10 s: a lock left held")
	}
}
