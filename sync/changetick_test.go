package sync_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// countingStore is the memory store counting the windows Fetch reads
// and the calls of Changes. While failFetches (failReads) is above 0, a
// call of Fetch (Changes) fails with ErrUnavailable and decrements it.
type countingStore struct {
	*memory.Store
	fetched, reads         atomic.Int64
	failFetches, failReads atomic.Int64
}

// failing takes one armed failure of n, if any.
func failing(n *atomic.Int64) bool {
	for {
		v := n.Load()
		if v <= 0 {
			return false
		}
		if n.CompareAndSwap(v, v-1) {
			return true
		}
	}
}

func (s *countingStore) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	if failing(&s.failFetches) {
		return clustersync.ErrUnavailable
	}
	s.fetched.Add(int64(len(keys)))
	return s.Store.Fetch(ctx, inc, keys, others)
}

func (s *countingStore) Changes(ctx context.Context, inc, ns string, since clustersync.Cursor, limit int, dst []clustersync.Change) ([]clustersync.Change, clustersync.Cursor, bool, error) {
	s.reads.Add(1)
	if failing(&s.failReads) {
		return dst, since, false, clustersync.ErrUnavailable
	}
	return s.Store.Changes(ctx, inc, ns, since, limit, dst)
}

// plainChanges hides the memory store's PushFetch: a tick then pushes,
// then reads the changes.
type plainChanges struct{ s *countingStore }

func (p plainChanges) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	return p.s.Push(ctx, inc, rows)
}
func (p plainChanges) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	return p.s.Fetch(ctx, inc, keys, others)
}
func (p plainChanges) Changes(ctx context.Context, inc, ns string, since clustersync.Cursor, limit int, dst []clustersync.Change) ([]clustersync.Change, clustersync.Cursor, bool, error) {
	return p.s.Changes(ctx, inc, ns, since, limit, dst)
}
func (p plainChanges) Close() error { return p.s.Close() }

func (plainChanges) Abilities() clustersync.Abilities { return clustersync.Changes }

// changeStores runs a test with a ChangeReader that is a PushFetcher and
// with one that is not.
func changeStores(t *testing.T, test func(t *testing.T, cs *countingStore, store clustersync.Store)) {
	t.Run("pushfetch", func(t *testing.T) {
		cs := &countingStore{Store: memory.New()}
		test(t, cs, cs)
	})
	t.Run("push", func(t *testing.T) {
		cs := &countingStore{Store: memory.New()}
		test(t, cs, plainChanges{cs})
	})
}

func TestChangesTickReadsOnlyWhatChanged(t *testing.T) {
	changeStores(t, func(t *testing.T, cs *countingStore, store clustersync.Store) {
		clock := fakeclock.New(start)
		cfg := clustersync.Config{NoEscalate: true}
		a := newNode(t, "a", 0.1, store, clock, cfg)
		b := newNode(t, "b", 0.1, store, clock, cfg)
		for i := range 100 {
			a.increment(t, fmt.Sprintf("k%d", i), 1)
			b.increment(t, fmt.Sprintf("k%d", i), 2)
		}
		nodes := []testNode{a, b}
		syncAll(t, nodes)
		syncAll(t, nodes)
		if got := b.minuteRate(t, "k7"); got != 3 {
			t.Fatalf("after the full reads: rate = %v, want 3", got)
		}
		cs.fetched.Store(0)
		clock.Add(100 * time.Millisecond)
		a.increment(t, "k7", 5)
		a.increment(t, "k8", 1)
		syncAll(t, nodes)
		if got := b.minuteRate(t, "k7"); got != 8 {
			t.Errorf("k7 after a change: rate = %v, want 8", got)
		}
		if got := b.minuteRate(t, "k8"); got != 4 {
			t.Errorf("k8 after a change: rate = %v, want 4", got)
		}
		if got := b.minuteRate(t, "k9"); got != 3 {
			t.Errorf("k9 unchanged: rate = %v, want 3", got)
		}
		if n := cs.fetched.Load(); n != 0 {
			t.Errorf("ticks after the first fetched %d windows, want 0 (only changes read)", n)
		}
	})
}

func TestChangesNewKeyReadsItsPast(t *testing.T) {
	changeStores(t, func(t *testing.T, cs *countingStore, store clustersync.Store) {
		clock := fakeclock.New(start)
		cfg := clustersync.Config{NoEscalate: true}
		a := newNode(t, "a", 0.1, store, clock, cfg)
		b := newNode(t, "b", 0.1, store, clock, cfg)
		a.increment(t, "x", 4)
		b.increment(t, "other", 1)
		syncAll(t, []testNode{a, b}) // b's cursor is after a's push of x
		// In the next minute x is new to b; a's hits are in the previous
		// window, which b's push does not read back.
		clock.Add(time.Minute)
		b.increment(t, "x", 1)
		syncAll(t, []testNode{b})
		want := 1 + 4*(60-10)/60.0
		if got := b.minuteRate(t, "x"); got < want-1e-9 || got > want+1e-9 {
			t.Errorf("key new to b: rate = %v, want %v (a's earlier hits read)", got, want)
		}
		if got := cs.fetched.Load(); got == 0 {
			t.Errorf("no window fetched for the new key")
		}
	})
}

// TestChangesFailedReadRetriesNewKey: a tick whose change read fails
// leaves the keys new to it for the next tick, which reads their past.
func TestChangesFailedReadRetriesNewKey(t *testing.T) {
	testFailedTickRetriesNewKey(t, func(cs *countingStore) { cs.failReads.Store(1) })
}

// TestChangesFailedFetchRetriesNewKey: a tick whose read of a new key's
// windows fails, after its change read, leaves the key for the next tick,
// which reads its past.
func TestChangesFailedFetchRetriesNewKey(t *testing.T) {
	testFailedTickRetriesNewKey(t, func(cs *countingStore) { cs.failFetches.Store(1) })
}

// testFailedTickRetriesNewKey: x, counted by a in one minute, is new to b
// in the next; b's tick fails as arm makes it, and b's next tick reads
// a's hits in the previous minute.
func testFailedTickRetriesNewKey(t *testing.T, arm func(cs *countingStore)) {
	changeStores(t, func(t *testing.T, cs *countingStore, store clustersync.Store) {
		clock := fakeclock.New(start)
		cfg := clustersync.Config{NoEscalate: true}
		a := newNode(t, "a", 0.1, store, clock, cfg)
		b := newNode(t, "b", 0.1, store, clock, cfg)
		a.increment(t, "x", 4)
		b.increment(t, "other", 1)
		syncAll(t, []testNode{a, b}) // b's cursor is after a's push of x
		clock.Add(time.Minute)
		b.increment(t, "x", 1) // new to b, a's hits in the previous window
		arm(cs)
		if err := b.sy.SyncOnce(context.Background()); err == nil {
			t.Fatal("tick with a failing read: no error")
		}
		if got := b.minuteRate(t, "x"); got != 1 {
			t.Fatalf("after the failed tick: rate = %v, want 1 (b's own hit only)", got)
		}
		syncAll(t, []testNode{b})
		want := 1 + 4*(60-10)/60.0
		if got := b.minuteRate(t, "x"); got < want-1e-9 || got > want+1e-9 {
			t.Errorf("the tick after the failed one: rate = %v, want %v (a's earlier hits read)", got, want)
		}
	})
}

func TestChangesLostCursorReadsInFull(t *testing.T) {
	changeStores(t, func(t *testing.T, cs *countingStore, store clustersync.Store) {
		clock := fakeclock.New(start)
		cfg := clustersync.Config{NoEscalate: true}
		a := newNode(t, "a", 0.1, store, clock, cfg)
		b := newNode(t, "b", 0.1, store, clock, cfg)
		a.increment(t, "k", 1)
		b.increment(t, "k", 1)
		syncAll(t, []testNode{a, b})
		syncAll(t, []testNode{a, b})
		a.increment(t, "k", 3)
		syncAll(t, []testNode{a})
		// The log forgets a's write before b reads it.
		if err := cs.TrimChanges(context.Background(), "api"); err != nil {
			t.Fatal(err)
		}
		cs.fetched.Store(0)
		syncAll(t, []testNode{b})
		if got := b.minuteRate(t, "k"); got != 5 {
			t.Errorf("after the trim: rate = %v, want 5", got)
		}
		if got := cs.fetched.Load(); got == 0 {
			t.Errorf("no full read after the trim")
		}
		// And the read after resumes from the new cursor.
		cs.fetched.Store(0)
		a.increment(t, "k", 1)
		syncAll(t, []testNode{a, b})
		if got := b.minuteRate(t, "k"); got != 6 {
			t.Errorf("after the full read: rate = %v, want 6", got)
		}
		if got := cs.fetched.Load(); got != 0 {
			t.Errorf("the tick after the full read fetched %d windows, want 0", got)
		}
	})
}

// A writer whose clock runs ahead writes a window before it is the
// reader's current one; the log reports it once, so the reader keeps it
// until the window is current.
func TestChangesAheadOfTheReader(t *testing.T) {
	changeStores(t, func(t *testing.T, cs *countingStore, store clustersync.Store) {
		next := start.Truncate(time.Minute).Add(time.Minute)
		bClock := fakeclock.New(next.Add(-300 * time.Millisecond))
		aClock := fakeclock.New(next.Add(200 * time.Millisecond))
		cfg := clustersync.Config{NoEscalate: true}
		a := newNode(t, "a", 0.1, store, aClock, cfg)
		b := newNode(t, "b", 0.1, store, bClock, cfg)
		b.increment(t, "k", 1)
		syncAll(t, []testNode{b, a}) // b's cursor: before a's push
		a.increment(t, "k", 7)       // in the minute b has not reached
		syncAll(t, []testNode{a, b}) // b reads the change early
		bClock.Add(400 * time.Millisecond)
		syncAll(t, []testNode{b}) // b writes nothing that re-reports it
		rs, err := b.ns.RateAt(b.ns.Now(), "k", time.Minute, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		// Current minute: a's 7; the previous minute's 1 weighs
		// (60 − 0.1) / 60.
		want := 7 + 1*(60-0.1)/60
		if got := rs[0].Rate; got < want-1e-9 || got > want+1e-9 {
			t.Errorf("rate = %v, want %v (a's hits written ahead of b's clock)", got, want)
		}
	})
}

// failingPages fails every second call of Changes once armed.
type failingPages struct {
	*memory.Store
	armed bool
	calls int
}

func (s *failingPages) Changes(ctx context.Context, inc, ns string, since clustersync.Cursor, limit int, dst []clustersync.Change) ([]clustersync.Change, clustersync.Cursor, bool, error) {
	if s.armed {
		s.calls++
		if s.calls%2 == 0 {
			return dst, since, false, clustersync.ErrUnavailable
		}
	}
	return s.Store.Changes(ctx, inc, ns, since, limit, dst)
}

// A tick whose read fails after some pages keeps what those pages read:
// the next tick goes on from there, and in the end every change is read.
func TestChangesFailedPageKeepsProgress(t *testing.T) {
	clock := fakeclock.New(start)
	store := &failingPages{Store: memory.New()}
	cfg := clustersync.Config{NoEscalate: true, BatchSize: 2}
	a := newNode(t, "a", 0.1, store, clock, cfg)
	b := newNode(t, "b", 0.1, store, clock, cfg)
	for i := range 6 {
		b.increment(t, fmt.Sprintf("k%d", i), 1)
	}
	syncAll(t, []testNode{a, b})
	for i := range 6 {
		a.increment(t, fmt.Sprintf("k%d", i), 2)
	}
	syncAll(t, []testNode{a})
	store.armed = true
	if err := b.sy.SyncOnce(context.Background()); err == nil {
		t.Fatal("tick with a failing page: no error")
	}
	seen := 0
	for i := range 6 {
		if b.minuteRate(t, fmt.Sprintf("k%d", i)) == 3 {
			seen++
		}
	}
	// The first page holds two windows (of one or two keys).
	if seen < 1 || seen > 2 {
		t.Errorf("after a tick whose second page failed: %d keys updated, want 1 or 2 (the first page)", seen)
	}
	store.armed = false
	syncAll(t, []testNode{b})
	for i := range 6 {
		if got := b.minuteRate(t, fmt.Sprintf("k%d", i)); got != 3 {
			t.Errorf("k%d: rate = %v, want 3", i, got)
		}
	}
}

// fetchedCount counts the rows a Syncer reports fetched.
type fetchedCount struct {
	clustersync.NopMetrics
	rows atomic.Int64
}

func (f *fetchedCount) Fetched(_ string, rows int) { f.rows.Add(int64(rows)) }

// TestChangesAheadFetchedOnce: a change read ahead of the reader's clock
// is held for a later tick, and counted as fetched once, when it was
// read, not again when the tick that can apply it applies it.
func TestChangesAheadFetchedOnce(t *testing.T) {
	changeStores(t, func(t *testing.T, cs *countingStore, store clustersync.Store) {
		next := start.Truncate(time.Minute).Add(time.Minute)
		bClock := fakeclock.New(next.Add(-300 * time.Millisecond))
		aClock := fakeclock.New(next.Add(200 * time.Millisecond))
		cfg := clustersync.Config{NoEscalate: true}
		a := newNode(t, "a", 0.1, store, aClock, cfg)
		ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Second, time.Minute}, Shared: true}, bClock)
		if err != nil {
			t.Fatal(err)
		}
		m := new(fetchedCount)
		cfg.NoJitter = true
		sy, err := clustersync.NewSyncer(ns, clustersync.Periodic{Period: 100 * time.Millisecond}, store, clustersync.NewIncarnation("b"), clustersync.NewVersions(bClock.Now), cfg, nil, m)
		if err != nil {
			t.Fatal(err)
		}
		b := testNode{ns: ns, sy: sy}
		b.increment(t, "k", 1)
		syncAll(t, []testNode{b, a})
		a.increment(t, "k", 7) // in the minute b has not reached
		syncAll(t, []testNode{a})
		before := m.rows.Load()
		syncAll(t, []testNode{b}) // b reads a's change early and holds it
		if got := m.rows.Load() - before; got != 2 {
			t.Errorf("the tick that read a's change ahead counted %d rows fetched, want 2 (a second's and a minute's)", got)
		}
		bClock.Add(400 * time.Millisecond)
		before = m.rows.Load()
		syncAll(t, []testNode{b}) // applies it, reading nothing new
		if got := m.rows.Load() - before; got != 0 {
			t.Errorf("the tick that applied the held change counted %d rows fetched, want 0", got)
		}
	})
}
