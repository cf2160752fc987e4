package sync_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/strategy/memory"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

// waitUntil polls cond (each poll yields) until it holds, failing t after
// 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
}

// hotKeyStores are the stores of the hot-key tests: memory always, Redis
// and PostgreSQL when their servers are named (LIMITERD_TEST_REDIS,
// LIMITERD_TEST_POSTGRES).
func hotKeyStores(t *testing.T) map[string]func(t *testing.T) clustersync.Store {
	stores := map[string]func(t *testing.T) clustersync.Store{
		"memory": func(*testing.T) clustersync.Store { return memory.New() },
	}
	if os.Getenv(harness.EnvRedis) != "" {
		stores["redis"] = func(t *testing.T) clustersync.Store {
			cfg := redisstore.DefaultConfig()
			cfg.Addrs = []string{harness.SharedRedis(t).Addr()}
			cfg.KeyPrefix = harness.UniqueName("group") + ":"
			s, err := redisstore.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}
	if os.Getenv(harness.EnvPostgres) != "" {
		stores["postgres"] = func(t *testing.T) clustersync.Store {
			cfg := pgstore.DefaultConfig()
			cfg.DSN = harness.SharedPostgres(t).DSN()
			cfg.Table = harness.UniqueName("group")
			cfg.PurgeInterval = -1
			s, err := pgstore.Open(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}
	}
	return stores
}

// TestGroupHotKeyExact: three nodes on one store, 16 goroutines each,
// synchronous calls of one key. Allow admits exactly the limit across
// the nodes, one node's admitted answers are its sequence of totals, and
// Increment totals reach the store exactly.
func TestGroupHotKeyExact(t *testing.T) {
	for name, open := range hotKeyStores(t) {
		t.Run(name, func(t *testing.T) {
			store := open(t)
			clock := fakeclock.New(start)
			var nodes []testNode
			for i := range 3 {
				nodes = append(nodes, newNode(t, fmt.Sprintf("n%d", i), 0, store, clock, clustersync.Config{CallTimeout: time.Minute}))
			}
			const (
				limit      = 100
				goroutines = 16
				calls      = 12 // 576 calls for 100 admissions
			)
			req := ratelimit.AllowRequest{Key: "hot", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: limit}}}
			var admitted atomic.Int64
			var wg gosync.WaitGroup
			for _, n := range nodes {
				for range goroutines {
					wg.Go(func() {
						for range calls {
							d, err := n.sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								admitted.Add(1)
								if d.Limits[0].Rate > limit {
									t.Errorf("admitted at minute rate %v > %d", d.Limits[0].Rate, limit)
								}
							}
						}
					})
				}
			}
			wg.Wait()
			if got := admitted.Load(); got != limit {
				t.Errorf("admitted %d of %d calls on 3 nodes, want exactly %d", got, 3*goroutines*calls, limit)
			}
			wantStored(t, store, "hot", clock.Now(), limit)

			// Increments: every value reaches the store once.
			var iwg gosync.WaitGroup
			for _, n := range nodes {
				for range goroutines {
					iwg.Go(func() {
						for range calls {
							if _, err := n.sy.Calls().IncrementAt(context.Background(), clock.Now(), "inc", 0, 0.5, nil); err != nil {
								t.Error(err)
								return
							}
						}
					})
				}
			}
			iwg.Wait()
			wantStored(t, store, "inc", clock.Now(), 3*goroutines*calls/2)
		})
	}
}

// wantStored checks the cluster's total of key's minute window at t, as
// a node that never wrote reads it.
func wantStored(t *testing.T, store clustersync.Store, key string, at time.Time, want float64) {
	t.Helper()
	k := clustersync.WindowKey{Namespace: "api", Size: time.Minute, Start: ratelimit.WindowStart(at.UnixNano(), time.Minute), Key: key}
	others := make([]int64, 1)
	if err := store.Fetch(context.Background(), clustersync.NewIncarnation("reader"), []clustersync.WindowKey{k}, others); err != nil {
		t.Fatal(err)
	}
	if got := float64(others[0]) / ratelimit.Micro; got != want {
		t.Errorf("stored total of %q = %v, want %v", key, got, want)
	}
}

// TestGroupAnswersInOrder: on one node, the answers of concurrent calls
// of one key are those of the calls one by one in some order: the
// increments' rates are 1, 2, … n, and the admitted Allows' rates 1 … L.
func TestGroupAnswersInOrder(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New()
	n := newNode(t, "n", 0, mem, clock, clustersync.Config{CallTimeout: time.Minute})
	const goroutines, calls = 32, 20
	var mu gosync.Mutex
	var incs, allows []float64
	var wg gosync.WaitGroup
	req := ratelimit.AllowRequest{Key: "a", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 300}}}
	for g := range goroutines {
		wg.Go(func() {
			for range calls {
				if g%2 == 0 {
					rs, err := n.sy.Calls().IncrementAt(context.Background(), clock.Now(), "i", time.Minute, 1, nil)
					if err != nil || len(rs) != 1 {
						t.Errorf("IncrementAt: %v, %v", rs, err)
						return
					}
					mu.Lock()
					incs = append(incs, rs[0].Rate)
					mu.Unlock()
					continue
				}
				d, err := n.sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					mu.Lock()
					allows = append(allows, d.Limits[0].Rate)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	for name, got := range map[string][]float64{"increment": incs, "admitted allow": allows} {
		slices.Sort(got)
		for i, r := range got {
			if r != float64(i+1) {
				t.Fatalf("%s rates, sorted: [%d] = %v, want %d (all: %v)", name, i, r, i+1, got)
			}
		}
		if len(got) != 300 && name == "admitted allow" || len(got) != goroutines/2*calls && name == "increment" {
			t.Errorf("%d %s answers", len(got), name)
		}
	}
	wantStored(t, mem, "i", clock.Now(), goroutines/2*calls)
	wantStored(t, mem, "a", clock.Now(), 300)
}

// TestGroupSharesStoreCall: calls of one key that queue while its store
// call is in flight are decided together by the next one.
func TestGroupSharesStoreCall(t *testing.T) {
	clock := fakeclock.New(start)
	f := memory.NewFaulty(memory.New())
	n := newNode(t, "n", 0, f, clock, clustersync.Config{CallTimeout: time.Minute})
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 5}}}
	f.Hang()
	var admitted atomic.Int64
	var wg gosync.WaitGroup
	allow := func() {
		d, err := n.sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil)
		if err != nil {
			t.Error(err)
		}
		if d.Allowed {
			admitted.Add(1)
		}
	}
	wg.Go(allow)
	waitUntil(t, "the first call is in the store", func() bool { return f.Waiting() == 1 })
	for range 10 {
		wg.Go(allow)
	}
	waitUntil(t, "10 calls queue", func() bool { return n.sy.Queued("k") == 10 })
	f.Heal()
	wg.Wait()
	if got := f.Calls().Allow; got != 2 {
		t.Errorf("%d store calls for 11 Allows, want 2 (one, then the 10 queued together)", got)
	}
	if got := admitted.Load(); got != 5 {
		t.Errorf("admitted %d, want 5", got)
	}
	wantStored(t, f.Inner(), "k", clock.Now(), 5)
}

// TestGroupAtMostMaxGroup: one store call decides at most MaxGroup of the
// calls that queued; the rest go in the next.
func TestGroupAtMostMaxGroup(t *testing.T) {
	clock := fakeclock.New(start)
	f := memory.NewFaulty(memory.New())
	n := newNode(t, "n", 0, f, clock, clustersync.Config{CallTimeout: time.Minute})
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 1e6}}}
	f.Hang()
	var wg gosync.WaitGroup
	allow := func() {
		if _, err := n.sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil); err != nil {
			t.Error(err)
		}
	}
	wg.Go(allow)
	waitUntil(t, "the first call is in the store", func() bool { return f.Waiting() == 1 })
	queued := clustersync.MaxGroup + 1
	for range queued {
		wg.Go(allow)
	}
	waitUntil(t, "the calls queue", func() bool { return n.sy.Queued("k") == queued })
	f.Heal()
	wg.Wait()
	if got := f.Calls().Allow; got != 3 {
		t.Errorf("%d store calls for 1 + %d Allows, want 3 (one, then %d, then 1)", got, queued, clustersync.MaxGroup)
	}
	wantStored(t, f.Inner(), "k", clock.Now(), float64(1+queued))
}

// TestGroupBeyondExactSumsOneAtATime: a group whose largest own total
// and costs sum to 2^53 micro-hits or more, past float64's exact
// integers, which a store may sum in, goes to the store one call at a
// time; one just below goes as one group. A total of releases counts by
// its size.
func TestGroupBeyondExactSumsOneAtATime(t *testing.T) {
	const exact = int64(1) << 53
	for _, tc := range []struct {
		name  string
		sign  float64 // of the increments before
		below int64   // how far own + costs is below 2^53
		calls int64   // store calls for the 2 queued
	}{
		{"at 2^53", 1, 0, 2},
		{"below", 1, 2, 1},
		{"released, at 2^53", -1, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(start)
			f := memory.NewFaulty(memory.New())
			n := newNode(t, "n", 0, f, clock, clustersync.Config{CallTimeout: time.Minute})
			for range 9 {
				n.increment(t, "k", tc.sign*1e9)
			}
			// own: ±9e15 micro-hits, and the first Allow's 1 hit.
			own := int64(tc.sign*9e15) + ratelimit.Micro
			own = max(own, -own)
			cost := float64((exact-own-tc.below)/2) / ratelimit.Micro
			f.Hang()
			var wg gosync.WaitGroup
			allow := func(cost float64) {
				req := ratelimit.AllowRequest{Key: "k", Cost: cost, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 1e9}}, CountRejected: true}
				if _, err := n.sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil); err != nil {
					t.Error(err)
				}
			}
			before := f.Calls().Allow
			wg.Go(func() { allow(1) })
			waitUntil(t, "the first call is in the store", func() bool { return f.Waiting() == 1 })
			wg.Go(func() { allow(cost) })
			wg.Go(func() { allow(cost) })
			waitUntil(t, "2 calls queue", func() bool { return n.sy.Queued("k") == 2 })
			f.Heal()
			wg.Wait()
			if got := f.Calls().Allow - before - 1; got != tc.calls {
				t.Errorf("%d store calls for the 2 queued Allows of cost %v, want %d", got, cost, tc.calls)
			}
		})
	}
}

// TestGroupCancelled: a call whose context ends while it queues returns
// the context's error and counts nothing; a call whose context ends while
// its store call is in flight keeps the store's verdict, counted once.
func TestGroupCancelled(t *testing.T) {
	clock := fakeclock.New(start)
	f := memory.NewFaulty(memory.New())
	n := newNode(t, "n", 0, f, clock, clustersync.Config{CallTimeout: time.Minute})
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 5}}}
	f.Hang()
	leaderCtx, cancelLeader := context.WithCancel(context.Background())
	defer cancelLeader()
	type answer struct {
		d   ratelimit.Decision
		err error
	}
	leader, queued := make(chan answer, 1), make(chan answer, 1)
	go func() {
		d, err := n.sy.Calls().AllowAt(leaderCtx, clock.Now(), req, nil)
		leader <- answer{d, err}
	}()
	waitUntil(t, "the first call is in the store", func() bool { return f.Waiting() == 1 })
	queuedCtx, cancelQueued := context.WithCancel(context.Background())
	go func() {
		d, err := n.sy.Calls().AllowAt(queuedCtx, clock.Now(), req, nil)
		queued <- answer{d, err}
	}()
	waitUntil(t, "the second call queues", func() bool { return n.sy.Queued("k") == 1 })
	cancelQueued()
	if a := <-queued; !errors.Is(a.err, context.Canceled) {
		t.Errorf("queued call cancelled: err %v, want context.Canceled", a.err)
	}
	if got := n.sy.Queued("k"); got != 0 {
		t.Errorf("%d calls queued after the cancelled one left, want 0", got)
	}
	cancelLeader()
	select {
	case a := <-leader:
		t.Fatalf("the leader returned (%+v) while its store call hangs: its caller's context ended the store call", a)
	case <-time.After(50 * time.Millisecond):
	}
	if got := f.Waiting(); got != 1 {
		t.Errorf("the leader's store call ended with its caller's context (%d waiting)", got)
	}
	f.Heal()
	a := <-leader
	if a.err != nil || !a.d.Allowed || a.d.Limits[0].Rate != 1 {
		t.Errorf("leader cancelled in flight: allowed %v, rate %v, err %v; want the store's verdict: true, 1, nil", a.d.Allowed, a.d.Limits, a.err)
	}
	if c := f.Calls(); c.Faulted != 0 {
		t.Errorf("%d store calls faulted, want 0", c.Faulted)
	}
	wantStored(t, f.Inner(), "k", clock.Now(), 1)
}

// TestGroupStoreDown: while the store fails, concurrent calls of one key
// answer from local counts (never an error), and once it is back every
// hit they counted reaches it.
func TestGroupStoreDown(t *testing.T) {
	clock := fakeclock.New(start)
	f := memory.NewFaulty(memory.New())
	n := newNode(t, "n", 0, f, clock, clustersync.Config{CallTimeout: time.Second})
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 20}}}
	f.Fail(nil)
	var admitted atomic.Int64
	var wg gosync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 4 {
				d, err := n.sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil)
				if err != nil {
					t.Error(err)
				}
				if d.Allowed {
					admitted.Add(1)
				}
				if _, err := n.sy.Calls().IncrementAt(context.Background(), clock.Now(), "i", 0, 1, nil); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if got := admitted.Load(); got != 20 {
		t.Errorf("admitted %d from local counts, want 20", got)
	}
	f.Heal()
	clock.Add(2 * time.Second) // past the presumption of a failed store
	if err := n.sy.SyncOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantStored(t, f.Inner(), "k", clock.Now(), 20)
	wantStored(t, f.Inner(), "i", clock.Now(), 32)
}

// TestGroupIncrementOrder: one group of Increments and Rates over
// different sizes answers each call with the totals just after it, size
// by size, as the calls one by one in arrival order would.
func TestGroupIncrementOrder(t *testing.T) {
	clock := fakeclock.New(start)
	f := memory.NewFaulty(memory.New())
	n := newNode(t, "n", 0, f, clock, clustersync.Config{CallTimeout: time.Minute})
	f.Hang()
	type step struct {
		rate  bool
		size  time.Duration
		value float64
		want  []float64 // per size asked, ascending
	}
	steps := []step{
		{size: 0, value: 1, want: []float64{1, 1}}, // the leader, alone
		{size: 0, value: 1, want: []float64{2, 2}},
		{size: time.Second, value: 2, want: []float64{4}},
		{rate: true, size: 0, value: 0.5, want: []float64{4.5, 2.5}},
		{size: time.Minute, value: 4, want: []float64{6}},
		{rate: true, size: time.Minute, value: 0, want: []float64{6}},
	}
	got := make([][]ratelimit.Rate, len(steps))
	var wg gosync.WaitGroup
	for i, s := range steps {
		wg.Go(func() {
			var err error
			if s.rate {
				got[i], err = n.sy.Calls().RateAt(context.Background(), clock.Now(), "k", s.size, s.value, nil)
			} else {
				got[i], err = n.sy.Calls().IncrementAt(context.Background(), clock.Now(), "k", s.size, s.value, nil)
			}
			if err != nil {
				t.Error(err)
			}
		})
		if i == 0 {
			waitUntil(t, "the first call is in the store", func() bool { return f.Waiting() == 1 })
		} else {
			waitUntil(t, fmt.Sprintf("%d calls queue", i), func() bool { return n.sy.Queued("k") == i })
		}
	}
	f.Heal()
	wg.Wait()
	for i, s := range steps {
		var rates []float64
		for _, r := range got[i] {
			rates = append(rates, r.Rate)
		}
		if fmt.Sprint(rates) != fmt.Sprint(s.want) {
			t.Errorf("call %d (rate %v, size %v, value %v): rates %v, want %v", i, s.rate, s.size, s.value, rates, s.want)
		}
	}
	if c := f.Calls(); c.PushFetch != 2 {
		t.Errorf("%d store calls for %d calls, want 2", c.PushFetch, len(steps))
	}
	wantStored(t, f.Inner(), "k", clock.Now(), 6)
}

// TestGroupAllowOrder: one group of Allows with different limits, costs
// and CountRejected is decided in arrival order, each against the totals
// the calls before it left.
func TestGroupAllowOrder(t *testing.T) {
	clock := fakeclock.New(start)
	f := memory.NewFaulty(memory.New())
	n := newNode(t, "n", 0, f, clock, clustersync.Config{CallTimeout: time.Minute})
	f.Hang()
	perSec := func(l float64) ratelimit.Limit { return ratelimit.Limit{Size: time.Second, Limit: l} }
	perMin := func(l float64) ratelimit.Limit { return ratelimit.Limit{Size: time.Minute, Limit: l} }
	steps := []struct {
		req       ratelimit.AllowRequest
		allowed   bool
		wantRates []float64
	}{
		{ratelimit.AllowRequest{Cost: 1, Limits: []ratelimit.Limit{perMin(100)}}, true, []float64{1}}, // the leader, alone
		{ratelimit.AllowRequest{Cost: 1, Limits: []ratelimit.Limit{perMin(3)}}, true, []float64{2}},
		{ratelimit.AllowRequest{Cost: 1, Limits: []ratelimit.Limit{perSec(1)}}, false, []float64{2}},
		{ratelimit.AllowRequest{Cost: 1, Limits: []ratelimit.Limit{perSec(10), perMin(3)}}, true, []float64{3, 3}},
		{ratelimit.AllowRequest{Cost: 2, CountRejected: true, Limits: []ratelimit.Limit{perMin(3)}}, false, []float64{5}},
		{ratelimit.AllowRequest{Cost: 0, Limits: []ratelimit.Limit{perSec(5), perMin(5)}}, true, []float64{5, 5}},
	}
	got := make([]ratelimit.Decision, len(steps))
	var wg gosync.WaitGroup
	for i, s := range steps {
		s.req.Key = "k"
		wg.Go(func() {
			var err error
			if got[i], err = n.sy.Calls().AllowAt(context.Background(), clock.Now(), s.req, nil); err != nil {
				t.Error(err)
			}
		})
		if i == 0 {
			waitUntil(t, "the first call is in the store", func() bool { return f.Waiting() == 1 })
		} else {
			waitUntil(t, fmt.Sprintf("%d calls queue", i), func() bool { return n.sy.Queued("k") == i })
		}
	}
	f.Heal()
	wg.Wait()
	for i, s := range steps {
		var rates []float64
		for _, l := range got[i].Limits {
			rates = append(rates, l.Rate)
		}
		if got[i].Allowed != s.allowed || fmt.Sprint(rates) != fmt.Sprint(s.wantRates) {
			t.Errorf("call %d: allowed %v, rates %v; want %v, %v", i, got[i].Allowed, rates, s.allowed, s.wantRates)
		}
	}
	if c := f.Calls(); c.Allow != 2 {
		t.Errorf("%d store calls for %d Allows, want 2", c.Allow, len(steps))
	}
	wantStored(t, f.Inner(), "k", clock.Now(), 5)
}
