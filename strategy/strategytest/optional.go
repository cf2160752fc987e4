package strategytest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// call is one store method bound to its arguments, for the subtests that
// try every method the same way.
type call struct {
	name string
	do   func(ctx context.Context) error
}

// calls returns every method of e's store (the optional ones when it has
// them), each on a fresh window of e.
func (e *env) calls(inc string) []call {
	k := e.key("calls-" + randomHex(4))
	cs := []call{
		{"Push", func(c context.Context) error {
			return e.s.Push(c, inc, []clustersync.Row{e.row(k, 1_000_000)})
		}},
		{"Fetch", func(c context.Context) error {
			return e.s.Fetch(c, inc, []clustersync.WindowKey{k}, make([]int64, 1))
		}},
	}
	if w, ok := e.s.(clustersync.Windower); ok {
		cs = append(cs, call{"Window", func(c context.Context) error {
			_, err := w.Window(c, k)
			return err
		}})
	}
	if pf, ok := e.s.(clustersync.PushFetcher); ok {
		cs = append(cs, call{"PushFetch", func(c context.Context) error {
			return pf.PushFetch(c, inc, []clustersync.Row{e.row(k, 2_000_000)}, make([]int64, 1))
		}})
	}
	if ga, ok := e.s.(clustersync.GroupAllower); ok {
		cs = append(cs, call{"AllowGroup", func(c context.Context) error {
			_, err := AllowOne(c, ga, e.allowReq(inc, time.Minute, 100_000_000, 1_000_000, 0, 0, e.minute+int64(time.Second)))
			return err
		}})
	}
	if ls, ok := e.s.(clustersync.LeaseStore); ok {
		cs = append(cs, call{"Leases", func(c context.Context) error {
			now := time.Now().UnixNano()
			op := e.lkey(k.Key).acquire("calls", 1, now+int64(time.Minute))
			return ls.Leases(c, now, []clustersync.LeaseOp{op}, make([]clustersync.LeaseReply, 1))
		}})
	}
	return cs
}

// promptly runs fn and fails t unless it returns within a second.
func promptly(t *testing.T, what string, fn func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Second):
		t.Fatalf("%s did not return within 1s", what)
		return nil
	}
}

func testCancelledContext(t *testing.T, e *env) {
	a := e.inc("a")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, tc := range []struct {
		name string
		ctx  context.Context
	}{{"cancelled", cancelled}, {"past deadline", expired}} {
		for _, c := range e.calls(a) {
			err := promptly(t, fmt.Sprintf("%s with a %s context", c.name, tc.name), func() error { return c.do(tc.ctx) })
			switch {
			case err == nil:
				t.Errorf("%s with a %s context: got nil error, want an error", c.name, tc.name)
			case !errors.Is(err, tc.ctx.Err()) && !errors.Is(err, clustersync.ErrUnavailable):
				t.Errorf("%s with a %s context: error %q wraps neither %v nor clustersync.ErrUnavailable", c.name, tc.name, err, tc.ctx.Err())
			}
		}
	}
	// Not required by the contract (on error a push may or may not have
	// been applied), but worth knowing.
	k := e.key("cancelled-push")
	if err := e.s.Push(cancelled, a, []clustersync.Row{e.row(k, 1_000_000)}); err != nil {
		if n := e.window(t, k); n != 0 {
			t.Logf("note: a Push with a cancelled context failed (%v) but its row was applied", err)
		}
	}
	// The store still works with a live context.
	k = e.key("after")
	e.push(t, a, e.row(k, 3_000_000))
	e.wantWindow(t, k, 3_000_000)
}

func testClosed(t *testing.T, e *env) {
	a := e.inc("a")
	calls := e.calls(a) // before Close: building them reads no store
	if err := e.s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, c := range calls {
		err := promptly(t, c.name+" after Close", func() error { return c.do(context.Background()) })
		if !errors.Is(err, clustersync.ErrClosed) {
			t.Errorf("%s after Close: error = %v, want one wrapping clustersync.ErrClosed", c.name, err)
		}
	}
	if err := promptly(t, "second Close", e.s.Close); !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("second Close: error = %v, want one wrapping clustersync.ErrClosed", err)
	}
}

// testWindow checks Window against Fetch by an incarnation that never
// wrote: both are the sum over every incarnation. (The other subtests read
// sums through Window too when the store has it.)
func testWindow(t *testing.T, e *env) {
	w := as[clustersync.Windower](t, e)
	a, b := e.inc("a"), e.inc("b")
	k, unknown := e.key("k"), e.key("unknown")
	e.push(t, a, e.row(k, 2_500_000))
	e.push(t, b, e.row(k, -500_000))
	keys, want := []clustersync.WindowKey{k, unknown}, []int64{2_000_000, 0}
	fetched := e.fetch(t, e.inc("reader"), keys...)
	for i, key := range keys {
		got, err := w.Window(ctx(t, callTimeout), key)
		if err != nil {
			t.Fatalf("Window(%s): %v", show(key), err)
		}
		if got != want[i] || fetched[i] != want[i] {
			t.Errorf("%s: Window = %d, Fetch by a reader = %d, want %d", show(key), got, fetched[i], want[i])
		}
	}
}

func testPushFetch(t *testing.T, e *env) {
	pf := as[clustersync.PushFetcher](t, e)
	a, b := e.inc("a"), e.inc("b")
	k1, k2 := e.key("k1"), e.key("k2")
	pushFetch := func(inc string, rows []clustersync.Row, want []int64) {
		t.Helper()
		others := make([]int64, len(rows))
		for i := range others {
			others[i] = unset
		}
		if err := pf.PushFetch(ctx(t, callTimeout), inc, rows, others); err != nil {
			t.Fatalf("PushFetch(%d rows): %v", len(rows), err)
		}
		for i := range rows {
			if others[i] != want[i] {
				t.Errorf("PushFetch by %s: others[%d] (%s) = %d, want %d", inc, i, show(rows[i].WindowKey), others[i], want[i])
			}
		}
	}

	e.push(t, b, e.row(k1, 2_000_000))
	old := e.row(k1, 9_000_000)
	first := []clustersync.Row{e.row(k1, 3_000_000), e.row(k2, 1_000_000)}
	pushFetch(a, first, []int64{2_000_000, 0})
	e.wantWindow(t, k1, 5_000_000)
	e.wantWindow(t, k2, 1_000_000)

	// Retried: counted once.
	pushFetch(a, first, []int64{2_000_000, 0})
	e.wantWindow(t, k1, 5_000_000)
	// Older version: not applied, others still read.
	pushFetch(a, []clustersync.Row{old}, []int64{2_000_000})
	e.wantWindow(t, k1, 5_000_000)
	// Newer version from b sees a's row.
	pushFetch(b, []clustersync.Row{e.row(k1, 4_000_000), e.row(k2, -500_000)}, []int64{3_000_000, 1_000_000})
	e.wantWindow(t, k1, 7_000_000)
	e.wantWindow(t, k2, 500_000)
	e.wantFetch(t, a, []clustersync.WindowKey{k1, k2}, []int64{4_000_000, -500_000})
	// A third incarnation sees both.
	pushFetch(e.inc("c"), []clustersync.Row{e.row(k1, 0)}, []int64{7_000_000})
}

// allowReq returns a one-limit request of inc at time at with own
// totals cur and prev, one new version for both rows.
func (e *env) allowReq(inc string, size time.Duration, limit, cost, cur, prev, at int64) OneAllow {
	return OneAllow{
		Inc: inc, At: at, Cost: cost,
		Limits: []OneLimit{e.allowLimit(e.key("allow"), size, limit, cur, prev, at, e.next())},
	}
}

// allowLimit returns the limit of window size holding at, for the
// namespace and key of k, with own totals cur and prev at version v.
func (e *env) allowLimit(k clustersync.WindowKey, size time.Duration, limit, cur, prev, at, v int64) OneLimit {
	start := ratelimit.WindowStart(at, size)
	ck := clustersync.WindowKey{Namespace: k.Namespace, Size: size, Start: start, Key: k.Key}
	pk := ck
	pk.Start -= int64(size)
	return OneLimit{
		Size: size, Limit: limit,
		Cur:  clustersync.Row{WindowKey: ck, Total: cur, Version: v, ExpireAt: e.exp},
		Prev: clustersync.Row{WindowKey: pk, Total: prev, Version: v, ExpireAt: e.exp},
	}
}

// testAtomicAllow: a single Allow, a group of one entry.
func testAtomicAllow(t *testing.T, e *env) {
	ga := as[clustersync.GroupAllower](t, e)
	allow := func(t *testing.T, req OneAllow) OneResult {
		t.Helper()
		res, err := AllowOne(ctx(t, callTimeout), ga, req)
		if err != nil {
			t.Fatalf("Allow: %v", err)
		}
		return res
	}
	const hit = 1_000_000
	t.Run("exact under concurrency", func(t *testing.T) { testAllowExact(t, e, ga) })

	t.Run("count rejected", func(t *testing.T) {
		a, b := e.inc("a"), e.inc("b")
		at := e.minute + int64(30*time.Second)
		for _, countRejected := range []bool{true, false} {
			k := e.key(fmt.Sprintf("count-rejected-%v", countRejected))
			e.push(t, b, e.row(k, 1*hit))
			own := int64(0)
			wantAllowed := []bool{true, true, false, false}
			for i, want := range wantAllowed {
				req := OneAllow{Inc: a, At: at, Cost: hit, CountRejected: countRejected,
					Limits: []OneLimit{e.allowLimit(k, time.Minute, 3*hit, own, 0, at, e.next())}}
				res := allow(t, req)
				if res.Allowed != want {
					t.Errorf("CountRejected=%v call %d (own %d, others %d, limit 3 hits): Allowed = %v, want %v",
						countRejected, i, own, hit, res.Allowed, want)
				}
				if got := res.Others[0]; got != [2]int64{hit, 0} {
					t.Errorf("CountRejected=%v call %d: Others[0] = %v, want [%d 0]", countRejected, i, got, hit)
				}
				if res.Allowed || countRejected {
					own += hit
				}
			}
			want := int64(1+2) * hit
			if countRejected {
				want = int64(1+4) * hit
			}
			e.wantWindow(t, k, want)
		}
	})

	t.Run("sliding previous window", func(t *testing.T) {
		a, b := e.inc("a"), e.inc("b")
		size := time.Minute
		// At 3/4 of the window the previous one weighs 1/4: own 4 + others
		// 6 = 10 previous hits count 2.5.
		k := e.key("sliding")
		at := e.minute + int64(45*time.Second)
		base := e.allowLimit(k, size, 0, 0, 0, at, 0)
		e.push(t, b, e.row(base.Prev.WindowKey, 6*hit))
		own := int64(0)
		for i, want := range []bool{true, true, false} {
			req := OneAllow{Inc: a, At: at, Cost: hit,
				Limits: []OneLimit{e.allowLimit(k, size, 4_500_000, own, 4*hit, at, e.next())}}
			res := allow(t, req)
			// rate + cost: 3.5, 4.5 (= limit: admitted), 5.5 hits.
			if res.Allowed != want {
				t.Errorf("call %d: own cur %d, prev 10 hits at 3/4, cost 1, limit 4.5 hits: Allowed = %v, want %v", i, own, res.Allowed, want)
			}
			if got := res.Others[0]; got != [2]int64{0, 6 * hit} {
				t.Errorf("call %d: Others[0] = %v, want [0 %d]", i, got, 6*hit)
			}
			if res.Allowed {
				own += hit
			}
		}
		e.wantWindow(t, base.Cur.WindowKey, 2*hit)
		e.wantWindow(t, base.Prev.WindowKey, 10*hit) // a's Prev row was written

		// The weight at several positions: others' previous total 8 hits.
		// Each limit just below rate + cost rejects (counting nothing),
		// the next admits.
		for _, tc := range []struct {
			pos           time.Duration
			reject, admit int64
		}{
			{0, 9*hit - 1, 9 * hit},
			{15 * time.Second, 7*hit - 1, 7 * hit},
			{30 * time.Second, 5*hit - 1, 5 * hit},
			{45 * time.Second, 3*hit - 1, 3 * hit},
			{size - time.Millisecond, hit + 133, hit + 134}, // 8 hits / 60000 = 133.33… micro-hits
		} {
			k := e.key(fmt.Sprintf("pos-%d", tc.pos))
			at := e.minute + int64(tc.pos)
			e.push(t, b, e.row(e.allowLimit(k, size, 0, 0, 0, at, 0).Prev.WindowKey, 8*hit))
			for _, limit := range []int64{tc.reject, tc.admit} {
				req := OneAllow{Inc: a, At: at, Cost: hit,
					Limits: []OneLimit{e.allowLimit(k, size, limit, 0, 0, at, e.next())}}
				res := allow(t, req)
				if want := limit == tc.admit; res.Allowed != want {
					t.Errorf("pos %v, previous window 8 hits, cost 1 hit, limit %d: Allowed = %v, want %v", tc.pos, limit, res.Allowed, want)
				}
			}
		}
	})

	t.Run("all limits must admit", func(t *testing.T) {
		a, b := e.inc("a"), e.inc("b")
		at := e.minute + int64(30*time.Second+500*time.Millisecond)
		limits := func(k clustersync.WindowKey, perSecond, perMinute, ownSec, ownMin int64) []OneLimit {
			v := e.next()
			return []OneLimit{
				e.allowLimit(k, time.Second, perSecond, ownSec, 0, at, v),
				e.allowLimit(k, time.Minute, perMinute, ownMin, 0, at, v),
			}
		}
		// The one-second limit binds.
		k := e.key("per-second-binds")
		own := int64(0)
		for i, want := range []bool{true, true, false} {
			res := allow(t, OneAllow{Inc: a, At: at, Cost: hit, Limits: limits(k, 2*hit, 100*hit, own, own)})
			if res.Allowed != want {
				t.Errorf("call %d (own %d; limits 2/s, 100/min): Allowed = %v, want %v", i, own, res.Allowed, want)
			}
			if res.Allowed {
				own += hit
			}
		}
		ls := limits(k, 0, 0, 0, 0)
		e.wantWindow(t, ls[0].Cur.WindowKey, 2*hit)
		e.wantWindow(t, ls[1].Cur.WindowKey, 2*hit)

		// The one-minute limit binds: b holds 99 of its 100 hits.
		k = e.key("per-minute-binds")
		ls = limits(k, 0, 0, 0, 0)
		e.push(t, b, e.row(ls[1].Cur.WindowKey, 99*hit))
		own = 0
		for i, want := range []bool{true, false} {
			res := allow(t, OneAllow{Inc: a, At: at, Cost: hit, Limits: limits(k, 10*hit, 100*hit, own, own)})
			if res.Allowed != want {
				t.Errorf("call %d (own %d, others 99 per minute; limits 10/s, 100/min): Allowed = %v, want %v", i, own, res.Allowed, want)
			}
			if got := res.Others[1]; got != [2]int64{99 * hit, 0} {
				t.Errorf("call %d: Others[1] = %v, want [%d 0]", i, got, 99*hit)
			}
			if res.Allowed {
				own += hit
			}
		}
		e.wantWindow(t, ls[0].Cur.WindowKey, 1*hit)
		e.wantWindow(t, ls[1].Cur.WindowKey, 100*hit)
	})

	t.Run("stale version writes nothing", func(t *testing.T) {
		a := e.inc("a")
		k := e.key("stale")
		at := e.minute + int64(time.Second)
		stale := e.next()
		l := e.allowLimit(k, time.Minute, 100*hit, 5*hit, 0, at, e.next())
		e.push(t, a, l.Cur)
		res := allow(t, OneAllow{Inc: a, At: at, Cost: hit,
			Limits: []OneLimit{e.allowLimit(k, time.Minute, 100*hit, 0, 0, at, stale)}})
		if !res.Allowed {
			t.Errorf("Allowed = false, want true (own 0 as sent, others 0, limit 100)")
		}
		e.wantWindow(t, l.Cur.WindowKey, 5*hit)
	})

	t.Run("large totals written exactly", func(t *testing.T) {
		// A single Allow may carry any totals: what it counts is written
		// exactly, also beyond 2^53 where float64 is not.
		a := e.inc("a")
		k := e.key("large")
		at := e.minute + int64(time.Second)
		own, prev := int64(1<<60+1), int64(1<<58+3)
		for i, tc := range []struct {
			limit         int64
			countRejected bool
			want          bool
		}{
			{math.MaxInt64, false, true}, // admitted: counted
			{hit, false, false},          // refused: not counted
			{hit, true, false},           // refused, CountRejected: counted
		} {
			l := e.allowLimit(k, time.Minute, tc.limit, own, prev, at, e.next())
			res := allow(t, OneAllow{Inc: a, At: at, Cost: hit + 1, CountRejected: tc.countRejected, Limits: []OneLimit{l}})
			if res.Allowed != tc.want {
				t.Errorf("call %d (own %d, limit %d): Allowed = %v, want %v", i, own, tc.limit, res.Allowed, tc.want)
			}
			if res.Allowed || tc.countRejected {
				own += hit + 1
			}
			e.wantWindow(t, l.Cur.WindowKey, own)
			e.wantWindow(t, l.Prev.WindowKey, prev)
		}
	})
}

// testAllowExact runs 8 incarnations × 4 goroutines against a limit of
// 100 hits and checks that exactly 100 are admitted.
func testAllowExact(t *testing.T, e *env, ga clustersync.GroupAllower) {
	const (
		hit        = 1_000_000
		limit      = 100 * hit
		incs       = 8
		goroutines = 4
		attempts   = 20 // 640 calls for 100 admissions
	)
	k := e.key("exact")
	at := e.minute + int64(30*time.Second)
	type incState struct {
		name string
		// mu serialises the incarnation's calls, as the contract requires
		// of the caller: cur is then its exact own total.
		mu  sync.Mutex
		cur int64
	}
	states := make([]*incState, incs)
	for i := range states {
		states[i] = &incState{name: e.inc(fmt.Sprintf("n%d", i))}
	}
	var admitted, rejected atomic.Int64
	c := ctx(t, 5*time.Minute)
	var wg sync.WaitGroup
	for i, st := range states {
		for g := range goroutines {
			wg.Go(func() {
				for range attempts {
					st.mu.Lock()
					l := e.allowLimit(k, time.Minute, limit, st.cur, 0, at, e.next())
					res, err := AllowOne(c, ga, OneAllow{Inc: st.name, At: at, Cost: hit, Limits: []OneLimit{l}})
					if err != nil {
						st.mu.Unlock()
						t.Errorf("incarnation %d goroutine %d: Allow: %v", i, g, err)
						return
					}
					if len(res.Others) != 1 {
						st.mu.Unlock()
						t.Errorf("incarnation %d: len(Others) = %d, want 1", i, len(res.Others))
						return
					}
					if res.Allowed {
						if seen := st.cur + res.Others[0][0] + hit; seen > limit {
							t.Errorf("incarnation %d: admitted with own %d + others %d + cost > limit %d", i, st.cur, res.Others[0][0], limit)
						}
						st.cur += hit
						admitted.Add(1)
					} else {
						rejected.Add(1)
					}
					st.mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if got := admitted.Load(); got != limit/hit {
		t.Errorf("admitted %d of %d calls, want exactly %d", got, incs*goroutines*attempts, limit/hit)
	}
	if got := rejected.Load(); got != incs*goroutines*attempts-limit/hit {
		t.Errorf("rejected %d calls, want %d", got, incs*goroutines*attempts-limit/hit)
	}
	var own int64
	for _, st := range states {
		own += st.cur
	}
	if own != limit {
		t.Errorf("sum of the incarnations' own totals = %d, want %d", own, limit)
	}
	e.wantWindow(t, windowKey(k, time.Minute, ratelimit.WindowStart(at, time.Minute)), limit)
}

func windowKey(k clustersync.WindowKey, size time.Duration, start int64) clustersync.WindowKey {
	k.Size, k.Start = size, start
	return k
}
