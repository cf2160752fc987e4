//go:build integration && soak

package integration

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
)

// TestPostgresSoak runs two nodes on PostgreSQL at a steady load for
// $LIMITERD_SOAK (default 10m) over keys that rotate every 30 s, and
// samples the table's row count every 10 s against the rows the live
// windows' active keys may hold: for each window whose rows may not yet
// be purged (start > now − (2 × size + 2 × sync_rate + purge_interval +
// slack)), its distinct keys × nodes. Run with
//
//	go test -tags 'integration soak' -run TestPostgresSoak -v -timeout 30m ./integration/
func TestPostgresSoak(t *testing.T) {
	d := 10 * time.Minute
	if v := os.Getenv("LIMITERD_SOAK"); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil {
			t.Fatal(err)
		}
	}
	const (
		size     = 10 * time.Second
		syncRate = time.Second
		purge    = 5 * time.Second
		slack    = 3 * time.Second // a purge pass, a sample's own time, clock steps
		keysGen  = 1000            // keys per generation
		genEvery = 30 * time.Second
		workers  = 4
		nodes    = 2
	)
	p := harness.SharedPostgres(t)
	cfg := fmt.Sprintf(`sync:
  tick_timeout: 2s
stores:
  pg: {type: postgres, dsn: "%s", purge_interval: %s}
namespaces:
  - name: api
    window_sizes: ["%s"]
    sync_rate: %v
    store: pg
`, p.DSN(), purge, size, syncRate.Seconds())
	ns := harness.Cluster(t, nodes, cfg)

	// keysIn records the distinct keys hit per window start.
	var mu sync.Mutex
	keysIn := map[int64]map[string]bool{}
	note := func(at time.Time, key string) {
		mu.Lock()
		defer mu.Unlock()
		// Near a boundary the server may place the hit in either window.
		for _, t := range []time.Time{at.Add(-50 * time.Millisecond), at, at.Add(50 * time.Millisecond)} {
			s := t.Truncate(size).UnixNano()
			if keysIn[s] == nil {
				keysIn[s] = map[string]bool{}
			}
			keysIn[s][key] = true
		}
	}
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var calls, failed int64
	var cmu sync.Mutex
	for w := range workers {
		wg.Go(func() {
			for i := w; ctx.Err() == nil; i += workers {
				now := time.Now()
				gen := int(now.Sub(begin) / genEvery)
				key := fmt.Sprintf("g%d-k%d", gen, i%keysGen)
				note(now, key)
				cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
				_, err := ns[i%nodes].Client.Increment(cctx, &limiterv1.IncrementRequest{Namespace: "api", Key: key})
				ccancel()
				note(time.Now(), key)
				cmu.Lock()
				calls++
				if err != nil {
					failed++
				}
				cmu.Unlock()
			}
		})
	}

	conn, err := pgx.Connect(context.Background(), p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	bound := func(now time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		oldest := now.Add(-(2*size + 2*syncRate + purge + slack)).UnixNano()
		n := 0
		for s, keys := range keysIn {
			if s+int64(size) > oldest {
				n += len(keys) * nodes
			}
		}
		return n
	}
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	worst := 0.0
	var maxRows int64
	t.Logf("%8s %8s %8s %6s", "elapsed", "rows", "bound", "ratio")
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-tick.C:
		}
		var rows int64
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM limiterd_windows").Scan(&rows); err != nil {
			t.Fatal(err)
		}
		b := bound(time.Now())
		r := float64(rows) / float64(max(b, 1))
		worst, maxRows = max(worst, r), max(maxRows, rows)
		t.Logf("%8s %8d %8d %6.2f", time.Since(begin).Round(time.Second), rows, b, r)
		if rows > int64(b) {
			t.Errorf("%d rows exceed the bound %d", rows, b)
		}
	}
	wg.Wait()
	cmu.Lock()
	t.Logf("%s: %d Increments (%d failed), %.0f/s; most rows %d; worst rows/bound %.2f",
		d, calls, failed, float64(calls)/d.Seconds(), maxRows, worst)
	cmu.Unlock()
}
