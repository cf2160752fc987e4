package node_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestInterestWindowOfAKeyLastTouchedInThePreviousWindow: a key counted
// in the previous window only (its last window, nothing yet in the
// current one) still has both windows of interest, as CollectInterest
// lists them: its previous window's total still counts now.
func TestInterestWindowOfAKeyLastTouchedInThePreviousWindow(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Minute), newFakeClock(epoch))
	incr(t, ns, epoch.Add(10*time.Second), "k", time.Minute, 1) // window [0, 1 min)
	now := epoch.Add(90 * time.Second)
	cur := epoch.Add(time.Minute).UnixNano()
	for _, start := range []int64{cur, cur - int64(time.Minute)} {
		if _, ok, ahead := ns.InterestWindow(now, "k", time.Minute, start); !ok || ahead {
			t.Errorf("window at %v: ok %v, ahead %v; want ok", time.Duration(start-epoch.UnixNano()), ok, ahead)
		}
	}
	if got := len(ns.CollectInterest(now, nil)); got != 2 {
		t.Errorf("CollectInterest lists %d windows, want 2", got)
	}
}

// TestKeysFillMaxBytesExactly: keys whose costs add up to max_bytes
// exactly all fit (the budget is inclusive); one more byte's worth is
// refused. A key of 880 bytes in one window size costs 1 KiB, so 1024 of
// them make the 1 MiB budget.
func TestKeysFillMaxBytesExactly(t *testing.T) {
	cfg := localConfig(time.Second)
	cfg.MaxKeys = 1 << 20
	cfg.MaxBytes = node.MinMaxBytes
	ns := newNS(t, cfg, nil)
	const keyLen = 880
	if c := node.KeyCost(keyLen, 1); c != 1024 {
		t.Fatalf("KeyCost(%d, 1) = %d, want 1024", keyLen, c)
	}
	for i := range 1024 {
		if _, err := ns.IncrementAt(epoch, fmt.Sprintf("%0*d", keyLen, i), time.Second, 1, nil); err != nil {
			t.Fatalf("key %d of 1024, filling max_bytes exactly: %v", i, err)
		}
	}
	_, err := ns.IncrementAt(epoch, fmt.Sprintf("%0*d", keyLen, 1024), time.Second, 1, nil)
	wantFieldError(t, err, "key", node.ErrKeyLimit)
}

// TestIncrementOfMaxValueCounts: MaxValue is itself a valid value: an
// increment of it counts and answers its rate.
func TestIncrementOfMaxValueCounts(t *testing.T) {
	ns := newNS(t, localConfig(time.Second), nil)
	r, err := ns.IncrementAt(epoch, "k", time.Second, ratelimit.MaxValue, nil)
	if err != nil || len(r) != 1 || r[0].Rate != ratelimit.MaxValue {
		t.Fatalf("IncrementAt(MaxValue) = %+v, %v; want the rate %v", r, err, ratelimit.MaxValue)
	}
	if got := rateOf(t, ns, epoch, "k", time.Second); got != ratelimit.MaxValue {
		t.Errorf("rate after counting MaxValue = %v, want %v", got, ratelimit.MaxValue)
	}
}

// TestTakeBucketsUsedIsTheTokensTaken: what a take consumed of a token
// bucket (what the cluster is told) is the tokens it took: 1 of 3; a
// refused take empties the bucket and so consumes what was left.
func TestTakeBucketsUsedIsTheTokensTaken(t *testing.T) {
	const hit = ratelimit.Micro
	spec := ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: 3 * hit, B: int64(time.Second), C: hit}
	at := epoch.UnixNano()
	s := []ratelimit.BucketState{spec.Init(at)}
	used := []int64{0}
	if !ratelimit.TakeBuckets([]ratelimit.BucketSpec{spec}, s, used, at, hit) || used[0] != hit {
		t.Errorf("a take of 1 of 3 tokens: used %d, want admitted, used %d", used[0], hit)
	}
	if ratelimit.TakeBuckets([]ratelimit.BucketSpec{spec}, s, used, at, 3*hit) || used[0] != 2*hit {
		t.Errorf("a take of 3 of 2 tokens: used %d, want refused, used %d (emptied)", used[0], 2*hit)
	}
}
