package node

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestBucketStoredOrder: an answer of a lower write count than the one
// taken last is older, and ignored, when its call was sent before that
// answer was taken; sent after it, the row was made anew (a store that
// lost it), and the answer is taken.
func TestBucketStoredOrder(t *testing.T) {
	spec := ratelimit.BucketSpec{Kind: ratelimit.FixedLimit, A: int64(time.Minute), B: 10 * ratelimit.Micro}
	id := specID(&spec)
	at := time.Unix(1_700_000_000, 0).UnixNano()
	e := &bucketEntry{life: 1}
	state := func(n int64) ratelimit.BucketState {
		s := spec.Init(at)
		spec.Force(&s, at, n*ratelimit.Micro)
		return s
	}
	e.stored(&id, state(3), 0, 30, at, at)
	e.stored(&id, state(1), 0, 29, at-1, at+1) // sent before: late
	if e.seq != 30 || e.val.Level != 3*ratelimit.Micro {
		t.Fatalf("a late answer taken: seq %d, count %d", e.seq, e.val.Level/ratelimit.Micro)
	}
	e.stored(&id, state(1), 0, 29, at, at+1) // sent as the last was taken: late too
	if e.seq != 30 || e.val.Level != 3*ratelimit.Micro {
		t.Fatalf("an answer sent at the instant the last was taken, taken: seq %d, count %d", e.seq, e.val.Level/ratelimit.Micro)
	}
	e.stored(&id, state(2), 0, 2, at+1, at+2) // sent after: a new row
	if e.seq != 2 || e.val.Level != 2*ratelimit.Micro {
		t.Fatalf("a new row's answer ignored: seq %d, count %d", e.seq, e.val.Level/ratelimit.Micro)
	}
}

// TestBucketRestartIfForgotten: after the bucket's hold time without an
// answer, the next call starts a new life carrying only the consumption
// the store never confirmed; before it, nothing changes.
func TestBucketRestartIfForgotten(t *testing.T) {
	spec := ratelimit.BucketSpec{Kind: ratelimit.FixedLimit, A: int64(time.Minute), B: 10 * ratelimit.Micro}
	id := specID(&spec)
	ns, err := NewNamespace(Config{Name: "t", WindowSizes: []time.Duration{time.Second}, Shared: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_000, 0).UnixNano()
	e := &bucketEntry{life: 1, own: 7 * ratelimit.Micro, acked: 5 * ratelimit.Micro, seq: 30, seqAt: at, synced: true}
	hold := int64(spec.Hold())
	ns.buckets.restartIfForgotten(&id, e, at+hold-1)
	if e.life != 1 || e.own != 7*ratelimit.Micro || e.seq != 30 {
		t.Fatalf("restarted before the hold time: %+v", e)
	}
	ns.buckets.restartIfForgotten(&id, e, at+hold)
	if e.life <= 1 || e.own != 2*ratelimit.Micro || e.acked != 0 || e.seq != 0 {
		t.Fatalf("after the hold time: life %d, own %d, acked %d, seq %d; want a new life, own 2, acked 0, seq 0", e.life, e.own/ratelimit.Micro, e.acked, e.seq)
	}
}
