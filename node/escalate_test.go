package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// setOthers stores others micro-hits as the other nodes' total of key's
// window of size starting at start, as a fetch would.
func setOthers(t *testing.T, ns *node.Namespace, now time.Time, key string, size time.Duration, start int64, others int64) {
	t.Helper()
	for _, w := range ns.CollectInterest(now, nil) {
		if w.Key == key && w.Size == size && w.Start == start {
			ns.SetOthers(w, others)
			return
		}
	}
	t.Fatalf("no interest window %s/%s/%d", key, size, start)
}

// TestAllowMarginAt: the node decides alone while the request is clear of
// the limit by the others' expected hits, reports near inside that margin
// and for a key never fetched, and refuses alone what its own view
// refuses.
func TestAllowMarginAt(t *testing.T) {
	const limit = 100
	// Blind 0.2 s × safety 2 over a 1 s window: the margin is 0.4 windows
	// of the others' rate.
	m := node.Margin{Blind: 200 * time.Millisecond, Safety: 2, Unfetched: true}
	req := func(cost float64) ratelimit.AllowRequest {
		return ratelimit.AllowRequest{Key: "k", Cost: cost, Limits: []ratelimit.Limit{{Size: time.Second, Limit: limit}}}
	}
	for _, tc := range []struct {
		name        string
		fetched     bool
		own, others float64 // in the current window, at half of it
		cost        float64
		// keepUnfetched decides a key never fetched here (Unfetched off).
		keepUnfetched bool
		wantNear      bool
		wantAllowed   bool
		wantRateHits  float64 // the key's sliding rate afterwards
	}{
		{name: "never fetched", own: 1, cost: 1, wantNear: true, wantRateHits: 1},
		{name: "never fetched, not asked about", own: 1, cost: 1, keepUnfetched: true, wantAllowed: true, wantRateHits: 2},
		// Others at 40 in half a window: 80 per window, 32 expected.
		{name: "clear", fetched: true, own: 10, others: 40, cost: 1, wantAllowed: true, wantRateHits: 51},
		{name: "just clear", fetched: true, own: 27, others: 40, cost: 1, wantAllowed: true, wantRateHits: 68},
		{name: "inside the margin", fetched: true, own: 28, others: 40, cost: 1, wantNear: true, wantRateHits: 68},
		{name: "over by the node's own view", fetched: true, own: 60, others: 40, cost: 1, wantRateHits: 100},
		// No others yet: this node's own rate stands in for theirs (55 in
		// half a window: 110 per window, 44 expected).
		{name: "own rate for the others'", fetched: true, own: 55, cost: 1, wantAllowed: true, wantRateHits: 56},
		{name: "own rate for the others', inside", fetched: true, own: 56, cost: 1, wantNear: true, wantRateHits: 56},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := newNS(t, syncedConfig(time.Second), nil)
			at := epoch.Add(time.Second / 2)
			ws := ratelimit.WindowStart(at.UnixNano(), time.Second)
			// The key is as old as the window: its current window's
			// totals grew over half a window.
			if _, _, err := ns.AllowMarginAt(at.Add(-time.Second/2), req(0), m, nil); err != nil {
				t.Fatal(err)
			}
			incr(t, ns, at, "k", 0, tc.own)
			if tc.fetched {
				setOthers(t, ns, at, "k", time.Second, ws, int64(tc.others*ratelimit.Micro))
			}
			m := m
			m.Unfetched = !tc.keepUnfetched
			d, near, err := ns.AllowMarginAt(at, req(tc.cost), m, nil)
			if err != nil {
				t.Fatal(err)
			}
			if near != tc.wantNear || !near && d.Allowed != tc.wantAllowed {
				t.Errorf("near %v, allowed %v; want near %v, allowed %v", near, d.Allowed, tc.wantNear, tc.wantAllowed)
			}
			if near && len(d.Limits) != 0 {
				t.Errorf("near with statuses %v, want none", d.Limits)
			}
			if !near && !d.Allowed && d.RetryAfter <= 0 {
				t.Errorf("refused with retry after %v, want > 0", d.RetryAfter)
			}
			if got := rateOf(t, ns, at, "k", time.Second); !near2(got, tc.wantRateHits) {
				t.Errorf("rate afterwards %v, want %v", got, tc.wantRateHits)
			}
		})
	}
}

func near2(got, want float64) bool { return got > want-1e-9 && got < want+1e-9 }

// TestAllowMarginAtRecentRate: the others' rate is the larger of their
// previous window and their current one extrapolated, so a burst that
// started this window widens the margin at once.
func TestAllowMarginAtRecentRate(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second), nil)
	m := node.Margin{Blind: 100 * time.Millisecond, Safety: 1}
	at := epoch.Add(time.Second + time.Second/2)
	ws := ratelimit.WindowStart(at.UnixNano(), time.Second)
	incr(t, ns, at.Add(-time.Second), "k", 0, 1) // the previous window exists
	probe := ratelimit.AllowRequest{Key: "k", Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1}}}
	if _, _, err := ns.AllowMarginAt(at.Add(-time.Second), probe, m, nil); err != nil {
		t.Fatal(err) // the key's age: a second
	}
	incr(t, ns, at, "k", 0, 5)
	setOthers(t, ns, at, "k", time.Second, ws-int64(time.Second), 10*ratelimit.Micro)
	setOthers(t, ns, at, "k", time.Second, ws, 30*ratelimit.Micro)
	// Rate: 5 + 30 + (1 + 10) / 2 = 40.5. Others: max(10, 30 × 2) = 60
	// per window (own: 10), 6 over 0.1 s. 40.5 + 1 + 6 = 47.5.
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 47}}}
	if _, near, err := ns.AllowMarginAt(at, req, m, nil); err != nil || !near {
		t.Fatalf("limit 47: near %v (%v), want near", near, err)
	}
	req.Limits[0].Limit = 48
	if d, near, err := ns.AllowMarginAt(at, req, m, nil); err != nil || near || !d.Allowed {
		t.Fatalf("limit 48: near %v, allowed %v (%v), want allowed here", near, d.Allowed, err)
	}
}

// TestAllowMarginAtYoungKey: a key first decided here 50 ms ago whose
// others already counted 20 reads as 20 per min(Blind, size/4), not per
// the half window since the window started: a burst on a new key widens
// the margin at once.
func TestAllowMarginAtYoungKey(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second), nil)
	m := node.Margin{Blind: 100 * time.Millisecond, Safety: 1}
	at := epoch.Add(time.Second / 2)
	ws := ratelimit.WindowStart(at.UnixNano(), time.Second)
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 40}}}
	incr(t, ns, at.Add(-50*time.Millisecond), "k", 0, 1)
	if _, _, err := ns.AllowMarginAt(at.Add(-50*time.Millisecond), ratelimit.AllowRequest{Key: "k", Limits: req.Limits}, m, nil); err != nil {
		t.Fatal(err)
	}
	setOthers(t, ns, at, "k", time.Second, ws, 20*ratelimit.Micro)
	// Rate 21; others 20 per 0.1 s: 200 per window, 20 over 0.1 s (the
	// half window would say 4). 21 + 1 + 20 = 42 > 40.
	if _, near, err := ns.AllowMarginAt(at, req, m, nil); err != nil || !near {
		t.Fatalf("near %v (%v), want near", near, err)
	}
	req.Limits[0].Limit = 42
	if d, near, err := ns.AllowMarginAt(at, req, m, nil); err != nil || near || !d.Allowed {
		t.Fatalf("limit 42: near %v, allowed %v (%v), want allowed here", near, d.Allowed, err)
	}
}

// TestUnfetchedWindows: a new key is reported to OnNewKey and has
// unfetched windows until the others' totals are stored.
func TestUnfetchedWindows(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second, time.Minute), nil)
	var added []string
	ns.OnNewKey(func(key string) { added = append(added, key) })
	at := epoch.Add(time.Second / 2)
	incr(t, ns, at, "k", 0, 1)
	incr(t, ns, at, "k", 0, 1)
	if len(added) != 1 || added[0] != "k" {
		t.Fatalf("OnNewKey saw %q, want [k]", added)
	}
	ws := ns.UnfetchedWindows(at, "k", nil)
	if len(ws) != 4 {
		t.Fatalf("%d unfetched windows, want 4 (current and previous of 2 sizes)", len(ws))
	}
	if got := ns.UnfetchedWindows(at, "absent", nil); len(got) != 0 {
		t.Errorf("absent key: %d windows, want 0", len(got))
	}
	for _, w := range ws {
		ns.SetOthers(w, 2*ratelimit.Micro)
	}
	if got := ns.UnfetchedWindows(at, "k", nil); len(got) != 0 {
		t.Errorf("after SetOthers: %d windows, want 0", len(got))
	}
	if got := rateOf(t, ns, at, "k", time.Second); !near2(got, 5) {
		t.Errorf("rate %v, want 5 (own 2 + others 2 + half the previous window's others 2)", got)
	}
}

// TestAllowMarginAtNoAllocs: deciding alone on an existing, fetched key
// allocates nothing.
func TestAllowMarginAtNoAllocs(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second, time.Minute), nil)
	at := epoch.Add(time.Second / 2)
	incr(t, ns, at, "existing-key", 0, 1)
	for _, w := range ns.CollectInterest(at, nil) {
		ns.SetOthers(w, ratelimit.Micro)
	}
	statuses := make([]ratelimit.LimitStatus, 0, 2)
	req := ratelimit.AllowRequest{Key: "existing-key", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1e9}, {Size: time.Minute, Limit: 1e9}}}
	m := node.Margin{Blind: 200 * time.Millisecond, Safety: 2}
	var near bool
	var err error
	if got := testing.AllocsPerRun(100, func() { _, near, err = ns.AllowMarginAt(at, req, m, statuses) }); got != 0 {
		t.Errorf("%v allocations per call, want 0", got)
	}
	if err != nil || near {
		t.Errorf("near %v, err %v; want a local decision", near, err)
	}
}

// TestAllowMarginAtWholeHits: on a key with a few hits per window the
// expected unseen hits are a fraction of one, yet one unseen call of the
// same cost is what admits past the limit: the margin is at least the cost.
func TestAllowMarginAtWholeHits(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second), nil)
	m := node.Margin{Blind: 10 * time.Millisecond, Safety: 2}
	at := epoch.Add(time.Second + time.Second/2)
	incr(t, ns, at.Add(-time.Second), "k", 0, 1)
	probe := ratelimit.AllowRequest{Key: "k", Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1}}}
	if _, _, err := ns.AllowMarginAt(at.Add(-time.Second), probe, m, nil); err != nil {
		t.Fatal(err)
	}
	incr(t, ns, at, "k", 0, 3)
	// Rate 3 + 1/2 = 3.5; expected 6 per window × 0.01 s × 2 = 0.12, so
	// 3.5 + 1 + 0.12 fits 5, but 3.5 + 1 + 1 does not.
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 5}}}
	if _, near, err := ns.AllowMarginAt(at, req, m, nil); err != nil || !near {
		t.Fatalf("limit 5: near %v (%v), want near", near, err)
	}
	req.Limits[0].Limit = 5.5
	if d, near, err := ns.AllowMarginAt(at, req, m, nil); err != nil || near || !d.Allowed {
		t.Fatalf("limit 5.5: near %v, allowed %v (%v), want allowed here", near, d.Allowed, err)
	}
}
