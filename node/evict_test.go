package node_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// checkKeys checks a namespace's active, evicted and refused keys.
func checkKeys(t *testing.T, ns *node.Namespace, active, evicted, refused int64) {
	t.Helper()
	got := [3]int64{ns.ActiveKeys(), ns.EvictedKeys(), ns.RefusedKeys()}
	if want := [3]int64{active, evicted, refused}; got != want {
		t.Errorf("active, evicted, refused keys = %v, want %v", got, want)
	}
}

func evictConfig(maxKeys int) node.Config {
	c := localConfig(time.Second, time.Minute)
	c.MaxKeys, c.OnFull = maxKeys, node.OnFullEvict
	return c
}

// TestEvictIdleKeyFirst: at the cap, a new key takes the place of the key
// whose windows ended (weight 0) rather than of one counting now.
func TestEvictIdleKeyFirst(t *testing.T) {
	clock := newFakeClock(epoch)
	ns := newNS(t, evictConfig(2), clock)
	incr(t, ns, epoch, "idle", 0, 1)
	clock.Advance(3 * time.Minute)
	now := clock.Now()
	incr(t, ns, now, "busy", 0, 1)
	incr(t, ns, now, "new", 0, 1)
	checkKeys(t, ns, 2, 1, 0)
	if got := rateOf(t, ns, now, "busy", time.Minute); got != 1 {
		t.Errorf("busy's rate = %v, want 1 (kept)", got)
	}
}

// TestEvictLeastWeight: among keys counting now, the one with the fewest
// hits goes; a steady key keeps its exact count.
func TestEvictLeastWeight(t *testing.T) {
	ns := newNS(t, evictConfig(2), newFakeClock(epoch))
	at := epoch.Add(time.Second / 2)
	for range 5 {
		incr(t, ns, at, "steady", 0, 1)
	}
	incr(t, ns, at, "once", 0, 1)
	incr(t, ns, at, "new", 0, 1)
	if got := rateOf(t, ns, at, "steady", time.Second); got != 5 {
		t.Errorf("steady's rate = %v, want 5", got)
	}
	if got := rateOf(t, ns, at, "once", time.Second); got != 0 {
		t.Errorf("once's rate = %v, want 0 (evicted)", got)
	}
}

// TestEvictNeverOverLimit: a key that its last Allow refused is never
// evicted for a new key, which is refused instead; once an Allow admits
// it again, it may go.
func TestEvictNeverOverLimit(t *testing.T) {
	ns := newNS(t, evictConfig(1), newFakeClock(epoch))
	at := epoch.Add(time.Second / 2)
	lim := []ratelimit.Limit{{Size: time.Second, Limit: 1}}
	for i, want := range []bool{true, false} {
		d, err := ns.AllowAt(at, ratelimit.AllowRequest{Key: "abuser", Cost: 1, Limits: lim}, nil)
		if err != nil || d.Allowed != want {
			t.Fatalf("Allow %d = %v, %v; want allowed %v", i, d.Allowed, err, want)
		}
	}
	_, err := ns.IncrementAt(at, "new", 0, 1, nil)
	wantFieldError(t, err, "key", node.ErrKeyLimit)
	checkKeys(t, ns, 1, 0, 1)
	d, err := ns.AllowAt(at, ratelimit.AllowRequest{Key: "abuser", Cost: 1, Limits: lim}, nil)
	if err != nil || d.Allowed {
		t.Fatalf("abuser after the refused new key: allowed %v, %v; want refused (its count kept)", d.Allowed, err)
	}
	// A later Allow that admits it (a higher limit) clears the mark.
	if d, err := ns.AllowAt(at, ratelimit.AllowRequest{Key: "abuser", Cost: 0, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 100}}}, nil); err != nil || !d.Allowed {
		t.Fatalf("Allow under a high limit = %v, %v", d.Allowed, err)
	}
	incr(t, ns, at, "new", 0, 1)
	checkKeys(t, ns, 1, 1, 1)
}

// TestEvictNeverDirty: in a syncing namespace a key whose counts are not
// pushed is never evicted; once pushed, it may be.
func TestEvictNeverDirty(t *testing.T) {
	cfg := syncedConfig(time.Second)
	cfg.MaxKeys, cfg.OnFull = 1, node.OnFullEvict
	clock := newFakeClock(epoch)
	ns := newNS(t, cfg, clock)
	at := epoch.Add(time.Second / 2)
	incr(t, ns, at, "unpushed", 0, 1)
	_, err := ns.IncrementAt(at, "new", 0, 1, nil)
	wantFieldError(t, err, "key", node.ErrKeyLimit)
	for _, p := range ns.CollectDirty(at, nil) {
		ns.MarkPushed(p, 1)
	}
	incr(t, ns, at, "new", 0, 1)
	checkKeys(t, ns, 1, 1, 1)
}

// TestEvictRefuseByDefault: without OnFull the cap refuses, as before.
func TestEvictRefuseByDefault(t *testing.T) {
	cfg := localConfig(time.Second)
	cfg.MaxKeys = 1
	ns := newNS(t, cfg, newFakeClock(epoch))
	incr(t, ns, epoch, "a", 0, 1)
	_, err := ns.IncrementAt(epoch, "b", 0, 1, nil)
	wantFieldError(t, err, "key", node.ErrKeyLimit)
	checkKeys(t, ns, 1, 0, 1)
}

// TestEvictConcurrent: a flood of new keys racing a steady key's counting
// (run with -race) keeps the cap and the steady key's exact count.
func TestEvictConcurrent(t *testing.T) {
	const maxKeys, flood, steady = 1000, 20_000, 2000
	ns := newNS(t, evictConfig(maxKeys), newFakeClock(epoch))
	at := epoch.Add(time.Second / 2)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range flood / 4 {
				if _, err := ns.IncrementAt(at, fmt.Sprintf("flood-%d-%d", g, i), 0, 1, nil); err != nil && !errors.Is(err, node.ErrKeyLimit) {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range steady {
		incr(t, ns, at, "steady", 0, 1)
	}
	wg.Wait()
	if got := rateOf(t, ns, at, "steady", time.Minute); got != steady {
		t.Errorf("steady's rate = %v, want %d", got, steady)
	}
	if got := ns.ActiveKeys(); got > maxKeys {
		t.Errorf("ActiveKeys = %d, want at most %d", got, maxKeys)
	}
	if ns.EvictedKeys() == 0 {
		t.Error("EvictedKeys = 0, want evictions")
	}
}

func TestConfigOnFull(t *testing.T) {
	cfg := localConfig(time.Second)
	cfg.OnFull = "drop"
	wantFieldError(t, cfg.Validate(), "on_full", node.ErrInvalidConfig)
}
