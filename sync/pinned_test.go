package sync_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestChangesFailedFullReadRetriesNewKey: a first tick whose read of the
// interest set fails leaves the keys new to it for the next tick. That
// tick, two minutes on, reads the interest set in full again, which no
// longer holds x (b has not touched it since); it still reads x's
// windows as a new key's, so a's hits of the minute before count for b.
func TestChangesFailedFullReadRetriesNewKey(t *testing.T) {
	cs := &countingStore{Store: memory.New()}
	clock := fakeclock.New(start)
	cfg := clustersync.Config{NoEscalate: true}
	a := newNode(t, "a", 0.1, plainChanges{cs}, clock, cfg)
	b := newNode(t, "b", 0.1, plainChanges{cs}, clock, cfg)
	b.increment(t, "x", 1) // new to b
	cs.failFetches.Store(1)
	if err := b.sy.SyncOnce(context.Background()); err == nil {
		t.Fatal("tick with a failing read of the interest set: no error")
	}
	clock.Add(time.Minute)
	a.increment(t, "x", 6)
	syncAll(t, []testNode{a})
	clock.Add(time.Minute)
	syncAll(t, []testNode{b})
	// a's 6 hits are in the previous minute, 10 s into this one.
	want := 6 * (60 - 10) / 60.0
	if got := b.minuteRate(t, "x"); got < want-1e-9 || got > want+1e-9 {
		t.Errorf("x after the tick that followed the failed one: rate = %v, want %v (a's hits read)", got, want)
	}
}

// TestBucketsRefusedByAStoreWithout: over a store that holds no buckets,
// an Allow's first bucket limit is named in the refusal, after its window
// limits.
func TestBucketsRefusedByAStoreWithout(t *testing.T) {
	cs := &countingStore{Store: memory.New()}
	clock := fakeclock.New(start)
	b := newNode(t, "b", 0.1, plainChanges{cs}, clock, clustersync.Config{NoEscalate: true})
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 5}, leaky10, tokens100}}
	_, err := b.sy.Calls().AllowAt(context.Background(), clock.Now(), req, nil)
	var fe *ratelimit.FieldError
	if !errors.As(err, &fe) || fe.Field != "limits[1]" || !errors.Is(err, node.ErrNotLocal) || !strings.Contains(err.Error(), "cannot hold leaky buckets") {
		t.Errorf("Allow with a window, a leaky and a token bucket: %v; want limits[1] refused, the store holding no leaky buckets", err)
	}
}

// TestApplyBucketsNewRowStartsAtLastTake: a row the store does not hold
// yet starts at the caller's last take when the caller already took from
// the bucket, and at the call's time when it did not. A token bucket of
// 10 refilled in full each minute, hand-computed:
//   - emptied 90 s before the call: refilled since, a take of 1 leaves 9;
//   - never taken from (its last take 30 s back is not a take): its refill
//     clock starts at the call: after a take of 2, 45 s on, 8 are left
//     (the first refill is 60 s after the call) and a take of 9 is
//     refused.
func TestApplyBucketsNewRowStartsAtLastTake(t *testing.T) {
	const hit = ratelimit.Micro
	at := start.UnixNano()
	spec := ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: 10 * hit, B: int64(time.Minute), C: 10 * hit, Key: "t"}
	exp := start.Add(time.Hour)
	apply := func(rows []*clustersync.BucketRow, at, version, total, lastAt, take int64) (bool, clustersync.BucketReply) {
		calls := []clustersync.BucketCall{{Namespace: "api", Bucket: spec, Life: 1, Total: total, ApplyAt: lastAt, Version: version, ExpireAt: exp}}
		replies := make([]clustersync.BucketReply, 1)
		allowed := clustersync.ApplyBuckets("inc", at, take, calls, rows, replies, make([]bool, 1))
		return allowed, replies[0]
	}
	rows := []*clustersync.BucketRow{nil}
	if ok, r := apply(rows, at, 1, 10*hit, at-int64(90*time.Second), hit); !ok || r.After.Level != 9*hit {
		t.Errorf("emptied 90 s before: allowed %v, level %d; want allowed, 9 tokens", ok, r.After.Level/hit)
	}
	rows = []*clustersync.BucketRow{nil}
	if ok, r := apply(rows, at, 1, 0, at-int64(30*time.Second), 2*hit); !ok || r.After.Level != 8*hit {
		t.Errorf("never taken from, a take of 2: allowed %v, level %d; want allowed, 8 tokens", ok, r.After.Level/hit)
	}
	if ok, r := apply(rows, at+int64(45*time.Second), 2, 2*hit, at, 9*hit); ok || r.Before.Level != 8*hit {
		t.Errorf("45 s on, a take of 9: allowed %v, level before %d; want refused, 8 tokens (no refill yet)", ok, r.Before.Level/hit)
	}
}
