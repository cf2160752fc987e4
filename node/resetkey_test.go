package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestResetKeyAtCancelsEveryWindow: ResetKeyAt appends, after what dst
// held, the previous and current window of each size, ascending, with
// the node's own total it cancelled in each (0 where the node counted
// nothing); the key's rates then read 0 while later hits count again.
func TestResetKeyAtCancelsEveryWindow(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	incr(t, ns, epoch.Add(time.Second/2), "k", 0, 2)   // 1s window [epoch, epoch+1s)
	incr(t, ns, epoch.Add(3*time.Second/2), "k", 0, 3) // 1s window [epoch+1s, epoch+2s)
	at := epoch.Add(3 * time.Second / 2)
	if got := rateOf(t, ns, at, "k", time.Second); got != 4 {
		t.Fatalf("1s rate before the reset = %v, want 4 (3 + 2 half weighed)", got)
	}
	sentinel := node.ResetWindow{Size: time.Hour, Start: 42, Own: 7}
	ws, err := ns.ResetKeyAt(at, "k", []node.ResetWindow{sentinel})
	if err != nil {
		t.Fatal(err)
	}
	e := epoch.UnixNano()
	want := []node.ResetWindow{
		sentinel,
		{Size: time.Second, Start: e, Own: 2 * ratelimit.Micro},
		{Size: time.Second, Start: e + int64(time.Second), Own: 3 * ratelimit.Micro},
		{Size: time.Minute, Start: e - int64(time.Minute), Own: 0},
		{Size: time.Minute, Start: e, Own: 5 * ratelimit.Micro},
	}
	if len(ws) != len(want) {
		t.Fatalf("ResetKeyAt = %+v, want %+v", ws, want)
	}
	for i := range want {
		if ws[i] != want[i] {
			t.Errorf("window %d = %+v, want %+v", i, ws[i], want[i])
		}
	}
	for _, size := range []time.Duration{time.Second, time.Minute} {
		if got := rateOf(t, ns, at, "k", size); got != 0 {
			t.Errorf("%v rate after the reset = %v, want 0", size, got)
		}
	}
	incr(t, ns, at, "k", 0, 1)
	if got := rateOf(t, ns, at, "k", time.Minute); got != 1 {
		t.Errorf("1m rate after a hit following the reset = %v, want 1", got)
	}
}

// TestResetKeyAtKeyNotHeld: a reset of a key the node does not hold
// lists its windows with nothing cancelled and creates no key; an
// invalid key and an estimator namespace are refused.
func TestResetKeyAtKeyNotHeld(t *testing.T) {
	ns := newNS(t, localConfig(time.Second), nil)
	at := epoch.Add(time.Second / 2)
	ws, err := ns.ResetKeyAt(at, "none", nil)
	e := epoch.UnixNano()
	want := []node.ResetWindow{{Size: time.Second, Start: e - int64(time.Second)}, {Size: time.Second, Start: e}}
	if err != nil || len(ws) != 2 || ws[0] != want[0] || ws[1] != want[1] {
		t.Errorf("ResetKeyAt of a key not held = %+v, %v; want %+v", ws, err, want)
	}
	if n := ns.ActiveKeys(); n != 0 {
		t.Errorf("%d keys after the reset of a key not held, want 0", n)
	}
	_, err = ns.ResetKeyAt(at, "", nil)
	wantFieldError(t, err, "key", ratelimit.ErrInvalidKey)
	est := newNS(t, node.Config{Name: "est", WindowSizes: []time.Duration{time.Minute}, Estimator: &node.EstimatorConfig{Hashes: 2, Slots: 16}}, nil)
	_, err = est.ResetKeyAt(at, "k", nil)
	wantFieldError(t, err, "key", node.ErrEstimatorKind)
}

// TestSetResetOthers: once a fetch has brought other nodes' counts back
// into a reset key's windows, SetResetOthers sets each window's others
// to minus the own total the reset cancelled, so the rates read 0 again,
// in every window size; a size the namespace lacks and a key not held
// are ignored.
func TestSetResetOthers(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	at := epoch.Add(3 * time.Second / 2)
	incr(t, ns, at, "k", 0, 2)
	ws, err := ns.ResetKeyAt(at, "k", nil)
	if err != nil {
		t.Fatal(err)
	}
	// A fetch sets the others of both sizes' current windows again.
	kl, err := ns.LockKey(at, "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []time.Duration{time.Second, time.Minute} {
		cur, _ := kl.Window(size)
		kl.SetOthers(cur, 5*ratelimit.Micro)
	}
	kl.Unlock()
	for _, size := range []time.Duration{time.Second, time.Minute} {
		if got := rateOf(t, ns, at, "k", size); got != 7 {
			t.Fatalf("%v rate after the fetch = %v, want 7", size, got)
		}
	}
	ws = append(ws, node.ResetWindow{Size: time.Hour, Start: epoch.UnixNano(), Own: ratelimit.Micro})
	ns.SetResetOthers("k", ws)
	ns.SetResetOthers("none", ws)
	for _, size := range []time.Duration{time.Second, time.Minute} {
		if got := rateOf(t, ns, at, "k", size); got != 0 {
			t.Errorf("%v rate after SetResetOthers = %v, want 0", size, got)
		}
	}
	if n := ns.ActiveKeys(); n != 1 {
		t.Errorf("%d keys, want 1 (SetResetOthers of a key not held creates none)", n)
	}
}

// TestCheckResetBucketsAtMaxLimits: a reset may name MaxLimits distinct
// buckets; one more is refused.
func TestCheckResetBucketsAtMaxLimits(t *testing.T) {
	ns := newNS(t, localConfig(time.Minute), nil)
	ls := make([]ratelimit.Limit, node.MaxLimits+1)
	for i := range ls {
		ls[i] = ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: float64(i + 1), RefillTime: time.Hour}}
	}
	if err := ns.CheckResetBuckets(ls[:node.MaxLimits]); err != nil {
		t.Errorf("%d buckets: %v, want accepted", node.MaxLimits, err)
	}
	wantFieldError(t, ns.CheckResetBuckets(ls), "buckets", ratelimit.ErrInvalidLimit)
}

// TestCheckResetBucketsNoneInEstimator: a reset that names no bucket is
// valid in an estimator namespace too (only naming one is refused).
func TestCheckResetBucketsNoneInEstimator(t *testing.T) {
	est := newNS(t, node.Config{Name: "est", WindowSizes: []time.Duration{time.Minute}, Estimator: &node.EstimatorConfig{Hashes: 2, Slots: 16}}, nil)
	if err := est.CheckResetBuckets(nil); err != nil {
		t.Errorf("CheckResetBuckets(nil) in an estimator namespace: %v, want nil", err)
	}
}
