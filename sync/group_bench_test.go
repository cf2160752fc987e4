package sync_test

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

// BenchmarkHotKeyAllowRedis: synchronous Allow calls (sync_rate 0) of one
// key from 64 goroutines at once (b.SetParallelism on GOMAXPROCS), on the
// Redis server named by LIMITERD_TEST_REDIS, with the windows of the Envoy
// benchmark (1s, 1m, 1h, 24h) and a limit that never refuses.
// decisions/s is what the key gets.
//
//	LIMITERD_TEST_REDIS=127.0.0.1:6379 go test -run '^$' -bench HotKeyAllowRedis -benchtime 5s ./sync/
func BenchmarkHotKeyAllowRedis(b *testing.B) {
	addr := os.Getenv("LIMITERD_TEST_REDIS")
	if addr == "" {
		b.Skip("LIMITERD_TEST_REDIS is not set")
	}
	cfg := redisstore.DefaultConfig()
	cfg.Addrs = []string{addr}
	cfg.KeyPrefix = "bench.group." + clustersync.NewIncarnation("b") + ":"
	store, err := redisstore.Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = store.Close() })
	ns, err := node.NewNamespace(node.Config{Name: "envoy", WindowSizes: []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}, Shared: true}, node.SystemClock{})
	if err != nil {
		b.Fatal(err)
	}
	sy, err := clustersync.NewSyncer(ns, clustersync.Synchronous{}, store, clustersync.NewIncarnation("bench"), clustersync.NewVersions(time.Now), clustersync.Config{CallTimeout: 5 * time.Second}, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	req := ratelimit.AllowRequest{Key: "hot", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1e9}}}
	b.ReportAllocs()
	b.SetParallelism(max(1, 64/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var dst []ratelimit.LimitStatus
		for pb.Next() {
			d, err := sy.Calls().AllowAt(context.Background(), time.Now(), req, dst[:0])
			if err != nil || !d.Allowed {
				b.Errorf("allowed %v, err %v", d.Allowed, err)
				return
			}
			dst = d.Limits
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
