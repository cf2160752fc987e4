package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestResetBucketsAt: a reset makes each bucket it names a new one at its
// time (a token bucket full, a leaky one empty, a fixed one uncounted),
// and leaves the key's other buckets and other keys alone; a bucket not
// held stays so.
func TestResetBucketsAt(t *testing.T) {
	clock := newFakeClock(time.Unix(1_800_000_000, 0))
	ns := newNS(t, localConfig(time.Minute), clock)
	kinds := []ratelimit.Limit{
		{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 2, RefillTime: time.Hour}},
		{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 2, Interval: time.Hour}},
		{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Limit: 2, Period: time.Hour}},
	}
	allow := func(key string, l ratelimit.Limit) bool {
		t.Helper()
		d, err := ns.AllowAt(clock.Now(), ratelimit.AllowRequest{Key: key, Cost: 1, Limits: []ratelimit.Limit{l}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return d.Allowed
	}
	for _, l := range kinds {
		for _, key := range []string{"k", "j"} {
			allow(key, l)
			allow(key, l)
			if allow(key, l) {
				t.Fatalf("%s: a third take of 2 is admitted", l.Kind)
			}
		}
	}
	if err := ns.CheckResetBuckets(kinds[:2]); err != nil {
		t.Fatal(err)
	}
	if err := ns.ResetBucketsAt(clock.Now(), "k", kinds[:2]); err != nil {
		t.Fatal(err)
	}
	if err := ns.ResetBucketsAt(clock.Now(), "never", kinds); err != nil {
		t.Fatal(err)
	}
	if got := ns.ActiveBuckets(); got != 6 {
		t.Errorf("%d buckets held after resetting one never held, want 6", got)
	}
	for i, l := range kinds {
		reset := i < 2
		if got := allow("k", l); got != reset {
			t.Errorf("%s of k after the reset: admitted %v, want %v", l.Kind, got, reset)
		}
		if allow("j", l) {
			t.Errorf("%s of another key admitted after the reset", l.Kind)
		}
	}
}

// TestCheckResetBuckets: the buckets of a reset are checked as an Allow's
// limits, named buckets[i]; a sliding window among them is refused; an
// estimator namespace refuses every bucket.
func TestCheckResetBuckets(t *testing.T) {
	ns := newNS(t, localConfig(time.Minute), nil)
	token := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 2, RefillTime: time.Hour}, Strict: true}
	leaky := ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 2, Interval: time.Hour}, WaitTimeout: time.Hour}
	if err := ns.CheckResetBuckets([]ratelimit.Limit{token, leaky}); err != nil {
		t.Errorf("a token and a leaky bucket (a wait_timeout too long for an Allow ignored): %v", err)
	}
	wantFieldError(t, ns.CheckResetBuckets([]ratelimit.Limit{token, {Size: time.Minute, Limit: 1}}), "buckets[1]", ratelimit.ErrInvalidLimit)
	bad := token
	bad.Token.RefillTime = 0
	wantFieldError(t, ns.CheckResetBuckets([]ratelimit.Limit{bad}), "buckets[0].token.refill_time", ratelimit.ErrInvalidLimit)
	wantFieldError(t, ns.CheckResetBuckets([]ratelimit.Limit{leaky, token, token}), "buckets[2].token", ratelimit.ErrInvalidLimit)
	many := make([]ratelimit.Limit, node.MaxLimits+1)
	wantFieldError(t, ns.CheckResetBuckets(many), "buckets", ratelimit.ErrInvalidLimit)
	est := newNS(t, node.Config{Name: "est", WindowSizes: []time.Duration{time.Minute}, Estimator: &node.EstimatorConfig{Hashes: 2, Slots: 16}}, nil)
	wantFieldError(t, est.CheckResetBuckets([]ratelimit.Limit{leaky}), "buckets[0].leaky", node.ErrEstimatorKind)
}

// TestLeasesClear: Clear frees every lease of its key this table holds,
// and only those, counts none of the others' until the next sync, and,
// when asked, keeps their releases for the sync to send.
func TestLeasesClear(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	l := node.NewLeases("ns", 0)
	for range 2 {
		if g, err := l.Acquire(now, "k", 3, time.Minute); err != nil || !g.OK {
			t.Fatalf("Acquire: %+v, %v", g, err)
		}
	}
	if g, _ := l.Acquire(now, "j", 3, time.Minute); !g.OK {
		t.Fatal("Acquire of j refused")
	}
	if err := l.SetRead(now, "k", 0, 0); err != nil {
		t.Fatal(err)
	}
	l.Synced(now, node.LeaseSync{Key: "k"}, nil, true, true, 3, now.Add(time.Second).UnixNano()) // one of another node
	if got := l.Clear(now, "k", true); got != 2 {
		t.Errorf("Clear = %d, want 2 leases of this table freed", got)
	}
	if got := l.Clear(now, "none", true); got != 0 {
		t.Errorf("Clear of a key not held = %d, want 0", got)
	}
	if g, _ := l.Acquire(now, "k", 1, time.Minute); !g.OK || g.Held != 1 {
		t.Errorf("Acquire of 1 after the clear: %+v, want granted, 1 held", g)
	}
	if g, _ := l.Acquire(now, "j", 1, time.Minute); g.OK {
		t.Error("another key's leases were cleared")
	}
	var releases int
	for _, s := range l.Collect(now, false, nil) {
		if s.Key == "k" {
			releases = len(s.Releases)
		}
	}
	if releases != 2 {
		t.Errorf("%d releases kept for the sync, want 2", releases)
	}
}
