package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
)

// TestEvictNeverUnpushedPreviousWindow: a key whose only unpushed hits
// are in the window before the current one still counts them (the
// sliding rate weighs that window), so a new key at the cap does not
// evict it: the new key is refused. The window boundary is exact: the
// key's last window starts exactly one window before the current one.
func TestEvictNeverUnpushedPreviousWindow(t *testing.T) {
	cfg := syncedConfig(time.Second)
	cfg.MaxKeys, cfg.OnFull = 1, node.OnFullEvict
	clock := fakeclock.New(epoch.Add(time.Second / 2))
	ns := newNS(t, cfg, clock)
	incr(t, ns, clock.Now(), "unpushed", 0, 1) // window [epoch, epoch+1s)
	clock.Set(epoch.Add(3 * time.Second / 2))  // its window is now the previous one
	_, err := ns.IncrementAt(clock.Now(), "new", 0, 1, nil)
	wantFieldError(t, err, "key", node.ErrKeyLimit)
	checkKeys(t, ns, 1, 0, 1)
	if got := rateOf(t, ns, clock.Now(), "unpushed", time.Second); got != 0.5 {
		t.Errorf("unpushed's rate = %v, want 0.5 (its hit, half weighed, kept)", got)
	}
}

// TestEvictNeverUnpushedPrevBehindPushedCurrent: a key whose current
// window (starting exactly at the current window's start) was pushed but
// whose previous window was not is not evicted either: the previous
// window still counts.
func TestEvictNeverUnpushedPrevBehindPushedCurrent(t *testing.T) {
	cfg := syncedConfig(time.Second)
	cfg.MaxKeys, cfg.OnFull = 1, node.OnFullEvict
	clock := fakeclock.New(epoch.Add(time.Second / 2))
	ns := newNS(t, cfg, clock)
	incr(t, ns, clock.Now(), "k", 0, 1) // window [epoch, epoch+1s), left unpushed
	clock.Set(epoch.Add(3 * time.Second / 2))
	incr(t, ns, clock.Now(), "k", 0, 1) // window [epoch+1s, epoch+2s), pushed below
	cur := epoch.Add(time.Second).UnixNano()
	pushed := 0
	for _, p := range ns.CollectDirty(clock.Now(), nil) {
		if p.Start == cur {
			ns.MarkPushed(p, 1)
			pushed++
		}
	}
	if pushed != 1 {
		t.Fatalf("pushed %d current windows, want 1", pushed)
	}
	_, err := ns.IncrementAt(clock.Now(), "new", 0, 1, nil)
	wantFieldError(t, err, "key", node.ErrKeyLimit)
	checkKeys(t, ns, 1, 0, 1)
}
