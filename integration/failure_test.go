//go:build integration

package integration

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

// The failure scenarios run against each store: a node killed and
// restarted, a rolling restart, a store outage and a partition of one node
// from the store. Each uses keys of its own, so they share the store.

// failSyncRate is the periodic namespace's sync period; failCallTimeout
// bounds a synchronous call.
const (
	failSyncRate    = 200 * time.Millisecond
	failCallTimeout = 300 * time.Millisecond
	failTickTimeout = time.Second
	// storeWait bounds waits for a store to answer. A store shared with
	// the other test packages (Cassandra above all, while they create
	// keyspaces and push large batches) can stall for seconds on a 2-core
	// machine; a wait ends as soon as its condition holds.
	storeWait = 60 * time.Second
)

// failStore is one store under test, reached by the nodes at an address
// that may be a proxy's.
type failStore struct {
	// addr is the server's host:port.
	addr string
	// yaml is the store's mapping in limiterd's config, reaching the
	// server at addr (the server's or a proxy's).
	yaml func(addr string) string
	// stop and start make a real outage; nil: every node reaches the
	// store through a proxy that is dropped instead.
	stop, start func()
	// window reads a window's total over every incarnation.
	window windower
	// decides: the store decides atomically, so it serves the
	// synchronous namespace "direct".
	decides bool
}

func TestFailure(t *testing.T) {
	stores := []struct {
		name string
		open func(t *testing.T) *failStore
	}{
		{"redis", openFailRedis},
		{"postgres", openFailPostgres},
		{"cassandra", openFailCassandra},
	}
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			st := s.open(t)
			t.Run("kill", func(t *testing.T) { testKillRestart(t, st) })
			t.Run("rolling", func(t *testing.T) { testRollingRestart(t, st) })
			t.Run("outage", func(t *testing.T) { testStoreOutage(t, st) })
			t.Run("partition", func(t *testing.T) { testPartition(t, st) })
			t.Run("hostile", func(t *testing.T) { testHostileInput(t, st) })
		})
	}
}

func openFailRedis(t *testing.T) *failStore {
	r := harness.StartRedis(t)
	prefix := harness.UniqueName("fail")
	cfg := redisstore.DefaultConfig()
	cfg.Addrs, cfg.KeyPrefix = []string{r.Addr()}, prefix
	st, err := redisstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &failStore{
		addr: r.Addr(),
		yaml: func(addr string) string {
			return fmt.Sprintf(`{type: redis, addrs: ["%s"], key_prefix: "%s"}`, addr, prefix)
		},
		stop: r.Stop, start: r.Start, window: st, decides: true,
	}
}

func openFailPostgres(t *testing.T) *failStore {
	p := harness.StartPostgres(t)
	u, err := url.Parse(p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg := pgstore.DefaultConfig()
	cfg.DSN = p.DSN()
	st, err := pgstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &failStore{
		addr: u.Host,
		yaml: func(addr string) string {
			v := *u
			v.Host = addr
			return fmt.Sprintf(`{type: postgres, dsn: "%s"}`, v.String())
		},
		stop: p.Stop, start: p.Start, window: st, decides: true,
	}
}

// openFailCassandra uses the shared Cassandra (one per test run): its
// outage is a proxy that drops every connection.
func openFailCassandra(t *testing.T) *failStore {
	c := harness.SharedCassandra(t)
	keyspace := harness.UniqueName("fail")
	cfg := cassandrastore.DefaultConfig()
	cfg.Hosts, cfg.Port, cfg.Keyspace = []string{c.Host()}, c.Port(), keyspace
	st, err := cassandrastore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &failStore{
		addr: fmt.Sprintf("%s:%d", c.Host(), c.Port()),
		yaml: func(addr string) string {
			host, port, _ := strings.Cut(addr, ":")
			// The port applies to the hosts the driver discovers too,
			// so that every connection goes through addr.
			return fmt.Sprintf(`{type: cassandra, hosts: ["%s"], port: %s, keyspace: "%s"}`, host, port, keyspace)
		},
		window: st,
	}
}

// failConfig has a periodic namespace "api" on the store at addr, and a
// synchronous one "direct" when the store decides atomically.
func failConfig(st *failStore, addr string) string {
	direct := ""
	if st.decides {
		direct = "  - {name: direct, window_sizes: [\"1h\"], sync_rate: 0, store: main}\n"
	}
	return fmt.Sprintf(`sync:
  tick_timeout: %s
  call_timeout: %s
  retry_period: %s
stores:
  main: %s
namespaces:
  - name: api
    window_sizes: ["1h"]
    sync_rate: %v
    store: main
%s`, failTickTimeout, failCallTimeout, failSyncRate, st.yaml(addr), failSyncRate.Seconds(), direct)
}

// startFailLoad starts a harness.Load over nodes.
func startFailLoad(nodes []*harness.Limiterd, namespace string, keys []string, at time.Time, workers int) *harness.Load {
	clients := make([]limiterv1.RateLimiterClient, len(nodes))
	for i, n := range nodes {
		clients[i] = n.Client
	}
	return harness.StartLoad(clients, 0, namespace, keys, at, workers)
}

// storeTotals reads the store's totals of l's keys, in hits.
func storeTotals(t *testing.T, st *failStore, namespace string, keys []string, at time.Time) []int64 {
	t.Helper()
	out := make([]int64, len(keys))
	for i, key := range keys {
		wk := clustersync.WindowKey{Namespace: namespace, Size: time.Hour, Start: at.Truncate(time.Hour).UnixNano(), Key: key}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := st.window.Window(ctx, wk)
		cancel()
		if err != nil {
			t.Fatalf("store Window(%s/%s): %v", namespace, key, err)
		}
		if got%1_000_000 != 0 {
			t.Fatalf("store holds %d micro-hits for %s/%s: not a whole number of hits", got, namespace, key)
		}
		out[i] = got / 1_000_000
	}
	return out
}

func nsRate(ctx context.Context, n *harness.Limiterd, namespace, key string, at time.Time) (float64, error) {
	resp, err := n.Client.SlidingWindow(ctx, &limiterv1.SlidingWindowRequest{
		Namespace: namespace, Key: key, WindowSize: durationpb.New(time.Hour), At: timestamppb.New(at)})
	if err != nil {
		return 0, err
	}
	return resp.GetRates()[0].GetRate(), nil
}

// settle waits until, for every key, each node reports the same count and
// the store holds it, and returns those counts and how long it took.
func settle(t *testing.T, st *failStore, nodes []*harness.Limiterd, namespace string, keys []string, at time.Time, timeout time.Duration) ([]int64, time.Duration) {
	t.Helper()
	began := time.Now()
	deadline := began.Add(timeout)
	for {
		stored := storeTotals(t, st, namespace, keys, at)
		agreed := true
		var seen []string
		for i, key := range keys {
			for _, n := range nodes {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				r, err := nsRate(ctx, n, namespace, key, at)
				cancel()
				if err != nil {
					t.Fatalf("%s SlidingWindow(%s/%s): %v", n.Name, namespace, key, err)
				}
				if math.Abs(r-float64(stored[i])) > 1e-9 {
					agreed = false
				}
				seen = append(seen, fmt.Sprintf("%s@%s=%v", key, n.Name, r))
			}
		}
		if agreed {
			return stored, time.Since(began)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: nodes and store did not agree within %v: store %v, nodes %v", namespace, timeout, stored, seen)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sum(v []int64) int64 {
	var n int64
	for _, x := range v {
		n += x
	}
	return n
}

func scenarioKeys(scenario string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s-%d", scenario, i)
	}
	return keys
}

// histogram is a Prometheus histogram's cumulative bucket counts by upper
// bound (seconds).
type histogram map[float64]float64

// syncState is one reading of a node's sync metrics for a namespace.
type syncState struct {
	ticks       histogram // tick durations
	lastSuccess time.Time // end of the last fully successful tick
}

// scrapeSync reads the node's sync tick duration histogram and last
// success time for namespace, from one /metrics reading; it fails the
// test when there has been no successful tick yet.
func scrapeSync(t *testing.T, n *harness.Limiterd, namespace string) syncState {
	t.Helper()
	st, ok := trySync(t, n, namespace)
	if !ok {
		t.Fatalf("%s: no successful sync tick of %s yet", n.Name, namespace)
	}
	return st
}

// trySync is scrapeSync, reporting false when there has been no
// successful tick yet.
func trySync(t *testing.T, n *harness.Limiterd, namespace string) (syncState, bool) {
	t.Helper()
	text, err := n.Metrics(context.Background())
	if err != nil {
		t.Fatalf("%s /metrics: %v", n.Name, err)
	}
	st := syncState{ticks: histogram{}}
	label := `limiter_namespace="` + namespace + `"`
	for line := range strings.Lines(text) {
		if !strings.Contains(line, label) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("%s: cannot parse %q", n.Name, line)
		}
		if rest, ok := strings.CutPrefix(line, "limiterd_sync_duration_seconds_bucket{"); ok {
			_, le, _ := strings.Cut(rest, `le="`)
			le, _, _ = strings.Cut(le, `"`)
			bound, err := strconv.ParseFloat(le, 64)
			if err != nil {
				t.Fatalf("%s: cannot parse %q", n.Name, line)
			}
			st.ticks[bound] = v
		}
		if strings.HasPrefix(line, "limiterd_sync_last_success_timestamp_seconds{") {
			st.lastSuccess = time.Unix(0, int64(v*1e9))
		}
	}
	return st, len(st.ticks) > 0 && !st.lastSuccess.IsZero()
}

// since returns the observations made after old was read.
func (h histogram) since(old histogram) histogram {
	d := histogram{}
	for le, c := range h {
		d[le] = c - old[le]
	}
	return d
}

// count returns the number of observations.
func (h histogram) count() float64 { return h[math.Inf(1)] }

// max returns the upper bound of the smallest bucket holding every
// observation: no observed tick took longer.
func (h histogram) max() time.Duration {
	bounds := make([]float64, 0, len(h))
	for le := range h {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	total := h.count()
	for _, le := range bounds {
		if h[le] >= total {
			if math.IsInf(le, 1) {
				return failTickTimeout
			}
			return time.Duration(le * float64(time.Second))
		}
	}
	return failTickTimeout
}

// metric reads one series ("go_goroutines", or with its labels:
// `limiterd_sync_push_errors_total{limiter_namespace="api"}`) from the node's
// /metrics; false when the node has not exported it (yet).
func metric(t *testing.T, n *harness.Limiterd, series string) (float64, bool) {
	t.Helper()
	text, err := n.Metrics(context.Background())
	if err != nil {
		t.Fatalf("%s /metrics: %v", n.Name, err)
	}
	v, ok := seriesValue(text, series)
	if !ok && strings.Contains(text, "\n"+series+" ") {
		t.Fatalf("%s: %s: not a number", n.Name, series)
	}
	return v, ok
}

func mustMetric(t *testing.T, n *harness.Limiterd, series string) float64 {
	t.Helper()
	v, ok := metric(t, n, series)
	if !ok {
		t.Fatalf("%s: no metric %s", n.Name, series)
	}
	return v
}

// usage is a node's goroutines and heap in use.
type usage struct {
	goroutines int
	heapMiB    float64
}

func (u usage) String() string {
	return fmt.Sprintf("%d goroutines, %.1f MiB heap", u.goroutines, u.heapMiB)
}

func measure(t *testing.T, n *harness.Limiterd) usage {
	t.Helper()
	return usage{
		goroutines: int(mustMetric(t, n, "go_goroutines")),
		heapMiB:    mustMetric(t, n, "go_memstats_heap_inuse_bytes") / (1 << 20),
	}
}

// measureLive is measure after two forced collections (the second empties
// the pools' victim caches): the heap is then what the node retains, not
// garbage whose amount depends on GOGC and on when the collector last ran.
func measureLive(t *testing.T, n *harness.Limiterd) usage {
	t.Helper()
	for range 2 {
		resp, err := http.Get("http://" + n.AdminAddr + "/debug/pprof/heap?gc=1")
		if err != nil {
			t.Fatalf("%s: forcing a collection: %v", n.Name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: /debug/pprof/heap: %s", n.Name, resp.Status)
		}
	}
	return usage{
		goroutines: int(mustMetric(t, n, "go_goroutines")),
		heapMiB:    mustMetric(t, n, "go_memstats_heap_alloc_bytes") / (1 << 20),
	}
}

// maxUsage is the element-wise maximum.
func maxUsage(a, b usage) usage {
	return usage{max(a.goroutines, b.goroutines), max(a.heapMiB, b.heapMiB)}
}

// report logs one measured line for the reliability table.
func report(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("RELIABILITY %s: %s", t.Name(), fmt.Sprintf(format, args...))
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
