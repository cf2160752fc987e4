package sync_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// callStore keeps every Push's rows and every Fetch's keys, and fails the
// failPush-th push (counted from 1; 0 fails none). It holds the memory
// store in a field, not embedded, so that it is no PushFetcher unless
// wrapped in callPushFetcher.
type callStore struct {
	mem      *memory.Store
	pushes   [][]clustersync.Row
	fetched  []clustersync.WindowKey
	fetches  []int // each Fetch's number of keys
	failPush int
}

func (c *callStore) push(rows []clustersync.Row) error {
	c.pushes = append(c.pushes, slices.Clone(rows))
	if len(c.pushes) == c.failPush {
		return errors.New("push refused")
	}
	return nil
}

func (c *callStore) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	if err := c.push(rows); err != nil {
		return err
	}
	return c.mem.Push(ctx, inc, rows)
}

func (c *callStore) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	c.fetched = append(c.fetched, keys...)
	c.fetches = append(c.fetches, len(keys))
	return c.mem.Fetch(ctx, inc, keys, others)
}

func (c *callStore) Close() error { return nil }

func (*callStore) Abilities() clustersync.Abilities { return 0 }

type callPushFetcher struct{ *callStore }

func (callPushFetcher) Abilities() clustersync.Abilities { return clustersync.PushFetch }

func (c callPushFetcher) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	if err := c.push(rows); err != nil {
		return err
	}
	return c.mem.PushFetch(ctx, inc, rows, others)
}

func (c *callStore) sizes() []int {
	var n []int
	for _, rows := range c.pushes {
		n = append(n, len(rows))
	}
	return n
}

// eachPushPath runs f on a Push-only store and on a PushFetcher.
func eachPushPath(t *testing.T, f func(t *testing.T, cs *callStore, store clustersync.Store)) {
	for _, pf := range []bool{false, true} {
		t.Run(fmt.Sprintf("pushfetch=%v", pf), func(t *testing.T) {
			cs := &callStore{mem: memory.New()}
			var store clustersync.Store = cs
			if pf {
				store = callPushFetcher{cs}
			}
			f(t, cs, store)
		})
	}
}

// TestPushedRowsKeptTwoWindowsAndTwoPeriods: a pushed window's row
// expires two window sizes and two sync periods after the window starts,
// so the next window's sliding rate can still read it after a late tick.
func TestPushedRowsKeptTwoWindowsAndTwoPeriods(t *testing.T) {
	eachPushPath(t, func(t *testing.T, cs *callStore, store clustersync.Store) {
		clock := fakeclock.New(start)
		a := newNode(t, "a", 0.1, store, clock, clustersync.Config{})
		a.increment(t, "k", 1)
		syncAll(t, []testNode{a})
		if len(cs.pushes) != 1 || len(cs.pushes[0]) != 2 {
			t.Fatalf("pushes of %v rows, want one of the 2 windows", cs.sizes())
		}
		for _, r := range cs.pushes[0] {
			if want := time.Unix(0, r.Start).Add(2*r.Size + 200*time.Millisecond); !r.ExpireAt.Equal(want) {
				t.Errorf("the %v window from %v kept until %v, want %v", r.Size, time.Unix(0, r.Start), r.ExpireAt, want)
			}
		}
	})
}

// TestPushBatches: a tick pushes its dirty windows in batches of
// BatchSize, with no empty call after the last; a batch that fails ends
// the tick with an error counting the windows not pushed, and those stay
// dirty for the next tick, which pushes them all.
func TestPushBatches(t *testing.T) {
	eachPushPath(t, func(t *testing.T, cs *callStore, store clustersync.Store) {
		clock := fakeclock.New(start)
		a := newNode(t, "a", 0.1, store, clock, clustersync.Config{BatchSize: 5})
		count := func(round int) {
			for i := range 10 { // 20 windows: 10 keys × 2 sizes
				a.increment(t, fmt.Sprintf("r%dk%d", round, i), 1)
			}
		}
		count(0)
		syncAll(t, []testNode{a})
		if got := cs.sizes(); !slices.Equal(got, []int{5, 5, 5, 5}) {
			t.Errorf("20 dirty windows pushed in batches of %v, want [5 5 5 5]", got)
		}

		count(1)
		cs.pushes, cs.failPush = nil, 2
		err := a.sy.SyncOnce(context.Background())
		if err == nil || !strings.Contains(err.Error(), "push 15 rows") {
			t.Errorf("a tick whose second batch fails: %v, want an error naming the 15 rows not pushed", err)
		}
		if got := cs.sizes(); !slices.Equal(got, []int{5, 5}) {
			t.Errorf("batches tried %v, want [5 5]: the tick stops at the failure", got)
		}
		cs.pushes, cs.failPush = nil, 0
		syncAll(t, []testNode{a})
		if got := cs.sizes(); !slices.Equal(got, []int{5, 5, 5}) {
			t.Errorf("the next tick pushed %v, want [5 5 5]: the failed batch and the one not tried", got)
		}
	})
}

// TestPushFetchReadsBackWhatItPushed: on a PushFetcher the others'
// totals of a pushed window come back with the push, so the tick fetches
// only the windows it did not push.
func TestPushFetchReadsBackWhatItPushed(t *testing.T) {
	cs := &callStore{mem: memory.New()}
	clock := fakeclock.New(start)
	a := newNode(t, "a", 0.1, callPushFetcher{cs}, clock, clustersync.Config{})
	b := newNode(t, "b", 0.1, cs.mem, clock, clustersync.Config{})
	b.increment(t, "k", 2)
	syncAll(t, []testNode{b})
	a.increment(t, "k", 1)
	syncAll(t, []testNode{a})
	pushed := map[clustersync.WindowKey]bool{}
	for _, r := range cs.pushes[0] {
		pushed[r.WindowKey] = true
	}
	for _, k := range cs.fetched {
		if pushed[k] {
			t.Errorf("the %v window from %v pushed and fetched again", k.Size, time.Unix(0, k.Start))
		}
	}
	if len(cs.fetched) != 2 {
		t.Errorf("%d windows fetched, want the 2 previous windows", len(cs.fetched))
	}
	if got := a.minuteRate(t, "k"); got != 3 {
		t.Errorf("a's minute rate %v, want 3 (b's 2 read back with the push)", got)
	}
}

// TestFetchBatches: a tick reads the others' totals of its interest
// windows in batches of BatchSize.
func TestFetchBatches(t *testing.T) {
	cs := &callStore{mem: memory.New()}
	clock := fakeclock.New(start)
	a := newNode(t, "a", 0.1, cs, clock, clustersync.Config{BatchSize: 5})
	for i := range 5 {
		a.increment(t, fmt.Sprintf("k%d", i), 1)
	}
	syncAll(t, []testNode{a})
	cs.fetches = nil
	syncAll(t, []testNode{a})
	// 5 keys × 2 sizes × the current and the previous window.
	if got := cs.fetches; !slices.Equal(got, []int{5, 5, 5, 5}) {
		t.Errorf("20 interest windows fetched in batches of %v, want [5 5 5 5]", got)
	}
}

// TestStatusReportsTheLastSuccess: Status gives when the last tick that
// succeeded ended and the last tick's error; a failed tick leaves the
// last success as it was.
func TestStatusReportsTheLastSuccess(t *testing.T) {
	clock := fakeclock.New(start)
	faulty := memory.NewFaulty(memory.New())
	a := newNode(t, "a", 0.1, faulty, clock, clustersync.Config{})
	if last, err := a.sy.Status(); !last.IsZero() || err != nil {
		t.Errorf("before any tick: %v, %v; want the zero time and no error", last, err)
	}
	a.increment(t, "k", 1)
	before := time.Now()
	syncAll(t, []testNode{a})
	last, err := a.sy.Status()
	if last.Before(before) || err != nil {
		t.Fatalf("after a tick that succeeded: %v, %v; want a time after %v and no error", last, err, before)
	}
	faulty.Fail(nil)
	a.increment(t, "k", 1)
	if err := a.sy.SyncOnce(context.Background()); err == nil {
		t.Fatal("a tick through a failing store succeeded")
	}
	if got, err := a.sy.Status(); !got.Equal(last) || err == nil {
		t.Errorf("after a failed tick: %v, %v; want %v and the tick's error", got, err, last)
	}
	faulty.Heal()
	syncAll(t, []testNode{a})
	if got, err := a.sy.Status(); got.Before(last) || err != nil {
		t.Errorf("after the store healed: %v, %v; want a time from %v on and no error", got, err, last)
	}
}
