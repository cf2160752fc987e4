package node_test

import (
	"slices"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestKeyLockBasics: the write-through path of synchronous namespaces counts,
// reports own totals and takes the others' totals.
func TestKeyLockBasics(t *testing.T) {
	const size = time.Second
	cfg := syncedConfig(size, time.Minute)
	cfg.Shared = true
	ns := newNS(t, cfg, nil)
	at := epoch.Add(size + size/2)
	incr(t, ns, epoch, "k", size, 4) // previous 1s window

	k, err := ns.LockKey(at, "k")
	if err != nil {
		t.Fatal(err)
	}
	k.Add(size, 2*ratelimit.Micro)
	cur, prev := k.Window(size)
	if cur.Start != epoch.Add(size).UnixNano() || cur.Total != 2*ratelimit.Micro || prev.Start != epoch.UnixNano() || prev.Total != 4*ratelimit.Micro {
		t.Errorf("Own = %+v, %+v; want cur 2e6 at +1s, prev 4e6 at +0s", cur, prev)
	}
	k.SetOthers(cur, 1*ratelimit.Micro)
	k.SetOthers(prev, 2*ratelimit.Micro)
	if c, p := k.Totals(size); c != 3*ratelimit.Micro || p != 6*ratelimit.Micro {
		t.Errorf("Totals = %d, %d; want 3e6, 6e6", c, p)
	}
	if got := k.Rates([]time.Duration{size}, 0, nil); got[0].Rate != 3+6*0.5 {
		t.Errorf("Rates = %v, want 6", got)
	}
	k.Pushed(cur, 5)
	k.Pushed(prev, 5)
	k.Unlock()
	for _, p := range ns.CollectDirty(at, nil) {
		if p.Size == size {
			t.Errorf("CollectDirty lists %+v after MarkPushed", p)
		}
	}
}

// TestKeyLockLateTime: a write-through call whose time was read before
// another call on the same key rolled its window forward (it waited for the
// key lock) must not crash.
func TestKeyLockLateTime(t *testing.T) {
	const size = 100 * time.Millisecond
	for _, late := range []time.Duration{time.Millisecond, size + time.Millisecond, 5 * size} {
		t.Run(late.String(), func(t *testing.T) {
			cfg := syncedConfig(size, time.Second)
			cfg.Shared = true
			ns := newNS(t, cfg, nil)
			newer := epoch.Add(10 * size)
			incr(t, ns, newer, "k", 0, 1) // rolls the key to newer's windows
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("KeyLock with a time %v behind the key's window panicked: %v", late, r)
				}
			}()
			k, err := ns.LockKey(newer.Add(-late), "k")
			if err != nil {
				t.Fatal(err)
			}
			defer k.Unlock()
			for _, size := range ns.Sizes() {
				k.Add(size, ratelimit.Micro)
				cur, prev := k.Window(size)
				k.SetOthers(cur, 0)
				k.SetOthers(prev, 0)
				k.Pushed(cur, 1)
				k.Pushed(prev, 1)
			}
			if got := k.Rates(ns.Sizes(), 0, nil); len(got) != 2 {
				t.Errorf("Rates = %v, want 2 rates", got)
			}
		})
	}
}

// TestKeyLockDecide: without a verdict Decide decides like AllowAt; a
// store's verdict stands against the local totals, counting the cost only
// when allowed or CountRejected.
func TestKeyLockDecide(t *testing.T) {
	const size = time.Second
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: size, Limit: 2}}}
	penalty := req
	penalty.CountRejected = true
	for _, tc := range []struct {
		name        string
		req         ratelimit.AllowRequest
		verdict     node.Verdict
		wantAllowed bool
		wantRate    float64 // after the decision
		wantRetry   bool
	}{
		{"no verdict, room left", req, node.NoVerdict, true, 2, false},
		{"store allows", req, node.StoreAllowed, true, 2, false},
		{"store denies despite room", req, node.StoreDenied, false, 1, false}, // no wait by the local totals
		{"store denies, CountRejected", penalty, node.StoreDenied, false, 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := syncedConfig(size)
			cfg.Shared = true
			ns := newNS(t, cfg, nil)
			at := epoch.Add(size / 2)
			incr(t, ns, at, "k", size, 1)
			chk, err := ns.CheckAllow(tc.req)
			if err != nil {
				t.Fatal(err)
			}
			k, err := ns.LockKey(at, "k")
			if err != nil {
				t.Fatal(err)
			}
			d := k.Decide(tc.req, &chk, tc.verdict, nil)
			k.Unlock()
			if d.Allowed != tc.wantAllowed || d.Limits[0].Rate != tc.wantRate || (d.RetryAfter > 0) != tc.wantRetry {
				t.Errorf("Decide = allowed %v, rate %v, retry after %v; want %v, %v, retry %v",
					d.Allowed, d.Limits[0].Rate, d.RetryAfter, tc.wantAllowed, tc.wantRate, tc.wantRetry)
			}
			if got := rateOf(t, ns, at, "k", size); got != tc.wantRate {
				t.Errorf("rate after Decide = %v, want %v", got, tc.wantRate)
			}
		})
	}
}

// TestCheckAllow: the checked request holds the cost and each limit's size
// and limit in micro-hits, in request order, and the errors are AllowAt's.
func TestCheckAllow(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second, time.Minute), nil)
	req := ratelimit.AllowRequest{Key: "k", Cost: 0.5, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 100}, {Size: time.Second, Limit: 2.5}}}
	chk, err := ns.CheckAllow(req)
	if err != nil {
		t.Fatal(err)
	}
	want := []node.CheckedLimit{{Size: time.Minute, Limit: 100 * ratelimit.Micro}, {Size: time.Second, Limit: 2_500_000}}
	if chk.Cost != ratelimit.Micro/2 || !slices.Equal(chk.Limits(), want) {
		t.Errorf("CheckAllow = cost %d, limits %v; want %d, %v", chk.Cost, chk.Limits(), ratelimit.Micro/2, want)
	}
	req.Limits[1].Size = time.Hour
	_, err = ns.CheckAllow(req)
	_, want2 := ns.AllowAt(epoch, req, nil)
	if err == nil || want2 == nil || err.Error() != want2.Error() {
		t.Errorf("CheckAllow error %v, AllowAt's %v; want the same error", err, want2)
	}
}
