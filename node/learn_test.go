package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestLearnWindow: a change of a key the node does not hold inserts it,
// without telling OnNewKey, up to three quarters of max_keys; its others'
// total then counts in the key's rate, and the key is still one never
// fetched. Windows ahead are reported, windows that no longer count and
// unknown sizes are not.
func TestLearnWindow(t *testing.T) {
	now := epoch.Add(30 * time.Second)
	cfg := syncedConfig(time.Minute)
	cfg.MaxKeys = 4 // learns up to 3
	ns := newNS(t, cfg, newFakeClock(now))
	told := 0
	ns.OnNewKey(func(string) { told++ })
	ws := ratelimit.WindowStart(now.UnixNano(), time.Minute)

	w, ok, ahead, full := ns.LearnWindow(now, "k0", time.Minute, ws)
	if !ok || ahead || full {
		t.Fatalf("LearnWindow(k0) = ok %v, ahead %v, full %v; want ok", ok, ahead, full)
	}
	ns.SetLearned(w, 7*ratelimit.Micro)
	if got := rateOf(t, ns, now, "k0", time.Minute); got != 7 {
		t.Errorf("k0's rate %v, want the learned 7", got)
	}
	if got := ns.UnfetchedWindows(now, "k0", nil); len(got) != 2 {
		t.Errorf("k0: %d unfetched windows, want 2 (learning fetches nothing)", len(got))
	}
	// The previous window learns too; the window before it, and an
	// unknown size, do not.
	if _, ok, _, _ := ns.LearnWindow(now, "k1", time.Minute, ws-int64(time.Minute)); !ok {
		t.Error("previous window not learned")
	}
	if _, ok, ahead, _ := ns.LearnWindow(now, "old", time.Minute, ws-2*int64(time.Minute)); ok || ahead {
		t.Errorf("window two back: ok %v, ahead %v; want neither", ok, ahead)
	}
	if _, ok, _, _ := ns.LearnWindow(now, "size", time.Second, ws); ok {
		t.Error("an unknown size learned")
	}
	if _, ok, ahead, _ := ns.LearnWindow(now, "next", time.Minute, ws+int64(time.Minute)); ok || !ahead {
		t.Errorf("next window: ok %v, ahead %v; want ahead", ok, ahead)
	}
	if _, ok, _, _ := ns.LearnWindow(now, "k2", time.Minute, ws); !ok {
		t.Error("third key not learned")
	}
	if _, ok, _, full := ns.LearnWindow(now, "k3", time.Minute, ws); ok || !full {
		t.Errorf("fourth key: ok %v, full %v; want full (the last quarter is the node's own)", ok, full)
	}
	// A held key is found at the cap.
	if _, ok, _, _ := ns.LearnWindow(now, "k0", time.Minute, ws); !ok {
		t.Error("held key not found at the cap")
	}
	if told != 0 {
		t.Errorf("OnNewKey told %d times, want 0", told)
	}
	if got := ns.ActiveKeys(); got != 3 {
		t.Errorf("%d keys held, want 3", got)
	}
	// The node's own key still fits.
	incr(t, ns, now, "own", time.Minute, 1)
	if told != 1 {
		t.Errorf("OnNewKey told %d times for the node's own key, want 1", told)
	}
}
