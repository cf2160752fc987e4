package strategytest

import (
	"fmt"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// testReset: a reset (clustersync.Calls.ResetAt) needs nothing of a
// store but its Push and Fetch, PushFetch, change reads and atomic
// Allow summing every incarnation's rows, a reset's own included: taken
// at one node, the key's counts read 0 in the store at once and on the
// other node after its next tick, in the current and the previous
// windows; hits counted since count; a reset taken again, or its rows
// pushed again, is harmless; the other keys are untouched.
func testReset(t *testing.T, e *env) {
	now := time.Now()
	type member struct {
		ns  *node.Namespace
		sy  *clustersync.Syncer
		inc string
	}
	var nodes [2]member
	for i := range nodes {
		ns, err := node.NewNamespace(node.Config{Name: e.ns, WindowSizes: []time.Duration{time.Minute, time.Hour}, Shared: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		inc := e.inc(fmt.Sprintf("n%d", i))
		sy, err := clustersync.NewSyncer(ns, clustersync.Periodic{Period: time.Minute}, e.s, inc, clustersync.NewVersions(time.Now), clustersync.Config{TickTimeout: callTimeout}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = member{ns, sy, inc}
	}
	const hit = 1_000_000
	ticks := func() {
		t.Helper()
		for _, n := range nodes {
			if err := n.sy.SyncOnce(ctx(t, callTimeout)); err != nil {
				t.Fatalf("SyncOnce: %v", err)
			}
		}
	}
	count := func(i int, key string, v float64, at time.Time) {
		t.Helper()
		if _, err := nodes[i].ns.IncrementAt(at, key, 0, v, nil); err != nil {
			t.Fatal(err)
		}
	}
	// rate is node i's rate of key in the window of size at now.
	rate := func(i int, key string, size time.Duration) float64 {
		t.Helper()
		rs, err := nodes[i].ns.RateAt(now, key, size, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		return rs[0].Rate
	}
	wantRates := func(when, key string, want float64) {
		t.Helper()
		for i := range nodes {
			for _, size := range []time.Duration{time.Minute, time.Hour} {
				if got := rate(i, key, size); got != want {
					t.Errorf("%s: node %d: rate of %q per %s = %g, want %g", when, i, key, size, got, want)
				}
			}
		}
	}
	// Hits in this minute and in the last one, at both nodes.
	before := now.Add(-time.Minute)
	count(0, "k", 3, now)
	count(0, "k", 2, before)
	count(1, "k", 4, now)
	count(1, "other", 5, now)
	count(0, "other", 1, now)
	ticks()
	ticks()
	if got := rate(1, "k", time.Minute); got < 7 {
		t.Fatalf("rate of k per minute before the reset = %g, want at least 7", got)
	}
	if err := nodes[0].sy.Calls().ResetAt(ctx(t, callTimeout), now, "k"); err != nil {
		t.Fatalf("ResetAt: %v", err)
	}
	for _, size := range []time.Duration{time.Minute, time.Hour} {
		for _, start := range []int64{ratelimit.WindowStart(now.UnixNano(), size), ratelimit.WindowStart(now.UnixNano(), size) - int64(size)} {
			e.wantWindow(t, clustersync.WindowKey{Namespace: e.ns, Size: size, Start: start, Key: "k"}, 0)
		}
	}
	if got := rate(0, "k", time.Minute); got != 0 {
		t.Errorf("the resetting node's rate right after the reset = %g, want 0", got)
	}
	ticks()
	wantRates("one tick after the reset", "k", 0)
	wantRates("one tick after the reset", "other", 6)

	if ga, ok := e.s.(clustersync.GroupAllower); ok {
		// Node 1's own 4 hits of this minute stay in its row; the store
		// decides with the reset's rows: 0 counted, so 1 hit of 1 fits.
		at := now.UnixNano()
		res, err := AllowOne(ctx(t, callTimeout), ga, OneAllow{Inc: nodes[1].inc, At: at, Cost: hit,
			Limits: []OneLimit{e.allowLimit(clustersync.WindowKey{Namespace: e.ns, Key: "k"}, time.Minute, hit, 4*hit, 0, at, time.Now().UnixMicro())}})
		if err != nil {
			t.Fatalf("Allow: %v", err)
		}
		if !res.Allowed || res.Others[0][0] != -4*hit {
			t.Errorf("Allow of 1 hit under 1 after the reset: allowed %v, others %v; want true, others −4 hits (the reset's cancelling node 1's own)", res.Allowed, res.Others[0])
		}
		count(1, "k", 1, now) // as the store counted it
	} else {
		count(1, "k", 1, now)
	}
	count(0, "k", 2, now)
	ticks()
	ticks()
	wantRates("after 3 hits since the reset", "k", 3)

	// Again, at the other node, twice: the hits since are forgotten,
	// nothing more.
	for range 2 {
		if err := nodes[1].sy.Calls().ResetAt(ctx(t, callTimeout), now, "k"); err != nil {
			t.Fatalf("ResetAt: %v", err)
		}
	}
	ticks()
	wantRates("after the second reset", "k", 0)
	wantRates("after the second reset", "other", 6)
	count(1, "k", 1, now)
	ticks()
	ticks()
	wantRates("after 1 hit since the second reset", "k", 1)
}

// testBucketReset: a reset call (BucketCall.Reset) catches the caller up
// and then makes the bucket a new one at the call's time, of every kind,
// also a bucket the store does not hold; the records stay, so an
// incarnation's old totals are not applied again and what another
// incarnation had not sent arrives on top of the new state; a reset
// replayed with its Version changes nothing more. Every answer is the
// reference's.
func testBucketReset(t *testing.T, e *env) {
	ms := int64(time.Millisecond)
	for _, b := range []ratelimit.BucketSpec{
		tokenSpec(e.ns+"reset", 3*hit, time.Hour, 3*hit),
		{Kind: ratelimit.LeakyLimit, A: 3 * hit, B: int64(time.Hour), C: int64(time.Hour) / 3, Key: e.ns + "reset"},
		{Kind: ratelimit.FixedLimit, A: int64(time.Hour), B: 3 * hit, Key: e.ns + "reset"},
	} {
		t.Run(b.Kind.String(), func(t *testing.T) {
			ref := &bucketRef{rows: map[string]*clustersync.BucketRow{}}
			a, c := e.caller("a"), e.caller("c")
			full := func(after clustersync.BucketReply) bool {
				if b.Kind == ratelimit.TokenLimit {
					return after.After.Level == 3*hit
				}
				return after.After.Level == 0
			}
			at := e.minute + 7*ms
			for range 3 {
				e.buckets(t, ref, a, at, hit, e.bcall(a, b, at))
			}
			if ok, _ := e.buckets(t, ref, a, at, hit, e.bcall(a, b, at)); ok {
				t.Fatalf("a fourth take of 3: admitted")
			}
			at += 5 * ms
			reset := e.bcall(a, b, at)
			reset.Reset = true
			_, r := e.buckets(t, ref, a, at, 0, reset)
			if !full(r[0]) || r[0].Applied != 3*hit {
				t.Errorf("the reset: after %+v, applied %d; want a new bucket's level, applied %d", r[0].After, r[0].Applied, 3*hit)
			}
			if ok, _ := e.buckets(t, ref, a, at, hit, e.bcall(a, b, at)); !ok {
				t.Errorf("a take right after the reset: refused")
			}
			// The reset again, same Version: nothing more.
			_, r2 := e.buckets(t, ref, a, at, 0, reset)
			if full(r2[0]) {
				t.Errorf("the reset replayed: the bucket is new again, want the take since kept")
			}
			// c's unsent take arrives: it counts on top of the new state.
			c.total[b.StoreKey()] = hit
			e.buckets(t, ref, c, at, 0, e.bcall(c, b, at))
			// A reset sent anew (a new Version) resets again.
			again := e.bcall(a, b, at)
			again.Reset = true
			if _, r := e.buckets(t, ref, a, at, 0, again); !full(r[0]) {
				t.Errorf("a second reset: after %+v, want a new bucket's level", r[0].After)
			}
			// A bucket the store does not hold: made and new.
			other := b
			other.Key += "-new"
			fresh := e.bcall(c, other, at)
			fresh.Reset = true
			e.buckets(t, ref, c, at, 0, fresh)
		})
	}
}

// testLeaseClear: a LeaseClear releases every live lease of its key, and
// no other key's: each release is remembered until the later of the
// op's Expiry and the lease's own expiry, so a late Put or Acquire of it
// is refused; a clear again, or of a key with none, changes nothing.
// Every reply is the reference's.
func testLeaseClear(t *testing.T, e *env) {
	ref := leaseRef{}
	now := leaseStart()
	k, other := e.lkey("clear"), e.lkey("clear-other")
	clear := func(until int64) clustersync.LeaseOp {
		return clustersync.LeaseOp{Kind: clustersync.LeaseClear, Namespace: k.ns, Key: k.key, Expiry: until}
	}
	e.leases(t, ref, now, k.acquire("a", 3, now+10*sec), k.acquire("b", 3, now+2*sec), k.put("c", now+sec),
		other.acquire("a", 3, now+10*sec))
	if r := e.leases(t, ref, now, clear(now+5*sec), k.count()); !r[0].OK || r[0].Held != 0 || r[1].Held != 0 {
		t.Errorf("a clear of 3 live leases: %+v, then %+v; want OK, none held", r[0], r[1])
	}
	if r := e.leases(t, ref, now, other.count()); r[0].Held != 1 {
		t.Errorf("the other key after the clear: %d held, want 1", r[0].Held)
	}
	// A late put or acquire of a cleared lease is refused, also past the
	// clear's Expiry while the lease's own expiry is ahead.
	e.leases(t, ref, now+sec/2, k.put("b", now+3*sec), k.acquire("c", 3, now+3*sec), k.acquire("d", 3, now+3*sec))
	e.leases(t, ref, now+6*sec, k.put("a", now+20*sec))
	// Again, and again on a key with none: OK as the reference says.
	e.leases(t, ref, now+6*sec, clear(now+7*sec), clear(now+7*sec), k.count())
	e.leases(t, ref, now+6*sec, clustersync.LeaseOp{Kind: clustersync.LeaseClear, Namespace: e.ns, Key: "clear-none", Expiry: now + 7*sec})
	e.leases(t, ref, now+11*sec, k.acquire("a", 3, now+20*sec), k.count())
}
