package node_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestKeyCapErrorNamesTheKeyCount: a new key refused because max_keys
// keys are held says so; only a refusal below that count blames the
// bytes. The operator reads the message to know which cap to raise.
func TestKeyCapErrorNamesTheKeyCount(t *testing.T) {
	cfg := localConfig(time.Second)
	cfg.MaxKeys = 2
	ns := newNS(t, cfg, nil)
	incr(t, ns, epoch, "a", time.Second, 1)
	incr(t, ns, epoch, "b", time.Second, 1)
	_, err := ns.IncrementAt(epoch, "c", time.Second, 1, nil)
	wantFieldError(t, err, "key", node.ErrKeyLimit)
	if err == nil || !strings.Contains(err.Error(), "maximum of 2 active keys") {
		t.Errorf("refused at the key count: %v, want it to name the maximum of 2 active keys", err)
	}
}

// TestEstimatorCountsAZeroIncrement: an estimator namespace refuses
// negative values only; an increment of 0 is a read that answers the
// rates.
func TestEstimatorCountsAZeroIncrement(t *testing.T) {
	ns := newNS(t, estimatorConfig(4, 1024, time.Second), nil)
	incr(t, ns, epoch, "k", time.Second, 2)
	r, err := ns.IncrementAt(epoch, "k", time.Second, 0, nil)
	if err != nil || len(r) != 1 || r[0].Rate != 2 {
		t.Errorf("IncrementAt(0) = %+v, %v; want the rate 2 and no error", r, err)
	}
}

// TestCountingAcrossTheUnixEpoch: instants before 1970 fall in windows
// like any others. A key counted in the window [-10 s, 0) and then at
// +15 s, two windows later, starts a new window there: the old count no
// longer counts (the fast path must not take +15 s for a time in the
// window [-10 s, 0)).
func TestCountingAcrossTheUnixEpoch(t *testing.T) {
	const size = 10 * time.Second
	ns := newNS(t, localConfig(size), nil)
	incr(t, ns, time.Unix(-5, 0), "k", size, 3)
	if r := incr(t, ns, time.Unix(15, 0), "k", size, 1); r[0].Rate != 1 {
		t.Errorf("rate after counting 1 at +15 s = %v, want 1 (the count of [-10 s, 0) no longer counts)", r[0].Rate)
	}
	if got := rateOf(t, ns, time.Unix(15, 0), "k", size); got != 1 {
		t.Errorf("rate at +15 s = %v, want 1", got)
	}
	// In the next window the +15 s count is the previous window's, half
	// of it counting at +25 s.
	if got := rateOf(t, ns, time.Unix(25, 0), "k", size); got != 0.5 {
		t.Errorf("rate at +25 s = %v, want 0.5", got)
	}
}

// TestLearnedKeysTakeThreeQuartersOfTheBytes: keys learned from the other
// nodes fill the namespace's bytes up to three quarters of max_bytes, so
// the last quarter stays for the node's own keys, which then fill it up
// to max_bytes.
func TestLearnedKeysTakeThreeQuartersOfTheBytes(t *testing.T) {
	now := epoch.Add(30 * time.Second)
	cfg := syncedConfig(time.Minute)
	cfg.MaxKeys = 1 << 20 // the bytes are the cap
	cfg.MaxBytes = node.MinMaxBytes
	ns := newNS(t, cfg, newFakeClock(now))
	const keyLen = 1000
	key := func(prefix string, i int) string { return fmt.Sprintf("%s%0*d", prefix, keyLen-len(prefix), i) }
	cost := node.KeyCost(keyLen, 1)
	ws := ratelimit.WindowStart(now.UnixNano(), time.Minute)
	learned := 0
	for ; ; learned++ {
		_, ok, _, full := ns.LearnWindow(now, key("l", learned), time.Minute, ws)
		if !ok {
			if !full {
				t.Fatalf("learning key %d: neither learned nor full", learned)
			}
			break
		}
		if learned > 2000 {
			t.Fatal("learned more than 2000 keys of 1000 bytes under 1 MiB")
		}
	}
	if limit := cfg.MaxBytes * 3 / 4; int64(learned)*cost > limit || int64(learned+1)*cost <= limit {
		t.Errorf("learned %d keys costing %d bytes each, want as many as fit in %d bytes (3/4 of max_bytes)", learned, cost, limit)
	}
	own := 0
	for ; ; own++ {
		if _, err := ns.IncrementAt(now, key("o", own), time.Minute, 1, nil); err != nil {
			if !errors.Is(err, node.ErrKeyLimit) {
				t.Fatal(err)
			}
			break
		}
	}
	if total := int64(learned + own); total*cost > cfg.MaxBytes || (total+1)*cost <= cfg.MaxBytes {
		t.Errorf("%d learned and %d own keys of %d bytes each, want the own keys to fill max_bytes %d", learned, own, cost, cfg.MaxBytes)
	}
}

// TestReclaimDropsAPreviousWindowTwoWindowsOld: a key counted in two
// consecutive windows, reclaimed in the window after, keeps its last
// window (the previous one at that time) and drops the one before it,
// which no longer counts: its unpushed count shows in DroppedWindows at
// that Reclaim.
func TestReclaimDropsAPreviousWindowTwoWindowsOld(t *testing.T) {
	const size = time.Second
	ns := newNS(t, syncedConfig(size), nil)
	incr(t, ns, epoch, "k", size, 4)           // window [0, 1 s)
	incr(t, ns, epoch.Add(size), "k", size, 2) // window [1 s, 2 s)
	at := epoch.Add(2*size + size/2)
	if got := ns.Reclaim(at); got != 0 {
		t.Errorf("Reclaim removed %d keys, want 0 (its last window still counts)", got)
	}
	if got := ns.DroppedWindows(); got != 1 {
		t.Errorf("DroppedWindows = %d after reclaiming the window two back, want 1", got)
	}
	if got := rateOf(t, ns, at, "k", size); got != 1 {
		t.Errorf("rate at +2.5 s = %v, want 1 (half the previous window's 2)", got)
	}
}

// TestReclaimIntervalIsTheSmallestSizeClamped: Run reclaims as often as
// the smallest window size, but at least every 30 s and at most every
// second.
func TestReclaimIntervalIsTheSmallestSizeClamped(t *testing.T) {
	for _, tc := range []struct {
		sizes []time.Duration
		want  time.Duration
	}{
		{[]time.Duration{time.Hour, 10 * time.Second}, 10 * time.Second},
		{[]time.Duration{time.Minute}, 30 * time.Second},
		{[]time.Duration{100 * time.Millisecond, time.Minute}, time.Second},
	} {
		if got := node.ReclaimInterval(node.Config{WindowSizes: tc.sizes}); got != tc.want {
			t.Errorf("ReclaimInterval(sizes %v) = %v, want %v", tc.sizes, got, tc.want)
		}
	}
}
