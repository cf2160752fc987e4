package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestBucketDebt: consumption forced past a bucket's capacity (the
// cluster's excess) is kept, refuses takes until time pays it back, and
// shows as 0 left, never as a negative amount.
func TestBucketDebt(t *testing.T) {
	const hit = ratelimit.Micro
	sec := int64(time.Second)
	for _, tc := range []struct {
		name   string
		spec   ratelimit.BucketSpec
		force  int64
		payoff int64 // ns after which a take of 1 is admitted again
	}{
		// 3 tokens, 1 per second: 5 taken elsewhere leave -2, so a take
		// of 1 needs 3 refills.
		{"token", ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: 3 * hit, B: sec, C: hit}, 5 * hit, 3 * sec},
		// 2 drops, one drains per second: 4 added leave 4, so 1 more fits
		// after 3 drips.
		{"leaky", ratelimit.BucketSpec{Kind: ratelimit.LeakyLimit, A: 2 * hit, B: 2 * sec, C: sec}, 4 * hit, 3 * sec},
		// 2 per 10 s: 3 counted elsewhere refuse until the next period.
		{"fixed", ratelimit.BucketSpec{Kind: ratelimit.FixedLimit, A: 10 * sec, B: 2 * hit}, 3 * hit, 10 * sec},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := int64(1_800_000_000) * sec
			s := []ratelimit.BucketState{tc.spec.Init(start)}
			tc.spec.Force(&s[0], start, tc.force)
			used := []int64{0}
			for _, at := range []int64{start, start + tc.payoff - 1} {
				before := s[0]
				if ratelimit.TakeBuckets([]ratelimit.BucketSpec{tc.spec}, s, used, at, hit) {
					t.Fatalf("a take of 1 at +%v admitted from a bucket in debt %+v", time.Duration(at-start), before)
				}
				if tc.spec.Kind == ratelimit.TokenLimit && at == start && s[0].Level != before.Level {
					t.Errorf("a refused take forgave the debt: level %d, was %d", s[0].Level, before.Level)
				}
			}
			if !ratelimit.TakeBuckets([]ratelimit.BucketSpec{tc.spec}, s, used, start+tc.payoff, hit) || used[0] != hit {
				t.Errorf("a take of 1 at +%v: refused or used %d, want admitted, used %d", time.Duration(tc.payoff), used[0], hit)
			}
		})
	}
}

// TestBucketSpecForStores: what a store keys and keeps a bucket by. The
// store key names kind, parameters and key; Validate accepts only the
// specs limitd builds (a leaky bucket's drip follows from its size and
// interval); Hold is twice the time from empty to idle.
func TestBucketSpecForStores(t *testing.T) {
	for _, tc := range []struct {
		limit ratelimit.Limit
		key   string
		hold  time.Duration
	}{
		// 4 tokens, 1 each 2 s: empty to full in 4 refills.
		{ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 4, RefillTime: 2 * time.Second, RefillAmount: 1}}, "t/4000000/2000000000/1000000/k", 16 * time.Second},
		// 2 drops drained each 2 s: a drop a second; full to empty in 2 s + a drip.
		{ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 2, Interval: 2 * time.Second}}, "l/2000000/2000000000/1000000000/k", 6 * time.Second},
		{ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: 10 * time.Second, Limit: 3}}, "f/10000000000/3000000/0/k", 20 * time.Second},
	} {
		ns := newNS(t, syncedConfig(time.Second), newFakeClock(epoch))
		req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{tc.limit}}
		var spec ratelimit.BucketSpec
		exchange(t, ns, epoch, req, func(tx *node.BucketTx) { spec = tx.Buckets[0].Spec })
		if got := spec.StoreKey(); got != tc.key {
			t.Errorf("%s: store key %q, want %q", tc.limit.Kind, got, tc.key)
		}
		if got := spec.Hold(); got != tc.hold {
			t.Errorf("%s: hold %v, want %v", tc.limit.Kind, got, tc.hold)
		}
		if err := spec.Validate(); err != nil {
			t.Errorf("%s: %v", tc.limit.Kind, err)
		}
		spec.C++
		if tc.limit.Kind != ratelimit.TokenLimit && tc.limit.Kind != ratelimit.FixedLimit {
			if err := spec.Validate(); err == nil {
				t.Errorf("%s with another drip: valid", tc.limit.Kind)
			}
		}
	}
}

// TestBucketExchangeAndTick: the exchanges a syncer makes of a synced
// namespace's buckets. An exchange that decides counts its take when the
// store admitted it, or, without a verdict, when the node admits it; not
// when the store refused it. A tick's answer of another life of the
// bucket is ignored; one of its life is taken, with the node's
// consumption the store does not hold yet applied on top.
func TestBucketExchangeAndTick(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second), newFakeClock(epoch))
	fixed := ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Minute, Limit: 10}}
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{fixed}}
	own := func() int64 {
		t.Helper()
		bs := bucketTick(ns, epoch).Buckets
		if len(bs) != 1 {
			t.Fatalf("%d buckets to sync, want 1", len(bs))
		}
		return bs[0].Own / ratelimit.Micro
	}
	for _, step := range []struct {
		v    node.Verdict
		want int64
	}{{node.StoreDenied, 0}, {node.StoreAllowed, 1}, {node.NoVerdict, 2}} {
		exchange(t, ns, epoch, req, func(tx *node.BucketTx) { tx.Decide, tx.Verdict = true, step.v })
		if got := own(); got != step.want {
			t.Fatalf("after a take decided with verdict %v: %d counted, want %d", step.v, got, step.want)
		}
	}
	allow(t, ns, epoch, req) // 3 counted here
	tk := bucketTick(ns, epoch)
	mine := &tk.Buckets[0]
	// The store holds 1 of the 3, and 4 of other nodes.
	after := mine.Spec.Init(epoch.UnixNano())
	mine.Spec.Force(&after, epoch.UnixNano(), 5*ratelimit.Micro)
	other := *mine
	other.Life++
	full := after
	full.Level = 10 * ratelimit.Micro
	other.Got, other.After, other.Applied, other.Seq = true, full, ratelimit.Micro, 1
	mine.Got, mine.After, mine.Applied, mine.Seq = true, after, ratelimit.Micro, 1
	tk.Buckets = append([]node.BucketSync{other}, tk.Buckets...)
	ns.ApplyTick(tk)
	// 5 stored + 2 not yet: 3 more fit, then none.
	if !allow(t, ns, epoch, ratelimit.AllowRequest{Key: "k", Cost: 3, Limits: []ratelimit.Limit{fixed}}).Allowed {
		t.Error("a take of 3 after the store's 5 and the node's 2 unsent: refused")
	}
	if allow(t, ns, epoch, req).Allowed {
		t.Error("a take of 1 from the full bucket: admitted")
	}
}

// TestBucketsSynced: a bucket counts as synced once a store's answer was
// taken for it, not when it is not held, nor when only locked.
func TestBucketsSynced(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second), newFakeClock(epoch))
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Minute, Limit: 10}}}}
	if ns.BucketsSynced(&req) {
		t.Fatal("a bucket not held: synced")
	}
	var spec ratelimit.BucketSpec
	exchange(t, ns, epoch, req, func(tx *node.BucketTx) { spec = tx.Buckets[0].Spec })
	if ns.BucketsSynced(&req) {
		t.Fatal("a bucket held, never answered for: synced")
	}
	exchange(t, ns, epoch, req, func(tx *node.BucketTx) {
		b := &tx.Buckets[0]
		b.Got, b.After, b.Applied, b.Seq = true, spec.Init(epoch.UnixNano()), 0, 1
	})
	if !ns.BucketsSynced(&req) {
		t.Error("a bucket the store answered for: not synced")
	}
}

// exchange checks req and runs fn in an exchange of its buckets at t, as
// a syncer's call does, returning the decision.
func exchange(t *testing.T, ns *node.Namespace, at time.Time, req ratelimit.AllowRequest, fn func(*node.BucketTx)) ratelimit.Decision {
	t.Helper()
	c, err := ns.CheckAllow(req)
	if err != nil {
		t.Fatal(err)
	}
	d, err := ns.ExchangeBuckets(at, req, &c, nil, func(tx *node.BucketTx) error {
		fn(tx)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// bucketTick takes a tick of every bucket of ns at t.
func bucketTick(ns *node.Namespace, at time.Time) *node.Tick {
	tk := new(node.Tick)
	ns.TakeTick(at, tk, node.AllBuckets)
	return tk
}

// TestBucketApplyAtByKind: the time a tick asks the store to apply a
// bucket's unconfirmed consumption at is its first take for a token or
// leaky bucket (whose refills or drips run from it) and its last for a
// fixed bucket (counted in the newest period); once the store holds all
// of it, the next take starts anew, and what a call did not carry (taken
// after it was sent) counts from the call's time.
func TestBucketApplyAtByKind(t *testing.T) {
	for _, tc := range []struct {
		l     ratelimit.Limit
		first bool
	}{
		{ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 10, RefillTime: time.Minute}}, true},
		{ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 10, Interval: time.Minute}}, true},
		{ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Minute, Limit: 10}}, false},
	} {
		t.Run(tc.l.Kind.String(), func(t *testing.T) {
			ns := newNS(t, syncedConfig(time.Second), newFakeClock(epoch))
			req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{tc.l}}
			t1, t2, t3, t4 := epoch.Add(time.Second), epoch.Add(2*time.Second), epoch.Add(3*time.Second), epoch.Add(4*time.Second)
			pick := func(first, last time.Time) int64 {
				if tc.first {
					return first.UnixNano()
				}
				return last.UnixNano()
			}
			applyAt := func(when string, at time.Time, want int64) {
				t.Helper()
				if bs := bucketTick(ns, at).Buckets; len(bs) != 1 || bs[0].ApplyAt != want {
					t.Errorf("%s: buckets to sync %+v, want one to apply at %d", when, bs, want)
				}
			}
			allow(t, ns, t1, req)
			allow(t, ns, t2, req)
			applyAt("two takes", t2, pick(t1, t2))
			// A call at t3 finds the store holding the first take only:
			// the second counts from the call's time.
			var spec ratelimit.BucketSpec
			exchange(t, ns, t3, ratelimit.AllowRequest{Key: "k", Limits: req.Limits}, func(tx *node.BucketTx) {
				spec = tx.Buckets[0].Spec
				b := &tx.Buckets[0]
				b.Got, b.After, b.Applied, b.Seq = true, spec.Init(t1.UnixNano()), ratelimit.Micro, 1
			})
			applyAt("one take confirmed", t3, pick(t3, t2))
			// The store holds both: the next take starts anew.
			exchange(t, ns, t3, ratelimit.AllowRequest{Key: "k", Limits: req.Limits}, func(tx *node.BucketTx) {
				b := &tx.Buckets[0]
				b.Got, b.After, b.Applied, b.Seq = true, spec.Init(t1.UnixNano()), 2*ratelimit.Micro, 2
			})
			allow(t, ns, t4, req)
			applyAt("a take after all were confirmed", t4, t4.UnixNano())
		})
	}
}

// TestBucketLiveCallDecidedAfterItsWait: a live call's exchange runs at
// the clock once its buckets are locked (here 300 ms after the time the
// call came in with, as after a wait behind another call's store
// exchange), and its decision says so; a call whose client gave the
// time runs at that time.
func TestBucketLiveCallDecidedAfterItsWait(t *testing.T) {
	clock := newFakeClock(epoch)
	ns := newNS(t, syncedConfig(time.Second), clock)
	limits := []ratelimit.Limit{{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 10, RefillTime: time.Second}}}
	came := epoch
	clock.Advance(300 * time.Millisecond)
	for _, live := range []bool{true, false} {
		req := ratelimit.AllowRequest{Key: fmt.Sprint("k-", live), Cost: 1, Limits: limits, Live: live}
		var at time.Time
		d := exchange(t, ns, came, req, func(tx *node.BucketTx) {
			tx.Decide = true
			at = tx.At
		})
		want, wantD := came, time.Time{}
		if live {
			want, wantD = clock.Now(), clock.Now()
		}
		if !at.Equal(want) || !d.At.Equal(wantD) || !d.Allowed {
			t.Errorf("live %v: exchange at %v, decision at %v (allowed %v); want %v, %v, allowed", live, at, d.At, d.Allowed, want, wantD)
		}
	}
}

// A store's refusal stands though this node's view of the bucket has room
// (a call the store took for a replay of an older one decides nothing),
// and nothing is counted for it: were it admitted, it would be admitted
// uncounted.
func TestBucketStoreRefusalStands(t *testing.T) {
	clock := newFakeClock(epoch)
	ns := newNS(t, syncedConfig(time.Second), clock)
	limits := []ratelimit.Limit{{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 10, RefillTime: time.Second}}}
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: limits}
	d := exchange(t, ns, clock.Now(), req, func(tx *node.BucketTx) {
		tx.Decide = true
		tx.Verdict = node.StoreDenied
	})
	if d.Allowed {
		t.Fatal("the store refused, the node admitted")
	}
	tk := bucketTick(ns, clock.Now())
	if len(tk.Buckets) != 1 || tk.Buckets[0].Own != 0 {
		t.Fatalf("after a refused take, the tick carries %+v; want the bucket with nothing consumed", tk.Buckets)
	}
}
