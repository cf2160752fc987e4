//go:build integration

package integration

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
)

// clusterConfig is a limiterd config with one namespace "api" on one store.
func clusterConfig(store string, syncRate float64) string {
	return fmt.Sprintf(`sync:
  tick_timeout: 1s
  call_timeout: 500ms
stores:
  main: %s
namespaces:
  - name: api
    window_sizes: ["1h"]
    sync_rate: %v
    store: main
`, store, syncRate)
}

// exactConfig is clusterConfig for a synchronous namespace whose test
// wants exact answers. They are exact while the store answers within
// call_timeout; past it a node answers from its own counts, as designed
// (the failure tests cover that). A store call can take over 500 ms on a
// loaded test host, so these tests allow 5 s.
func exactConfig(store string) string {
	return withCallTimeout(clusterConfig(store, 0), "5s")
}

// withCallTimeout replaces clusterConfig's call_timeout with d.
func withCallTimeout(config, d string) string {
	return strings.Replace(config, "call_timeout: 500ms", "call_timeout: "+d, 1)
}

// fallbacks sums the synchronous calls the nodes answered from local
// counts, for the message of a test that wanted none.
func fallbacks(t *testing.T, nodes []*harness.Limiterd) float64 {
	t.Helper()
	return sumSeries(t, nodes, `limiterd_sync_local_fallbacks_total{limiter_namespace="api"}`)
}

// failedTicks sums the nodes' failed pushes and fetches of namespace api
// (each a tick that a later one repeats).
func failedTicks(t *testing.T, nodes []*harness.Limiterd) float64 {
	t.Helper()
	return sumSeries(t, nodes, `limiterd_sync_push_errors_total{limiter_namespace="api"}`,
		`limiterd_sync_fetch_errors_total{limiter_namespace="api"}`)
}

// sumSeries sums the given series (0 where absent) over the nodes' metrics.
func sumSeries(t *testing.T, nodes []*harness.Limiterd, series ...string) float64 {
	t.Helper()
	var sum float64
	for _, n := range nodes {
		m, err := n.Metrics(context.Background())
		if err != nil {
			t.Fatalf("%s metrics: %v", n.Name, err)
		}
		for _, s := range series {
			sum += sampleOrZero(m, s)
		}
	}
	return sum
}

func increment(ctx context.Context, n *harness.Limiterd, key string, at time.Time) error {
	_, err := n.Client.Increment(ctx, &limiterv1.IncrementRequest{
		Namespace: "api", Key: key, At: timestamppb.New(at),
	})
	return err
}

func rate(ctx context.Context, n *harness.Limiterd, key string, at time.Time) (float64, error) {
	resp, err := n.Client.SlidingWindow(ctx, &limiterv1.SlidingWindowRequest{
		Namespace: "api", Key: key, WindowSize: durationpb.New(time.Hour), At: timestamppb.New(at),
	})
	if err != nil {
		return 0, err
	}
	return resp.GetRates()[0].GetRate(), nil
}

// load sends Increments round-robin over nodes and keys from workers
// goroutines until ctx ends, counting the calls that succeeded per key.
type load struct {
	ok     []atomic.Int64 // per key
	errors atomic.Int64
	keys   []string
	wait   func() // returns when every worker has stopped
}

func runLoad(ctx context.Context, nodes []*harness.Limiterd, keys []string, at time.Time, workers int) *load {
	l := &load{ok: make([]atomic.Int64, len(keys)), keys: keys}
	var wg sync.WaitGroup
	var seq atomic.Int64
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := seq.Add(1)
				k := int(i) % len(keys)
				cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := increment(cctx, nodes[int(i/int64(len(keys)))%len(nodes)], keys[k], at)
				cancel()
				if err != nil {
					l.errors.Add(1)
					continue
				}
				l.ok[k].Add(1)
			}
		})
	}
	l.wait = wg.Wait
	return l
}

func (l *load) counts() []int64 {
	c := make([]int64, len(l.ok))
	for i := range l.ok {
		c[i] = l.ok[i].Load()
	}
	return c
}

// waitConverged polls every node until each reports want for key, or the
// deadline passes.
func waitConverged(t *testing.T, nodes []*harness.Limiterd, key string, at time.Time, want float64, deadline time.Time) {
	t.Helper()
	waitConvergedBy(t, nodes, key, at, want, func() time.Time { return deadline })
}

// waitConvergedBy is waitConverged with a deadline that may move while it
// waits (read on each try).
func waitConvergedBy(t *testing.T, nodes []*harness.Limiterd, key string, at time.Time, want float64, deadline func() time.Time) {
	t.Helper()
	var last []float64
	for {
		last = last[:0]
		all := true
		for _, n := range nodes {
			r, err := rate(context.Background(), n, key, at)
			if err != nil {
				t.Fatalf("%s SlidingWindow: %v", n.Name, err)
			}
			last = append(last, r)
			all = all && math.Abs(r-want) < 1e-9
		}
		if all {
			return
		}
		if time.Now().After(deadline()) {
			t.Fatalf("key %s not converged by the deadline: rates %v, want %v", key, last, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// allowLoad sends Allow(cost 1, limit per hour) for one key from workers
// goroutines spread over nodes, calls each, and returns how many were
// admitted.
func allowLoad(t *testing.T, nodes []*harness.Limiterd, key string, at time.Time, limit float64, workers, calls int) int64 {
	t.Helper()
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			n := nodes[w%len(nodes)]
			for range calls {
				resp, err := n.Client.Allow(context.Background(), &limiterv1.AllowRequest{
					Namespace: "api", Key: key, At: timestamppb.New(at),
					Limits: []*limiterv1.Limit{{WindowSize: durationpb.New(time.Hour), Limit: limit}},
				})
				if err != nil {
					failed.Add(1)
					continue
				}
				if resp.GetAllowed() {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d Allow calls failed", failed.Load())
	}
	return admitted.Load()
}

// seriesValue returns the value of one series of a Prometheus text
// exposition, named with its labels as exposed
// (`limiterd_sync_push_errors_total{limiter_namespace="api"}`); false when absent.
func seriesValue(text, series string) (float64, bool) {
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// sampleOrZero is a series' value, 0 when the node has not exported it.
func sampleOrZero(text, series string) float64 {
	v, _ := seriesValue(text, series)
	return v
}
