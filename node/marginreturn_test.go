package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestAllowMarginAtLeavesTheKeyUnlocked: a request decided here, far from
// its limits, is counted and leaves its key unlocked, so the next call on
// the key returns too.
func TestAllowMarginAtLeavesTheKeyUnlocked(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second, time.Minute), newFakeClock(epoch))
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 100}}}
	m := node.Margin{Blind: 200 * time.Millisecond, Safety: 2}
	done := make(chan float64, 1)
	go func() {
		var last float64
		for range 3 {
			d, near, err := ns.AllowMarginAt(epoch, req, m, nil)
			if err != nil || near || !d.Allowed {
				t.Errorf("AllowMarginAt far from the limit: allowed %v, near %v, %v", d.Allowed, near, err)
			}
			last = d.Limits[0].Rate
		}
		done <- last
	}()
	select {
	case rate := <-done:
		if rate != 3 {
			t.Errorf("the minute's rate after 3 calls = %v, want 3", rate)
		}
	case <-time.After(10 * time.Second): // a bound on a deadlock, not a timing
		t.Fatal("a second AllowMarginAt on a key did not return in 10 s: the key's lock left held")
	}
}
