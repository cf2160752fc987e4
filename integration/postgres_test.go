//go:build integration

package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
)

func postgresStore(dsn string) string {
	return fmt.Sprintf(`{type: postgres, dsn: "%s"}`, dsn)
}

func openPostgres(t *testing.T, dsn string) *pgstore.Store {
	t.Helper()
	cfg := pgstore.DefaultConfig()
	cfg.DSN = dsn
	st, err := pgstore.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestPostgresClusterConverges(t *testing.T) {
	p := harness.SharedPostgres(t)
	nodes := harness.Cluster(t, 3, clusterConfig(postgresStore(p.DSN()), 0.1))
	checkConverges(t, nodes, 100*time.Millisecond)
}

func TestPostgresOutage(t *testing.T) {
	p := harness.StartPostgres(t)
	nodes := harness.Cluster(t, 3, clusterConfig(postgresStore(p.DSN()), 0.1))
	checkOutage(t, nodes, p.Stop, p.Start, openPostgres(t, p.DSN()))
}

func TestPostgresSynchronousAllowExact(t *testing.T) {
	p := harness.SharedPostgres(t)
	nodes := harness.Cluster(t, 3, exactConfig(postgresStore(p.DSN())))
	if got := allowLoad(t, nodes, "hot", time.Now(), 100, 30, 10); got != 100 {
		t.Fatalf("admitted %d across 3 nodes, want exactly 100 (calls answered from local counts: %.0f)", got, fallbacks(t, nodes))
	}
}

// TestPostgresContention: three nodes ticking every millisecond push the
// same keys as fast as they can for 30 s; no statement may fail with a
// deadlock or serialization failure, and afterwards every node and the
// store agree on the exact count.
func TestPostgresContention(t *testing.T) {
	p := harness.SharedPostgres(t)
	nodes := harness.Cluster(t, 3, clusterConfig(postgresStore(p.DSN()), 0.001))
	keys := make([]string, 200)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	at := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	l := runLoad(ctx, nodes, keys, at, 12)
	<-ctx.Done()
	cancel()
	l.wait()
	if n := l.errors.Load(); n > 0 {
		t.Errorf("%d Increments failed", n)
	}
	var pushed, failed float64
	for _, n := range nodes {
		m, err := n.Metrics(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		pushErrs, _ := seriesValue(m, `limiterd_sync_push_errors_total{limiter_namespace="api"}`)
		fetchErrs, _ := seriesValue(m, `limiterd_sync_fetch_errors_total{limiter_namespace="api"}`)
		failed += pushErrs + fetchErrs
		rows, _ := seriesValue(m, `limiterd_sync_rows_pushed_total{limiter_namespace="api"}`)
		pushed += rows
		// A deadlock (40P01) or serialization failure (40001) would be a
		// design defect; a tick deadline missed on a loaded machine is not.
		for _, line := range strings.Split(n.LogTail(1_000_000), "\n") {
			if strings.Contains(line, "deadlock") || strings.Contains(line, "40P01") || strings.Contains(line, "40001") ||
				strings.Contains(line, "serializ") {
				t.Errorf("%s: %s", n.Name, line)
			}
		}
	}
	var total int64
	for _, c := range l.counts() {
		total += c
	}
	t.Logf("30 s: %d Increments over %d keys, %.0f rows pushed by 3 nodes, %.0f failed ticks (timeouts)", total, len(keys), pushed, failed)
	if pushed == 0 {
		t.Fatal("no row was pushed")
	}
	st := openPostgres(t, p.DSN())
	deadline := time.Now().Add(10 * time.Second)
	for i, key := range keys[:20] {
		waitConverged(t, nodes, key, at, float64(l.ok[i].Load()), deadline)
	}
	checkStoreTotals(t, st, keys, l, at)
}
