package sync_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestLearnKeysFromChanges: once a's change reads have run without a gap
// since before the previous window of a size began, a holds the others'
// totals of keys it never counted, and decides its first call on such a
// key, and on a key no node counted, in the node, for limits of that
// size. Before that, and again after a lost cursor, such calls go to the
// store.
func TestLearnKeysFromChanges(t *testing.T) {
	clock := fakeclock.New(start.Add(500 * time.Millisecond))
	mem := memory.New()
	a, b, esc := periodicPair(t, mem, clock, clustersync.Config{})
	syncOnce(t, a) // the full read: a's change reads start
	escalations := func(t *testing.T, want int64) {
		t.Helper()
		if got := esc.n.Load(); got != want {
			t.Fatalf("%d escalations, want %d", got, want)
		}
	}

	// The minute window that began before the reads may hold writes a
	// never read: a key new to a goes to the store.
	incrementAt(t, b, "early", 100)
	syncOnce(t, b)
	syncOnce(t, a)
	if d := allowOne(t, a, "early", 100); d.Allowed {
		t.Fatalf("early: admitted past b's 100: %+v", d)
	}
	escalations(t, 1)
	if d := allowOne(t, a, "nobody-early", 100); !d.Allowed {
		t.Fatalf("nobody-early refused: %+v", d)
	}
	escalations(t, 2)

	// Three seconds later the previous second began after the reads did,
	// but not the previous minute: a key new to a goes to the store for a
	// limit of a minute only.
	clock.Add(3 * time.Second)
	syncOnce(t, a)
	if d := allowOne(t, a, "nobody-second", 100); !d.Allowed {
		t.Fatalf("nobody-second refused: %+v", d)
	}
	escalations(t, 2)
	minute := ratelimit.AllowRequest{Key: "nobody-minute", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 100}}}
	if d, err := a.sy.Calls().AllowAt(context.Background(), a.ns.Now(), minute, nil); err != nil || !d.Allowed {
		t.Fatalf("nobody-minute: %+v, %v", d, err)
	}
	escalations(t, 3)

	// Two minutes later the previous minute began after the reads did.
	clock.Add(2 * time.Minute)
	syncOnce(t, a)
	incrementAt(t, b, "full", 100)
	syncOnce(t, b)
	held := a.ns.Stats().ActiveKeys
	syncOnce(t, a) // a learns "full", a key it never counted
	if got := a.ns.Stats().ActiveKeys; got != held+1 {
		t.Fatalf("a holds %d keys after learning, want %d", got, held+1)
	}
	if d := allowOne(t, a, "full", 100); d.Allowed || d.Limits[0].Rate < 100 {
		t.Errorf("full: %+v, want refused at b's 100, in the node", d)
	}
	if d := allowOne(t, a, "nobody", 100); !d.Allowed {
		t.Errorf("nobody: refused %+v", d)
	}
	escalations(t, 3)

	// A lost cursor: what a holds may lack writes, so new keys go to the
	// store again.
	incrementAt(t, b, "later", 1)
	syncOnce(t, b)
	if err := mem.TrimChanges(context.Background(), "api"); err != nil {
		t.Fatal(err)
	}
	syncOnce(t, a)
	allowOne(t, a, "after-loss", 100)
	escalations(t, 4)
}

// TestLearnKnownFromTheFirstWholeWindow: a's knowledge of a size begins
// with the first previous window that began a skew (a sync period and a
// second) or more after its change reads did: at exactly that, a key new
// to a is decided in the node.
func TestLearnKnownFromTheFirstWholeWindow(t *testing.T) {
	s := start.Truncate(time.Second)
	clock := fakeclock.New(s.Add(900 * time.Millisecond)) // + 1.1 s skew: a whole second
	a, _, esc := periodicPair(t, memory.New(), clock, clustersync.Config{})
	syncOnce(t, a) // the reads begin at s + 0.9 s
	clock.Set(s.Add(3*time.Second - time.Nanosecond))
	syncOnce(t, a)
	allowOne(t, a, "before", 100) // the previous second began at s + 1 s
	if got := esc.n.Load(); got != 1 {
		t.Fatalf("%d escalations for a new key before the first whole second known, want 1", got)
	}
	clock.Set(s.Add(3 * time.Second))
	syncOnce(t, a)
	allowOne(t, a, "at", 100) // the previous second began at s + 2 s = s + 0.9 s + 1.1 s
	if got := esc.n.Load(); got != 1 {
		t.Errorf("%d escalations, want still 1: the second from s + 2 s is known", got)
	}
}

// TestLearnRestartsWhenFull: a node that can hold no more learned keys
// starts its knowledge over, so that a key new to it goes to the store
// again, as before its change reads had run for a window.
func TestLearnRestartsWhenFull(t *testing.T) {
	clock := fakeclock.New(start.Add(500 * time.Millisecond))
	mem := memory.New()
	esc := new(escalations)
	mk := func(name string, m clustersync.Metrics) testNode {
		ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Second, time.Minute}, Shared: true, MaxKeys: 8}, clock)
		if err != nil {
			t.Fatal(err)
		}
		sy, err := clustersync.NewSyncer(ns, clustersync.Periodic{Period: 100 * time.Millisecond}, mem, clustersync.NewIncarnation(name), clustersync.NewVersions(clock.Now), clustersync.Config{NoJitter: true}, nil, m)
		if err != nil {
			t.Fatal(err)
		}
		return testNode{ns: ns, sy: sy}
	}
	a, b := mk("a", esc), mk("b", nil)
	syncOnce(t, a)
	clock.Add(3 * time.Minute)
	syncOnce(t, a)
	allowOne(t, a, "known", 100)
	if got := esc.n.Load(); got != 0 {
		t.Fatalf("%d escalations once the reads ran for minutes, want 0", got)
	}
	for i := range 8 { // more than the three quarters of 8 a may learn
		incrementAt(t, b, fmt.Sprint("b", i), 1)
	}
	syncOnce(t, b)
	syncOnce(t, a)
	allowOne(t, a, "after", 100)
	if got := esc.n.Load(); got != 1 {
		t.Errorf("%d escalations after a's table filled with learned keys, want 1", got)
	}
}

// TestLearnFromTheFirstWholeWindow: a change of a window that began
// exactly a skew after the change reads did is learned: a holds the key,
// never counted there, with b's hits.
func TestLearnFromTheFirstWholeWindow(t *testing.T) {
	s := start.Truncate(time.Second)
	clock := fakeclock.New(s.Add(900 * time.Millisecond)) // + 1.1 s skew: s + 2 s
	a, b, _ := periodicPair(t, memory.New(), clock, clustersync.Config{})
	syncOnce(t, a) // the reads begin at s + 0.9 s
	clock.Set(s.Add(2 * time.Second))
	incrementAt(t, b, "x", 3) // in the second from s + 2 s
	syncOnce(t, b)
	held := a.ns.Stats().ActiveKeys
	syncOnce(t, a)
	if got := a.ns.Stats().ActiveKeys; got != held+1 {
		t.Errorf("a holds %d keys after reading b's change, want %d: the window from s + 2 s learned", got, held+1)
	}
}

// TestLearnNewKeyNotFetched: once a node knows every window size, a key
// new to it is not fetched: the change reads tell all its windows' writes.
func TestLearnNewKeyNotFetched(t *testing.T) {
	clock := fakeclock.New(start.Add(500 * time.Millisecond))
	cs := &countingStore{Store: memory.New()}
	a, _, _ := periodicPair(t, cs, clock, clustersync.Config{})
	syncOnce(t, a)
	clock.Add(3 * time.Minute)
	syncOnce(t, a)
	before := cs.fetched.Load()
	incrementAt(t, a, "new", 1)
	syncOnce(t, a)
	if got := cs.fetched.Load() - before; got != 0 {
		t.Errorf("%d windows fetched for a key new to a node that knows every size, want 0", got)
	}
}
