package strategytest

import (
	"errors"
	"fmt"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// The BucketStore subtests. Every answer is compared with the reference,
// clustersync.ApplyBuckets run here on rows kept in the test: the store
// must agree with it to the micro-hit and the nanosecond.

const hit = ratelimit.Micro

// bucketRef is the reference's rows, by namespace and store key.
type bucketRef struct {
	rows map[string]*clustersync.BucketRow
}

// bucketCaller is one incarnation's side of the bucket calls: its life,
// total and versions per bucket, as a node keeps them.
type bucketCaller struct {
	inc   string
	life  int64
	total map[string]int64
}

func (e *env) caller(name string) *bucketCaller {
	return &bucketCaller{inc: e.inc(name), life: e.next(), total: map[string]int64{}}
}

// call builds c's call for b, its total as c counted it.
func (e *env) bcall(c *bucketCaller, b ratelimit.BucketSpec, at int64) clustersync.BucketCall {
	return clustersync.BucketCall{Namespace: e.ns, Bucket: b, Life: c.life, Total: c.total[b.StoreKey()],
		ApplyAt: at, Version: e.next(), ExpireAt: e.exp}
}

// buckets sends calls to the store and to the reference, compares their
// answers, and counts what the store applied in c's totals.
func (e *env) buckets(t *testing.T, ref *bucketRef, c *bucketCaller, at, take int64, calls ...clustersync.BucketCall) (bool, []clustersync.BucketReply) {
	t.Helper()
	allowed, replies, err := e.tryBuckets(t, ref, c, at, take, calls...)
	if err != nil {
		t.Fatalf("Buckets: %v", err)
	}
	return allowed, replies
}

// tryBuckets is buckets returning the store's error: for calls made off
// the test's goroutine, where t.Fatal must not be called (it would also
// skip the caller's unlocks).
func (e *env) tryBuckets(t *testing.T, ref *bucketRef, c *bucketCaller, at, take int64, calls ...clustersync.BucketCall) (bool, []clustersync.BucketReply, error) {
	t.Helper()
	bs := as[clustersync.BucketStore](t, e)
	replies := make([]clustersync.BucketReply, len(calls))
	allowed, err := bs.Buckets(ctx(t, callTimeout), c.inc, at, take, calls, replies)
	if err != nil {
		return false, nil, err
	}
	if ref != nil {
		rows := make([]*clustersync.BucketRow, len(calls))
		for i := range calls {
			rows[i] = ref.rows[calls[i].Bucket.StoreKey()]
		}
		want := make([]clustersync.BucketReply, len(calls))
		changed := make([]bool, len(calls))
		wantAllowed := clustersync.ApplyBuckets(c.inc, at, take, calls, rows, want, changed)
		for i := range calls {
			ref.rows[calls[i].Bucket.StoreKey()] = rows[i]
			w, g := want[i], replies[i]
			w.Seq, g.Seq = 0, 0 // write counts may differ in steps; order is checked apart
			if w != g {
				t.Errorf("Buckets(take %d at %d) bucket %s:\n got %+v\nwant %+v", take, at, calls[i].Bucket.StoreKey(), g, w)
			}
		}
		if allowed != wantAllowed {
			t.Errorf("Buckets(take %d at %d): allowed = %v, want %v", take, at, allowed, wantAllowed)
		}
	}
	for i := range calls {
		if replies[i].Applied > c.total[calls[i].Bucket.StoreKey()] {
			c.total[calls[i].Bucket.StoreKey()] = replies[i].Applied
		}
	}
	return allowed, replies, nil
}

func tokenSpec(key string, max, refill time.Duration, amount int64) ratelimit.BucketSpec {
	return ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: int64(max), B: int64(refill), C: amount, Key: key}
}

func testBucketArithmetic(t *testing.T, e *env) {
	ms := int64(time.Millisecond)
	leaky := ratelimit.BucketSpec{Kind: ratelimit.LeakyLimit, A: 10 * hit, B: int64(time.Second), C: int64(100 * time.Millisecond), Key: "l"}
	for _, tc := range []struct {
		name string
		b    ratelimit.BucketSpec
	}{
		{"token", ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: 5 * hit, B: 100 * ms, C: 2 * hit, Key: "t"}},
		{"token strict", ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: 3 * hit, B: 50 * ms, C: 3 * hit, Key: "ts", Strict: true}},
		{"leaky", leaky},
		{"fixed", ratelimit.BucketSpec{Kind: ratelimit.FixedLimit, A: 200 * ms, B: 4 * hit, Key: "f"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := &bucketRef{rows: map[string]*clustersync.BucketRow{}}
			a, b := e.caller("a"), e.caller("b")
			at := e.minute + 7*ms
			// Takes of 1, 1.5 and 0 at growing times from a, and b's
			// consumption caught up (past the capacity: debt) now and
			// then.
			for i := range 40 {
				at += int64(i%7) * 9 * ms
				take := []int64{hit, 3 * hit / 2, 0, hit}[i%4]
				if i%9 == 4 {
					b.total[tc.b.StoreKey()] += 4 * hit
					e.buckets(t, ref, b, at, 0, e.bcall(b, tc.b, at-3*ms))
				}
				e.buckets(t, ref, a, at, take, e.bcall(a, tc.b, at))
			}
		})
	}
}

func testBucketRetry(t *testing.T, e *env) {
	ref := &bucketRef{rows: map[string]*clustersync.BucketRow{}}
	a := e.caller("a")
	b := tokenSpec(e.ns+"retry", 3*hit, time.Hour, 3*hit)
	at := e.minute
	call := e.bcall(a, b, at)
	ok1, r1 := e.buckets(t, ref, a, at, hit, call)
	// The same call again, as after a timeout: it takes nothing more.
	ok2, r2 := e.buckets(t, ref, a, at, hit, call)
	if !ok1 || !ok2 {
		t.Errorf("a take of 1 of 3 tokens and its retry: allowed %v, %v; want true, true", ok1, ok2)
	}
	if r2[0].After.Level != 2*hit || r2[0].Applied != hit || r1[0].Applied != hit {
		t.Errorf("after a take of 1 of 3 tokens and its retry: level %d, applied %d (first reply %d); want %d, %d, %d",
			r2[0].After.Level, r2[0].Applied, r1[0].Applied, 2*hit, hit, hit)
	}
	// A late call (an older version) changes nothing and is not admitted.
	late := call
	late.Version = call.Version - 1
	if ok, r := e.buckets(t, ref, a, at, hit, late); ok || r[0].After.Level != 2*hit {
		t.Errorf("a late call: allowed %v, level %d; want false, %d", ok, r[0].After.Level, 2*hit)
	}
	// The next call takes again.
	if ok, r := e.buckets(t, ref, a, at, hit, e.bcall(a, b, at)); !ok || r[0].After.Level != hit {
		t.Errorf("the next take: allowed %v, level %d; want true, %d", ok, r[0].After.Level, hit)
	}
}

func testBucketCatchUp(t *testing.T, e *env) {
	ref := &bucketRef{rows: map[string]*clustersync.BucketRow{}}
	a, b := e.caller("a"), e.caller("b")
	spec := tokenSpec(e.ns+"catchup", 10*hit, time.Hour, 10*hit)
	at := e.minute
	// b counted 4 while away: sent twice (a retry, then a late copy), it
	// is applied once.
	b.total[spec.StoreKey()] = 4 * hit
	for range 2 {
		_, r := e.buckets(t, ref, b, at, 0, e.bcall(b, spec, at))
		if r[0].After.Level != 6*hit || r[0].Applied != 4*hit {
			t.Fatalf("b's 4 caught up: level %d, applied %d; want %d, %d", r[0].After.Level, r[0].Applied, 6*hit, 4*hit)
		}
	}
	// An older total applies nothing.
	old := e.bcall(b, spec, at)
	old.Total = 2 * hit
	if _, r := e.buckets(t, ref, b, at, 0, old); r[0].After.Level != 6*hit {
		t.Errorf("an older total: level %d, want %d", r[0].After.Level, 6*hit)
	}
	// a sees b's consumption and its own take; a's take in a new life of
	// the bucket starts a new record.
	if ok, r := e.buckets(t, ref, a, at, 5*hit, e.bcall(a, spec, at)); !ok || r[0].After.Level != hit {
		t.Errorf("a takes 5 of 6: allowed %v, level %d; want true, %d", ok, r[0].After.Level, hit)
	}
	a.life = e.next()
	a.total = map[string]int64{spec.StoreKey(): 3 * hit}
	if _, r := e.buckets(t, ref, a, at, 0, e.bcall(a, spec, at)); r[0].After.Level != -2*hit || r[0].Applied != 3*hit {
		t.Errorf("a's new life with 3 counted while away: level %d, applied %d; want %d (debt), %d", r[0].After.Level, r[0].Applied, -2*hit, 3*hit)
	}
}

// testBucketLate: tokens taken before a refill the cap cut off, reaching
// the store after a later take, get that refill back
// (ratelimit.BucketState.Waste), so the bucket ends where the takes
// applied in time order leave it.
func testBucketLate(t *testing.T, e *env) {
	ref := &bucketRef{rows: map[string]*clustersync.BucketRow{}}
	a, b := e.caller("a"), e.caller("b")
	ms := int64(time.Millisecond)
	spec := tokenSpec(e.ns+"late", 10*hit, 100*time.Millisecond, hit)
	at := e.minute + 700*ms
	e.buckets(t, ref, a, at, 0, e.bcall(a, spec, at)) // full
	// a takes 1 at +164 ms, after the refill at +100 ms, which the cap
	// cut off.
	if ok, r := e.buckets(t, ref, a, at+164*ms, hit, e.bcall(a, spec, at+164*ms)); !ok || r[0].After.Level != 9*hit {
		t.Fatalf("a takes 1 of 10: allowed %v, level %d; want true, %d", ok, r[0].After.Level, 9*hit)
	}
	// b took 2 at +90 ms, before that refill: with them gone, it would
	// have fitted. In time order: 10 − 2, then + 1 at +100 ms, − 1.
	b.total[spec.StoreKey()] = 2 * hit
	if _, r := e.buckets(t, ref, b, at+170*ms, 0, e.bcall(b, spec, at+90*ms)); r[0].After.Level != 8*hit {
		t.Errorf("b's 2 taken before the refill, caught up after a's take: level %d, want %d", r[0].After.Level, 8*hit)
	}
	// The same, decided: a drains a full bucket after the refill at
	// +100 ms; b's take made at +95 ms, decided after, is admitted (in
	// time order: 10 − 1, + 1, − 10).
	spec = tokenSpec(e.ns+"late-decided", 10*hit, 100*time.Millisecond, hit)
	e.buckets(t, ref, a, at, 0, e.bcall(a, spec, at))
	if ok, r := e.buckets(t, ref, a, at+164*ms, 10*hit, e.bcall(a, spec, at+164*ms)); !ok || r[0].After.Level != 0 {
		t.Fatalf("a takes 10 of 10: allowed %v, level %d; want true, 0", ok, r[0].After.Level)
	}
	if ok, r := e.buckets(t, ref, b, at+95*ms, hit, e.bcall(b, spec, at+95*ms)); !ok || r[0].After.Level != 0 {
		t.Errorf("b's take made before the refill, decided after a drained the bucket: allowed %v, level %d; want true, 0", ok, r[0].After.Level)
	}
}

func testBucketAllOrNone(t *testing.T, e *env) {
	ref := &bucketRef{rows: map[string]*clustersync.BucketRow{}}
	a := e.caller("a")
	at := e.minute
	key := e.ns + "both"
	big := tokenSpec(key, 10*hit, time.Hour, 10*hit)
	small := tokenSpec(key, 2*hit, time.Hour, 2*hit)
	fixed := ratelimit.BucketSpec{Kind: ratelimit.FixedLimit, A: int64(time.Hour), B: 5 * hit, Key: key}
	take := func(n int64) (bool, []clustersync.BucketReply) {
		return e.buckets(t, ref, a, at, n, e.bcall(a, big, at), e.bcall(a, small, at), e.bcall(a, fixed, at))
	}
	take(hit)
	// 3 more: small (1 left) refuses and is emptied; big and fixed, which
	// would admit, are unchanged.
	ok, r := take(3 * hit)
	if ok || r[0].After.Level != 9*hit || r[1].After.Level != 0 || r[2].After.Level != hit {
		t.Errorf("a take refused by one bucket: allowed %v, levels %d %d %d; want false, %d 0 %d",
			ok, r[0].After.Level, r[1].After.Level, r[2].After.Level, 9*hit, hit)
	}
}

func testBucketKeys(t *testing.T, e *env) {
	a := e.caller("a")
	at := e.minute
	keys := []string{"k|1", "k", "k|", "k:1", "k\x00", "k 1", "ключ"}
	for i, k := range keys {
		spec := tokenSpec(e.ns+k, 10*hit, time.Hour, 10*hit)
		e.buckets(t, nil, a, at, int64(i+1)*hit, e.bcall(a, spec, at))
	}
	// The same key with other parameters is another bucket.
	other := tokenSpec(e.ns+keys[0], 10*hit, time.Hour, 5*hit)
	e.buckets(t, nil, a, at, 0, e.bcall(a, other, at))
	for i, k := range keys {
		spec := tokenSpec(e.ns+k, 10*hit, time.Hour, 10*hit)
		_, r := e.buckets(t, nil, a, at, 0, e.bcall(a, spec, at))
		if want := 10*hit - int64(i+1)*hit; r[0].After.Level != want {
			t.Errorf("key %q: level %d, want %d", k, r[0].After.Level, want)
		}
	}
	if _, r := e.buckets(t, nil, a, at, 0, e.bcall(a, other, at)); r[0].After.Level != 10*hit {
		t.Errorf("key %q with another refill amount: level %d, want %d", keys[0], r[0].After.Level, 10*hit)
	}
}

func testBucketExact(t *testing.T, e *env) {
	const incs, per = 4, 8
	spec := tokenSpec(e.ns+"exact", 100*hit, time.Hour, 100*hit)
	leaky := ratelimit.BucketSpec{Kind: ratelimit.LeakyLimit, A: 10 * hit, B: int64(time.Hour), C: int64(time.Hour / 10), Key: e.ns + "exact"}
	for _, b := range []ratelimit.BucketSpec{spec, leaky} {
		var admitted atomic.Int64
		var wg gosync.WaitGroup
		at := e.minute
		for i := range incs {
			c := e.caller(fmt.Sprintf("n%d", i))
			var mu gosync.Mutex // one caller's calls in order, as a node sends them
			for range per {
				wg.Go(func() {
					for {
						mu.Lock()
						// A store that times out under the contention
						// (Cassandra's lightweight transactions) is retried
						// with the same call: a replay, which the store
						// answers from its record, counted once.
						call := e.bcall(c, b, at)
						ok, _, err := e.tryBuckets(t, nil, c, at, hit, call)
						for tries := 1; errors.Is(err, clustersync.ErrUnavailable) && tries < 5; tries++ {
							ok, _, err = e.tryBuckets(t, nil, c, at, hit, call)
						}
						mu.Unlock()
						if err != nil {
							t.Errorf("%s: Buckets: %v", b.Kind, err)
							return
						}
						if !ok {
							return
						}
						admitted.Add(1)
					}
				})
			}
		}
		wg.Wait()
		if want := b.A / hit; admitted.Load() != want {
			t.Errorf("%s of %d: %d callers in %d incarnations admitted %d, want %d", b.Kind, want, incs*per, incs, admitted.Load(), want)
		}
	}
}

func testBucketExpiry(t *testing.T, e *env) {
	a := e.caller("a")
	spec := tokenSpec(e.ns+"expiry", 3*hit, time.Hour, 3*hit)
	at := e.minute
	call := e.bcall(a, spec, at)
	call.ExpireAt = time.Now().Add(time.Second)
	e.buckets(t, nil, a, at, hit, call)
	purger, _ := e.s.(Purger)
	deadline := time.Now().Add(15 * time.Second)
	for {
		if purger != nil {
			if _, err := purger.Purge(ctx(t, callTimeout)); err != nil {
				t.Fatalf("Purge: %v", err)
			}
		}
		// A reader in another life sees the row until it expires, then a
		// new bucket.
		r := e.caller("reader")
		_, rep := e.buckets(t, nil, r, at, 0, clustersync.BucketCall{Namespace: e.ns, Bucket: spec, Life: r.life, Version: e.next(), ExpireAt: call.ExpireAt})
		if rep[0].After.Level == 3*hit {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("a bucket row with ExpireAt = now + 1s still reads level %d after 15s", rep[0].After.Level)
		}
		time.Sleep(100 * time.Millisecond) // the bounded expiry poll
	}
}
