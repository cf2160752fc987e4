//go:build integration

package integration

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
)

// TestBucketEscalationSmoke: three periodic nodes (sync_rate 0.1) at ten
// times a fixed bucket's rate (50 a second) admit, with escalation near
// its capacity, at most its limit in every period the run touches; on
// Redis, without escalation, they admit more (every node takes each new
// period's count as its own). About 7 s per store.
func TestBucketEscalationSmoke(t *testing.T) {
	stores := []struct {
		name  string
		store func(t *testing.T) string
	}{
		{"redis", func(t *testing.T) string {
			return redisStore(harness.SharedRedis(t).Addr(), harness.UniqueName("besc"))
		}},
		{"postgres", func(t *testing.T) string { return postgresStore(harness.SharedPostgres(t).DSN()) }},
	}
	const limit = 50
	fixed := &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Period: durationpb.New(time.Second), Limit: limit}}}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			run := func(escalate string) (admitted int64, periods int) {
				// A store call past call_timeout presumes the store down and
				// the nodes decide alone, as documented; 2 s keeps a pause of
				// the machine from turning into that here.
				config := withCallTimeout(clusterConfig(st.store(t), 0.1), "2s")
				config = strings.Replace(config, "sync_rate: 0.1", "sync_rate: 0.1\n    escalate: "+escalate, 1)
				nodes := harness.Cluster(t, 3, config)
				key := harness.UniqueName("fixed")
				const callers, rate, d = 12, 10 * limit, 3 * time.Second
				interval := time.Second * callers / rate
				var n, failed atomic.Int64
				var wg sync.WaitGroup
				begin := time.Now()
				end := begin.Add(d)
				for c := range callers {
					wg.Go(func() {
						tick := time.NewTicker(interval)
						defer tick.Stop()
						for i := c; time.Now().Before(end); i += callers {
							ok, err := takeBucket(context.Background(), nodes[i%len(nodes)], key, fixed)
							switch {
							case err != nil:
								failed.Add(1)
							case ok:
								n.Add(1)
							}
							<-tick.C
						}
					})
				}
				wg.Wait()
				if failed.Load() > 0 {
					t.Fatalf("escalate %s: %d takes failed", escalate, failed.Load())
				}
				// The periods the calls fell in, from the first call's to
				// the last answer's.
				periods = int(time.Now().Truncate(time.Second).Sub(begin.Truncate(time.Second))/time.Second) + 1
				if f := fallbacks(t, nodes); f > 0 {
					// A store call failed or passed call_timeout: the store
					// was presumed down and calls decided in their nodes,
					// each up to the limit alone, as documented.
					if n.Load() > int64(len(nodes)*periods*limit) {
						t.Errorf("escalate %s, %v calls decided alone after a failed store call: admitted %d, want at most N·limit per period = %d", escalate, f, n.Load(), len(nodes)*periods*limit)
					}
					t.Logf("escalate %s: %v calls decided alone after a failed store call; judged by the bound of a store presumed down", escalate, f)
					return -1, periods
				}
				return n.Load(), periods
			}
			on, periods := run("auto")
			if on < 0 {
				return
			}
			t.Logf("escalate auto: admitted %d in %d periods of at most %d", on, periods, limit)
			if on > int64(periods*limit) {
				t.Errorf("escalate auto: admitted %d in %d periods, want at most %d", on, periods, periods*limit)
			}
			if on < int64((periods-2)*limit) {
				t.Errorf("escalate auto: admitted %d in %d periods, want at least %d: the bucket refuses what it should admit", on, periods, (periods-2)*limit)
			}
			if st.name != "redis" {
				return
			}
			off, periods := run("never")
			if off < 0 {
				return
			}
			t.Logf("escalate never: admitted %d in %d periods of at most %d", off, periods, limit)
			if off <= int64(periods*limit) {
				t.Errorf("escalate never: admitted %d in %d periods, want more than %d (else this test shows nothing)", off, periods, periods*limit)
			}
		})
	}
}
