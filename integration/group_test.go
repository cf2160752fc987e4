//go:build integration

package integration

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestSynchronousHotKeyExact: three limiterd processes in a synchronous
// namespace (sync_rate 0), 96 callers of one key at once, 32 on each node,
// so that each node decides its queued calls in groups. Allow admits
// exactly the limit across the nodes and the store holds exactly that;
// then concurrent Increments of one key each reach the store exactly once.
func TestSynchronousHotKeyExact(t *testing.T) {
	stores := map[string]func(t *testing.T) (string, windower){
		"redis": func(t *testing.T) (string, windower) {
			addr, prefix := harness.SharedRedis(t).Addr(), harness.UniqueName("group")
			cfg := redisstore.DefaultConfig()
			cfg.Addrs, cfg.KeyPrefix = []string{addr}, prefix
			st, err := redisstore.Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			return redisStore(addr, prefix), st
		},
		"postgres": func(t *testing.T) (string, windower) {
			dsn := harness.SharedPostgres(t).DSN()
			return postgresStore(dsn), openPostgres(t, dsn)
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			config, st := open(t)
			nodes := harness.Cluster(t, 3, exactConfig(config))
			at := time.Now()
			const limit = 500
			if got := allowLoad(t, nodes, "hot", at, limit, 96, 20); got != limit {
				t.Errorf("admitted %d of %d calls across 3 nodes, want exactly %d (calls answered from local counts: %.0f)", got, 96*20, limit, fallbacks(t, nodes))
			}
			wantWindow(t, st, "hot", at, limit)

			var ok, failed atomic.Int64
			var wg sync.WaitGroup
			for w := range 96 {
				wg.Go(func() {
					n := nodes[w%len(nodes)]
					for range 20 {
						if err := increment(context.Background(), n, "inc", at); err != nil {
							failed.Add(1)
							continue
						}
						ok.Add(1)
					}
				})
			}
			wg.Wait()
			if failed.Load() > 0 {
				t.Errorf("%d Increments failed", failed.Load())
			}
			if f := fallbacks(t, nodes); f > 0 {
				t.Errorf("%.0f calls answered from local counts, want every call decided in the store", f)
			}
			wantWindow(t, st, "inc", at, ok.Load())
		})
	}
}

// wantWindow expects the store to hold want hits for key's hour at at.
func wantWindow(t *testing.T, st windower, key string, at time.Time, want int64) {
	t.Helper()
	wk := clustersync.WindowKey{Namespace: "api", Size: time.Hour, Start: at.Truncate(time.Hour).UnixNano(), Key: key}
	got, err := st.Window(context.Background(), wk)
	if err != nil {
		t.Fatalf("store Window(%s): %v", key, err)
	}
	if got != want*1e6 {
		t.Errorf("store holds %d micro-hits for %s, want %d (%d hits)", got, key, want*1e6, want)
	}
}
