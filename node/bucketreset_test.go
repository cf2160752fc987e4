package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestResetBucketsAtLeavesBucketsAtRest: a reset token bucket is full
// again, its idle state, so a Reclaim at the reset's time removes it at
// once; the bucket reset also is no longer locked by the reset (Reclaim
// skips a bucket in use). A bucket of another key, still empty, stays.
// (The file sorts before reset_test.go, so a mutant that returns from
// the reset with its buckets locked fails here instead of hanging there.)
func TestResetBucketsAtLeavesBucketsAtRest(t *testing.T) {
	ns := newNS(t, localConfig(time.Minute), nil)
	at := time.Unix(1_800_000_000, 0)
	tb := ratelimit.TokenBucket{Max: 2, RefillTime: time.Hour}
	l := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: tb}
	for _, key := range []string{"k", "j"} {
		// Taken through the table (an Allow's take in a local namespace is
		// counted as consumption not yet synced, which Reclaim keeps).
		st, err := ns.Buckets().TakeTokenAt(at, key, tb, 2, false)
		if err != nil || !st.Allowed {
			t.Fatalf("take of %s: %+v, %v", key, st, err)
		}
	}
	if n := ns.Buckets().Reclaim(at); n != 0 {
		t.Fatalf("Reclaim of two empty buckets removed %d, want 0", n)
	}
	if err := ns.ResetBucketsAt(at, "k", []ratelimit.Limit{l}); err != nil {
		t.Fatal(err)
	}
	if n := ns.Buckets().Reclaim(at); n != 1 || ns.ActiveBuckets() != 1 {
		t.Errorf("Reclaim after the reset removed %d, %d left; want the reset bucket removed, 1 left", n, ns.ActiveBuckets())
	}
}
