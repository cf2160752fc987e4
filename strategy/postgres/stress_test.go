package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/strategy/strategytest"
	clustersync "github.com/limiterd/limiterd/sync"
)

// stressDuration is how long TestConcurrentNoDeadlock runs:
// LIMITERD_PG_STRESS (a Go duration) or 10 s (2 s with -short).
func stressDuration(t *testing.T) time.Duration {
	if v := os.Getenv("LIMITERD_PG_STRESS"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("LIMITERD_PG_STRESS: %v", err)
		}
		return d
	}
	if testing.Short() {
		return 2 * time.Second
	}
	return 10 * time.Second
}

// Three stores (three incarnations, as three nodes) push, push-and-fetch
// and allow overlapping keys as fast as they can, several goroutines each
// (so one incarnation also races itself, as a node's tick races its
// synchronous calls), while a purger deletes expired rows among them.
// No call may fail — in particular with a deadlock (40P01) or a
// serialization failure (40001) — and afterwards every window holds, per
// incarnation, the total of the highest version written.
func TestConcurrentNoDeadlock(t *testing.T) {
	d := pgdb{dsn: harness.SharedPostgres(t).DSN()}
	table := harness.UniqueName("w")
	const (
		nodes      = 3
		keys       = 2000
		pushBatch  = 500
		fetchBatch = 20
	)
	dur := stressDuration(t)
	type wkey struct {
		inc string
		k   clustersync.WindowKey
	}
	type written struct{ version, total int64 }
	var (
		mu    sync.Mutex
		state = map[wkey]written{}
	)
	record := func(inc string, rows ...clustersync.Row) {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rows {
			w := wkey{inc, r.WindowKey}
			if r.Version > state[w].version {
				state[w] = written{r.Version, r.Total}
			}
		}
	}
	key := func(i int, start int64) clustersync.WindowKey {
		return wk("stress", fmt.Sprintf("key-%04d", i), time.Second, start)
	}
	live := time.Now().Add(time.Hour)

	// Goroutines loop until ctx is done; their calls run on callCtx, so none
	// is cut short by the end of the run and every write is known.
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	callCtx, callCancel := context.WithTimeout(context.Background(), dur+time.Minute)
	defer callCancel()
	var (
		wg    sync.WaitGroup
		ops   [4]atomic.Int64 // push, pushfetch, allow, purge
		errMu sync.Mutex
		errs  []error
	)
	fail := func(op string, err error) {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001") {
			err = fmt.Errorf("SQLSTATE %s (deadlock or serialization failure): %w", pe.Code, err)
		}
		errMu.Lock()
		errs = append(errs, fmt.Errorf("%s: %w", op, err))
		errMu.Unlock()
		cancel()
	}
	for n := range nodes {
		cfg := testConfig(d.dsn, table)
		cfg.PoolSize = 4
		s := openStore(t, cfg)
		inc := fmt.Sprintf("node-%d/%016x", n, rand.Uint64())
		versions := clustersync.NewVersions(time.Now)
		// Pushers: random overlapping batches in random order.
		for range 2 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
				for ctx.Err() == nil {
					v := versions.Next()
					rows := make([]clustersync.Row, pushBatch)
					for i := range rows {
						rows[i] = clustersync.Row{WindowKey: key(rng.IntN(keys), rng.Int64N(2)*sec),
							Total: rng.Int64N(1e9), Version: v, ExpireAt: live}
					}
					if err := s.Push(callCtx, inc, rows); err != nil {
						fail("push", err)
						return
					}
					record(inc, rows...)
					ops[0].Add(1)
				}
			})
		}
		// A synchronous caller: small PushFetches.
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			others := make([]int64, fetchBatch)
			for ctx.Err() == nil {
				v := versions.Next()
				rows := make([]clustersync.Row, fetchBatch)
				for i := range rows {
					rows[i] = clustersync.Row{WindowKey: key(rng.IntN(keys), rng.Int64N(2)*sec),
						Total: rng.Int64N(1e9), Version: v, ExpireAt: live}
				}
				if err := s.PushFetch(callCtx, inc, rows, others); err != nil {
					fail("pushfetch", err)
					return
				}
				record(inc, rows...)
				ops[1].Add(1)
			}
		})
		// An allower on the same keys (cur window 1 s, prev 0), counting
		// every cost so what it writes is known.
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			for ctx.Err() == nil {
				v := versions.Next()
				i := rng.IntN(keys)
				cur := clustersync.Row{WindowKey: key(i, sec), Total: rng.Int64N(1e9), Version: v, ExpireAt: live}
				prev := clustersync.Row{WindowKey: key(i, 0), Total: rng.Int64N(1e9), Version: v, ExpireAt: live}
				req := strategytest.OneAllow{Inc: inc, At: sec + sec/3, Cost: 1_000_000, CountRejected: true,
					Limits: []strategytest.OneLimit{{Size: time.Second, Limit: 5e9, Cur: cur, Prev: prev}}}
				if _, err := strategytest.AllowOne(callCtx, s, req); err != nil {
					fail("allow", err)
					return
				}
				cur.Total += req.Cost
				record(inc, cur, prev)
				ops[2].Add(1)
			}
		})
		// Expiring rows among the live ones, for the purger to delete.
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
			for ctx.Err() == nil {
				v := versions.Next()
				rows := make([]clustersync.Row, pushBatch)
				for i := range rows {
					rows[i] = clustersync.Row{WindowKey: key(rng.IntN(keys), -sec*(1+rng.Int64N(3))),
						Total: 1, Version: v, ExpireAt: time.Now().Add(-time.Second)}
				}
				if err := s.Push(callCtx, inc, rows); err != nil {
					fail("push expired", err)
					return
				}
				if _, err := s.Purge(callCtx); err != nil {
					fail("purge", err)
					return
				}
				ops[3].Add(1)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	t.Logf("%s: %d pushes of %d rows, %d push-fetches of %d, %d allows, %d purges",
		dur, ops[0].Load(), pushBatch, ops[1].Load(), fetchBatch, ops[2].Load(), ops[3].Load())
	if ops[0].Load() == 0 || ops[1].Load() == 0 || ops[2].Load() == 0 || ops[3].Load() == 0 {
		t.Error("some kind of call never completed")
	}
	if t.Failed() {
		return
	}

	// Every window holds the sum of each incarnation's newest total.
	want := map[clustersync.WindowKey]int64{}
	for w, v := range state {
		want[w.k] += v.total
	}
	check := openStore(t, testConfig(d.dsn, table))
	for k, total := range want {
		if got := window(t, check, k); got != total {
			t.Errorf("window %s %d: got %d, want %d", k.Key, k.Start, got, total)
		}
	}
}
