//go:build integration

package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/internal/accuracy"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestAccuracyGridSmoke runs two cells of the accuracy grid
// (TestAccuracyGrid, build tag accuracy) on Redis: a sliding window and a
// token bucket of 10 per 1 s, Zipf 1.1 over 10,000 keys with the most
// called key at 10×, 1 s of warm-up and 3 s judged, synchronous (the
// floor) and at sync_rate 0.1 with escalation. It asserts only what holds
// on any host: the harness judges every call it sent, its counts add up,
// and the synchronous mode admits almost nothing the oracle refuses (a
// few calls the store took in another order than their time). About 20 s.
func TestAccuracyGridSmoke(t *testing.T) {
	open := accuracyStores[0].open(t) // redis
	table := append([]string(nil), accuracy.GridHeader...)
	for _, kind := range []ratelimit.LimitKind{ratelimit.WindowLimit, ratelimit.TokenLimit} {
		c := accuracy.Cell{Window: time.Second, Limit: 10, Kind: kind, Keys: 10_000, ZipfS: 1.1, TopLoad: 10,
			Warmup: time.Second, Duration: 3 * time.Second}
		var floor accuracy.Result
		for _, s := range []float64{0, 0.1} {
			r := c.Run(s)
			r.Namespace, r.NewStore = harness.UniqueName("gridsmoke"), open
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := accuracy.Measure(ctx, r)
			cancel()
			if err != nil {
				t.Fatalf("%s, sync_rate %v: %v", accuracy.KindName(kind), s, err)
			}
			t.Logf("%s, sync_rate %v: %s", accuracy.KindName(kind), s, res.Summary(r))
			var misses []string
			if s == 0 {
				floor = res
			} else {
				misses = accuracy.DefaultTargets.Misses(res, floor)
			}
			checkGridCounts(t, r, res)
			table = append(table, accuracy.GridRow("redis", r, res, floor, misses, ""))
			if s == 0 && float64(res.WronglyAdmitted) > 0.005*float64(res.Calls) {
				t.Errorf("%s, synchronous: %d of %d calls admitted where the oracle refuses, want at most 0.5 %%",
					accuracy.KindName(kind), res.WronglyAdmitted, res.Calls)
			}
		}
	}
	t.Logf("\n%s", strings.Join(table, "\n"))
}

// checkGridCounts checks that a run judged the calls it sent and that its
// counts add up.
func checkGridCounts(t *testing.T, r accuracy.Run, res accuracy.Result) {
	t.Helper()
	judged := res.Sent - res.WarmupCalls
	// A call due within a millisecond of the judged start may go a little
	// before it; warm-up calls that queued behind a pause come after it.
	early := int64(r.Rate*0.005) + 2
	switch {
	case res.Errors != 0 || res.Recorded != res.Sent:
		t.Errorf("%d calls sent, %d answered, %d errors", res.Sent, res.Recorded, res.Errors)
	case int64(res.Calls) < judged-early || int64(res.Calls) > res.Recorded:
		t.Errorf("%d calls judged; %d sent after the warm-up, %d in all", res.Calls, judged, res.Recorded)
	case res.Calls == 0 || res.Admitted > res.Calls || res.WronglyAdmitted > res.Admitted ||
		res.WronglyRefused > res.Calls-res.Admitted || res.AtLimit > res.Calls:
		t.Errorf("counts do not add up: %d calls, %d admitted, %d wrongly, %d wrongly refused, %d at the limit",
			res.Calls, res.Admitted, res.WronglyAdmitted, res.WronglyRefused, res.AtLimit)
	case res.Admitted == res.Calls || res.Admitted == 0:
		t.Errorf("%d of %d calls admitted: want the top keys refused and the others admitted", res.Admitted, res.Calls)
	case res.Local() < 0 || res.Local() > 1 || r.SyncRate == 0 && res.Local() != 0:
		t.Errorf("sync_rate %v: %.4f of calls decided without a store round trip", r.SyncRate, res.Local())
	}
}
