//go:build integration

package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

func redisStore(addr, prefix string) string {
	return fmt.Sprintf(`{type: redis, addrs: ["%s"], key_prefix: "%s"}`, addr, prefix)
}

func TestRedisClusterConverges(t *testing.T) {
	r := harness.StartRedis(t)
	nodes := harness.Cluster(t, 3, clusterConfig(redisStore(r.Addr(), "conv"), 0.1))
	checkConverges(t, nodes, 100*time.Millisecond)
}

// checkConverges sends hits round-robin over nodes and expects every node
// to report the exact total within two sync periods plus one tick deadline
// (1 s) of the last hit.
func checkConverges(t *testing.T, nodes []*harness.Limiterd, syncRate time.Duration) {
	t.Helper()
	// The bound below is the sync's, not a first connection's: a node's
	// first Cassandra session can take over a second on a loaded host.
	for _, n := range nodes {
		storeUp(t, n, true, time.Minute)
	}
	at := time.Now()
	failed0 := failedTicks(t, nodes)
	exact := map[string]float64{}
	for i := range 300 {
		key := fmt.Sprintf("k%d", i%10)
		if err := increment(context.Background(), nodes[i%len(nodes)], key, at); err != nil {
			t.Fatal(err)
		}
		exact[key]++
	}
	// The docs' bound, D = 2·s + d: a tick to push and one to fetch, each
	// taking at most clusterConfig's tick_timeout (1 s). A tick that fails
	// (a store call past the timeout, on a loaded host) is repeated by the
	// next: each adds a period and a timeout.
	const tickTimeout = time.Second
	last := time.Now()
	deadline := func() time.Time {
		failed := failedTicks(t, nodes) - failed0
		return last.Add(2*syncRate + 2*tickTimeout + time.Duration(failed)*(syncRate+tickTimeout))
	}
	for key, want := range exact {
		waitConvergedBy(t, nodes, key, at, want, deadline)
	}
}

func TestRedisOutage(t *testing.T) {
	r := harness.StartRedis(t)
	nodes := harness.Cluster(t, 3, clusterConfig(redisStore(r.Addr(), "outage"), 0.1))
	cfg := redisstore.DefaultConfig()
	cfg.Addrs, cfg.KeyPrefix = []string{r.Addr()}, "outage"
	st, err := redisstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	checkOutage(t, nodes, r.Stop, r.Start, st)
}

// windower reads one window's total over every incarnation from a store.
type windower interface {
	Window(ctx context.Context, key clustersync.WindowKey) (int64, error)
}

// checkOutage drives Increments while the store is stopped and restarted:
// every call must succeed (answered from local counts), every process must
// survive, afterwards every node converges on the exact count of hits and
// the store holds each hit exactly once.
func checkOutage(t *testing.T, nodes []*harness.Limiterd, stop, start func(), st windower) {
	t.Helper()
	at := time.Now()
	keys := []string{"a", "b", "c", "d"}
	ctx, cancel := context.WithCancel(context.Background())
	l := runLoad(ctx, nodes, keys, at, 6)
	outage(stop, start)
	cancel()
	l.wait()
	if n := l.errors.Load(); n > 0 {
		t.Errorf("%d Increments failed during the outage; want every call answered locally", n)
	}
	for _, n := range nodes {
		if !n.Running() {
			t.Fatalf("%s died", n.Name)
		}
	}
	// A node's new store session can take over 10 s on a loaded host
	// (Cassandra refreshes its schema first): the bound is generous, the
	// wait ends as soon as the nodes agree.
	deadline := time.Now().Add(30 * time.Second)
	for i, key := range keys {
		waitConverged(t, nodes, key, at, float64(l.ok[i].Load()), deadline)
	}
	checkStoreTotals(t, st, keys, l, at)
	t.Logf("hits per key: %v; failed calls: %d", l.counts(), l.errors.Load())
}

func TestRedisSynchronousAllowExact(t *testing.T) {
	r := harness.StartRedis(t)
	nodes := harness.Cluster(t, 3, exactConfig(redisStore(r.Addr(), "allow")))
	if got := allowLoad(t, nodes, "hot", time.Now(), 100, 30, 10); got != 100 {
		t.Fatalf("admitted %d across 3 nodes, want exactly 100 (calls answered from local counts: %.0f)", got, fallbacks(t, nodes))
	}
}

// outage lets a load run for 1 s, stops the store for 2 s, starts it
// again and lets the load run 1 s more.
func outage(stop, start func()) {
	time.Sleep(time.Second)
	stop()
	time.Sleep(2 * time.Second)
	start()
	time.Sleep(time.Second)
}

// checkStoreTotals expects the store to hold each key's hits exactly once.
func checkStoreTotals(t *testing.T, st windower, keys []string, l *load, at time.Time) {
	t.Helper()
	for i, key := range keys {
		wk := clustersync.WindowKey{Namespace: "api", Size: time.Hour, Start: at.Truncate(time.Hour).UnixNano(), Key: key}
		got, err := st.Window(context.Background(), wk)
		if err != nil {
			t.Fatalf("store Window(%s): %v", key, err)
		}
		if want := l.ok[i].Load() * 1e6; got != want {
			t.Errorf("store holds %d micro-hits for %s, want %d (%d hits)", got, key, want, l.ok[i].Load())
		}
	}
}
