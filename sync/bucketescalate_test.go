package sync_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/accuracy"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Buckets of 10 hits a second each, refilled, drained or counted anew
// every 100 ms or second.
var (
	tokenPerSec = ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 10, RefillTime: 100 * time.Millisecond, RefillAmount: 1}}
	leakyPerSec = ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 10, Interval: time.Second}}
	fixedPerSec = ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Limit: 10, Period: time.Second}}
)

// bucketNode is a node of namespace "api" in mode on store, with metrics m
// (nil: none).
func bucketNode(t testing.TB, name string, mode clustersync.Mode, store clustersync.Store, clock node.Clock, cfg clustersync.Config, m clustersync.Metrics) testNode {
	t.Helper()
	ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Second, time.Minute}, Shared: true}, clock)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NoJitter = true
	sy, err := clustersync.NewSyncer(ns, mode, store, clustersync.NewIncarnation(name), clustersync.NewVersions(clock.Now), cfg, nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return testNode{ns: ns, sy: sy}
}

// takeCounter counts the bucket calls that take (a decision in the store),
// apart from the reads and the ticks' syncs.
type takeCounter struct {
	*memory.Store
	takes atomic.Int64
}

func (s *takeCounter) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	if take > 0 {
		s.takes.Add(1)
	}
	return s.Store.Buckets(ctx, inc, at, take, calls, replies)
}

// noDecide is a store of buckets that cannot decide an Allow atomically
// (Cassandra's declaration).
type noDecide struct{ *memory.Store }

func (s noDecide) Abilities() clustersync.Abilities { return s.Store.Abilities() &^ clustersync.Decide }

// bucketLoad runs three nodes on one bucket at ten times its rate: a call
// every 10 ms for dur, each node in turn, every node ticking every
// 100 ms at its own offset (a periodic namespace; sync_rate 0.1 s). It
// returns the times of the calls admitted, from the start, and counts
// the escalations of all three in esc.
func bucketLoad(t *testing.T, ls []ratelimit.Limit, mode clustersync.Mode, store clustersync.Store, clock *fakeclock.Clock, cfg clustersync.Config, esc *escalations, dur time.Duration) []time.Duration {
	t.Helper()
	at, _ := bucketLoadNodes(t, ls, mode, store, clock, cfg, esc, dur)
	return at
}

// bucketLoadNodes is bucketLoad, which returns the nodes too.
func bucketLoadNodes(t *testing.T, ls []ratelimit.Limit, mode clustersync.Mode, store clustersync.Store, clock *fakeclock.Clock, cfg clustersync.Config, esc *escalations, dur time.Duration) ([]time.Duration, []testNode) {
	t.Helper()
	var nodes []testNode
	for i := range 3 {
		nodes = append(nodes, bucketNode(t, fmt.Sprintf("n%d", i), mode, store, clock, cfg, esc))
	}
	_, periodic := mode.(clustersync.Periodic)
	const step = 10 * time.Millisecond
	var admitted []time.Duration
	for i := range int(dur / step) {
		n := nodes[i%3]
		if n.take(t, "k", ls...).Allowed {
			admitted = append(admitted, time.Duration(i)*step)
		}
		clock.Add(step)
		for j, n := range nodes {
			if periodic && (i+3*j)%10 == 0 {
				syncOnce(t, n)
			}
		}
	}
	return admitted, nodes
}

// maxBurst is the most calls admitted in an interval beyond one per
// per in it: a bucket that admits one call per per, and holds capacity,
// admits at most capacity + 1 (the interval's ends both on a refill).
func maxBurst(at []time.Duration, per time.Duration) int {
	most := 0
	for i := range at {
		for j := i; j < len(at); j++ {
			most = max(most, j-i+1-int((at[j]-at[i])/per))
		}
	}
	return most
}

// maxPerPeriod is the most calls admitted in one period.
func maxPerPeriod(at []time.Duration, period time.Duration) int {
	n := map[time.Duration]int{}
	most := 0
	for _, a := range at {
		n[a/period]++
		most = max(most, n[a/period])
	}
	return most
}

// TestBucketEscalationAdmitsAsSynchronous: three periodic nodes on a
// bucket of 10 a second, called 100 times a second for a minute, admit
// what three synchronous nodes admit, within 1 %, and never more at
// once than the bucket holds, when they escalate near its capacity:
// each decides alone only while the bucket keeps room for the others'
// calls of the time it cannot see them. Without escalation every node
// takes each refill: a fixed bucket admits far more, and a token or
// leaky bucket admits bursts past its capacity (the debt that follows
// makes up for them).
func TestBucketEscalationAdmitsAsSynchronous(t *testing.T) {
	const dur = time.Minute
	for _, l := range []ratelimit.Limit{tokenPerSec, leakyPerSec, fixedPerSec} {
		t.Run(l.Kind.String(), func(t *testing.T) {
			// excess is how far admitted goes past what the bucket allows:
			// its capacity and one call per 100 ms in any interval (token
			// and leaky: one more when the interval ends on both refills)
			// or its limit in a period (fixed).
			excess := func(at []time.Duration) int {
				if l.Kind == ratelimit.FixedLimit {
					return maxPerPeriod(at, time.Second) - 10
				}
				return maxBurst(at, 100*time.Millisecond) - 11
			}
			run := func(mode clustersync.Mode, cfg clustersync.Config) ([]time.Duration, int64) {
				clock := fakeclock.New(start)
				esc := new(escalations)
				at := bucketLoad(t, []ratelimit.Limit{l}, mode, memory.New(memory.WithClock(clock.Now)), clock, cfg, esc, dur)
				return at, esc.n.Load()
			}
			exactAt, _ := run(clustersync.Synchronous{}, clustersync.Config{})
			exact := len(exactAt)
			// 10 at once, then 10 a second.
			if want := 10 + 10*int(dur/time.Second); exact < want-10 || exact > want+1 || excess(exactAt) > 0 {
				t.Fatalf("synchronous nodes admitted %d in %s, %d past the bucket; want about %d, none past", exact, dur, excess(exactAt), want)
			}
			periodic := clustersync.Periodic{Period: 100 * time.Millisecond}
			at, escalated := run(periodic, clustersync.Config{})
			got := len(at)
			t.Logf("%s: synchronous %d; periodic escalating %d, %d past the bucket (%d escalations of %d calls)",
				l.Kind, exact, got, excess(at), escalated, dur/(10*time.Millisecond))
			if d := float64(got-exact) / float64(exact); d > 0.01 || d < -0.01 {
				t.Errorf("periodic nodes escalating admitted %d, synchronous %d: %+.1f %%, want within 1 %%", got, exact, 100*d)
			}
			if e := excess(at); e > 0 {
				t.Errorf("periodic nodes escalating admitted %d past the bucket at once, want 0", e)
			}
			if escalated == 0 {
				t.Error("no escalation at ten times the bucket's rate")
			}
			neverAt, escalated := run(periodic, clustersync.Config{NoEscalate: true})
			t.Logf("%s: periodic never escalating %d, %d past the bucket", l.Kind, len(neverAt), excess(neverAt))
			if l.Kind == ratelimit.FixedLimit && float64(len(neverAt)) < 1.2*float64(exact) {
				t.Errorf("periodic nodes without escalation admitted %d, synchronous %d: want over 20 %% more (else this test shows nothing)", len(neverAt), exact)
			}
			if e := excess(neverAt); e < 5 {
				t.Errorf("periodic nodes without escalation admitted %d past the bucket at once: want 5 or more (else this test shows nothing)", e)
			}
			if escalated != 0 {
				t.Errorf("%d escalations with NoEscalate", escalated)
			}
		})
	}
}

// TestBucketEscalationFarFromCapacity: a periodic node takes from a
// bucket far from its capacity alone, every take; near it, the store
// decides, one Escalated count for each take the store decides.
func TestBucketEscalationFarFromCapacity(t *testing.T) {
	clock := fakeclock.New(start)
	store := &takeCounter{Store: memory.New(memory.WithClock(clock.Now))}
	esc := new(escalations)
	periodic := clustersync.Periodic{Period: 100 * time.Millisecond}
	a := bucketNode(t, "a", periodic, store, clock, clustersync.Config{}, esc)
	b := bucketNode(t, "b", periodic, store, clock, clustersync.Config{}, esc)
	big := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 1000, RefillTime: time.Hour}}
	// b takes 10 a second, a 1 a second: far from 1000.
	for range 20 {
		for range 10 {
			if !b.take(t, "k", big).Allowed {
				t.Fatal("b: a take far from the capacity refused")
			}
		}
		if !a.take(t, "k", big).Allowed {
			t.Fatal("a: a take far from the capacity refused")
		}
		clock.Add(time.Second)
		syncAll(t, []testNode{a, b})
	}
	if got := esc.n.Load(); got != 0 {
		t.Errorf("%d escalations far from the capacity, want 0", got)
	}

	clock = fakeclock.New(start)
	store = &takeCounter{Store: memory.New(memory.WithClock(clock.Now))}
	esc = new(escalations)
	bucketLoad(t, []ratelimit.Limit{tokenPerSec}, periodic, store, clock, clustersync.Config{}, esc, 10*time.Second)
	if got, want := esc.n.Load(), store.takes.Load(); got == 0 || got != want {
		t.Errorf("%d escalations counted; the store decided %d takes: want as many, not 0", got, want)
	}
}

// TestBucketEscalationNotWhileStoreDown: after a failed call the store is
// presumed down and a periodic node decides its buckets alone, even near
// their capacity, asking the store again only after CallTimeout.
func TestBucketEscalationNotWhileStoreDown(t *testing.T) {
	clock := fakeclock.New(start)
	faulty := memory.NewFaulty(memory.New(memory.WithClock(clock.Now)))
	esc := new(escalations)
	const callTimeout = 20 * time.Millisecond
	periodic := clustersync.Periodic{Period: 100 * time.Millisecond}
	a := bucketNode(t, "a", periodic, faulty, clock, clustersync.Config{CallTimeout: callTimeout}, esc)
	b := bucketNode(t, "b", periodic, faulty, clock, clustersync.Config{CallTimeout: callTimeout}, nil)
	tokens := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 20, RefillTime: time.Hour}}
	// b takes 10 a second: a, which learns it, expects 4 more while it
	// cannot see b, and asks the store once 4 or so are left.
	a.take(t, "k", tokens)
	for range 10 {
		b.take(t, "k", tokens)
		clock.Add(100 * time.Millisecond)
		syncAll(t, []testNode{a, b})
	}
	for range 10 {
		if !a.take(t, "k", tokens).Allowed {
			t.Fatal("a take refused before the first escalation")
		}
		if esc.n.Load() > 0 {
			break
		}
	}
	if got := esc.n.Load(); got != 1 {
		t.Fatalf("%d escalations near the capacity, want 1", got)
	}
	faulty.Fail(errors.New("down"))
	calls := faulty.Calls().Buckets
	if !a.take(t, "k", tokens).Allowed { // near: escalates, fails, decided here
		t.Fatal("a take the store failed refused by a, which has tokens left")
	}
	if got := faulty.Calls().Buckets - calls; got != 1 {
		t.Fatalf("%d bucket calls for a take near the capacity, want 1", got)
	}
	calls = faulty.Calls().Buckets
	if !a.take(t, "k", tokens).Allowed {
		t.Error("a take near the capacity refused while the store is presumed down")
	}
	if got := faulty.Calls().Buckets - calls; got != 0 {
		t.Errorf("%d bucket calls while the store is presumed down, want 0", got)
	}
	if got := esc.n.Load(); got != 2 {
		t.Errorf("%d escalations, want 2 (none while presumed down)", got)
	}
	faulty.Heal()
	clock.Add(callTimeout)
	read, err := a.sy.Calls().AllowAt(context.Background(), clock.Now(), ratelimit.AllowRequest{Key: "k", Limits: []ratelimit.Limit{tokens}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if left := read.Limits[0].Remaining; left < 1 {
		t.Fatalf("%v tokens left in a's view, want some for a take near the capacity", left)
	}
	a.take(t, "k", tokens)
	if got := faulty.Calls().Buckets - calls; got != 1 {
		t.Errorf("%d bucket calls for a take near the capacity once the store may be back, want 1", got)
	}
	if got := esc.n.Load(); got != 3 {
		t.Errorf("%d escalations, want 3", got)
	}
}

// TestBucketEscalationWithoutAtomicStore: on a store of buckets that
// cannot decide atomically (Cassandra's) nothing escalates: the periodic
// nodes decide alone and admit as without escalation.
func TestBucketEscalationWithoutAtomicStore(t *testing.T) {
	clock := fakeclock.New(start)
	esc := new(escalations)
	store := noDecide{memory.New(memory.WithClock(clock.Now))}
	periodic := clustersync.Periodic{Period: 100 * time.Millisecond}
	got := bucketLoad(t, []ratelimit.Limit{tokenPerSec}, periodic, store, clock, clustersync.Config{}, esc, 10*time.Second)
	if n := esc.n.Load(); n != 0 {
		t.Errorf("%d escalations on a store without Decide, want 0", n)
	}
	clock = fakeclock.New(start)
	never := bucketLoad(t, []ratelimit.Limit{tokenPerSec}, periodic, memory.New(memory.WithClock(clock.Now)), clock, clustersync.Config{NoEscalate: true}, new(escalations), 10*time.Second)
	if !slices.Equal(got, never) {
		t.Errorf("admitted %d on a store without Decide, %d with NoEscalate: want the same calls", len(got), len(never))
	}
}

// TestBucketEscalationMixed: an Allow of a window and a bucket near the
// bucket's capacity has the store decide the bucket, the window decided
// here with the key held meanwhile: three periodic nodes admit what the
// bucket allows, and count in the window exactly what they admit.
func TestBucketEscalationMixed(t *testing.T) {
	window := ratelimit.Limit{Size: time.Minute, Limit: 1e6}
	for _, cfg := range []clustersync.Config{{}, {NoEscalate: true}} {
		clock := fakeclock.New(start)
		esc := new(escalations)
		store := memory.New(memory.WithClock(clock.Now))
		periodic := clustersync.Periodic{Period: 100 * time.Millisecond}
		at, nodes := bucketLoadNodes(t, []ratelimit.Limit{window, tokenPerSec}, periodic, store, clock, cfg, esc, 10*time.Second)
		burst := maxBurst(at, 100*time.Millisecond) - 11
		t.Logf("NoEscalate %v: admitted %d, %d past the bucket, %d escalations", cfg.NoEscalate, len(at), burst, esc.n.Load())
		if cfg.NoEscalate {
			if burst < 5 {
				t.Errorf("without escalation %d past the bucket at once: want 5 or more (else this test shows nothing)", burst)
			}
			continue
		}
		if burst > 0 || esc.n.Load() == 0 {
			t.Errorf("escalating: %d past the bucket at once, %d escalations; want none past, some escalations", burst, esc.n.Load())
		}
		// The window counts what the nodes admitted, no more: once all
		// have pushed and fetched, each sees it all.
		syncAll(t, nodes)
		syncAll(t, nodes)
		for i, n := range nodes {
			rs, err := n.ns.RateAt(clock.Now(), "k", time.Minute, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := rs[0].Rate; got != float64(len(at)) {
				t.Errorf("node %d: the window counts %v, want the %d admitted", i, got, len(at))
			}
		}
	}
}

// BenchmarkPeriodicBucketTake: a periodic node's take from a bucket far
// from its capacity, decided in the node with escalation on (the margin
// computed) and off.
func BenchmarkPeriodicBucketTake(b *testing.B) {
	for _, cfg := range []struct {
		name string
		cfg  clustersync.Config
	}{{"escalate=auto", clustersync.Config{}}, {"escalate=never", clustersync.Config{NoEscalate: true}}} {
		b.Run(cfg.name, func(b *testing.B) {
			clock := fakeclock.New(start)
			store := memory.New(memory.WithClock(clock.Now))
			n := bucketNode(b, "a", clustersync.Periodic{Period: 100 * time.Millisecond}, store, clock, cfg.cfg, nil)
			big := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 1e9, RefillTime: time.Hour}}
			req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{big}}
			calls := n.sy.Calls()
			ctx := context.Background()
			at := clock.Now()
			dst := make([]ratelimit.LimitStatus, 0, 1)
			b.ReportAllocs()
			for b.Loop() {
				if d, err := calls.AllowAt(ctx, at, req, dst[:0]); err != nil || !d.Allowed {
					b.Fatalf("take: %+v, %v", d, err)
				}
			}
		})
	}
}

// TestBucketEscalationDripsInTime: three periodic nodes on a bucket
// called ten and two times its rate refuse no call that one exact bucket,
// fed with what they admitted, admits. A leaky bucket's drips fall on a
// grid whoever fills it first: the nodes learn of each other's first
// drops a tick late, and a store that dripped from the first drop it
// learnt of would drip later than the bucket, refusing each drip's first
// calls.
func TestBucketEscalationDripsInTime(t *testing.T) {
	for _, l := range []ratelimit.Limit{tokenPerSec, leakyPerSec, fixedPerSec} {
		for _, step := range []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 70 * time.Millisecond, 130 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/%s", l.Kind, step), func(t *testing.T) {
				clock := fakeclock.New(start)
				store := memory.New(memory.WithClock(clock.Now))
				periodic := clustersync.Periodic{Period: 100 * time.Millisecond}
				var nodes []testNode
				for i := range 3 {
					nodes = append(nodes, bucketNode(t, fmt.Sprintf("n%d", i), periodic, store, clock, clustersync.Config{}, nil))
				}
				var calls []accuracy.Call
				for i := range int(20 * time.Second / step) {
					d := nodes[i%3].take(t, "k", l)
					calls = append(calls, accuracy.Call{At: clock.Now().UnixNano(), Seq: int64(i), Allowed: d.Allowed})
					clock.Add(step)
					for j, n := range nodes { // each ticks every 100 ms, at its own offset
						if (clock.Now().Sub(start)+time.Duration(j)*33*time.Millisecond)%(100*time.Millisecond) < step {
							syncOnce(t, n)
						}
					}
				}
				v, err := accuracy.JudgeLimit(calls, l, time.Second, start.Add(2*time.Second), clock.Now())
				if err != nil {
					t.Fatal(err)
				}
				if v.WronglyRefused > 0 || v.WronglyAdmitted > 0 {
					t.Errorf("%d calls, %d admitted: %d wrongly refused, %d wrongly admitted; want none", v.Calls, v.Admitted, v.WronglyRefused, v.WronglyAdmitted)
				}
			})
		}
	}
}
