package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/node"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	clustersync "github.com/limiterd/limiterd/sync"
)

// fixedClock is a clock that moves only when told.
type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fixedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// benchStart is 10 s into a minute, so one tick's windows stay current.
var benchStart = time.Unix(1_800_000_000, 0).Truncate(time.Minute).Add(10 * time.Second)

// seedOthers pushes, for n keys, the current and previous one-minute
// window of two other incarnations, as the other two nodes of a
// three-node cluster would have.
func seedOthers(b *testing.B, s *pgstore.Store, n int) {
	b.Helper()
	ws := benchStart.Truncate(time.Minute).UnixNano()
	for _, inc := range []string{"other-1/0", "other-2/0"} {
		rows := make([]clustersync.Row, 0, 5000)
		for i := 0; i < n; i++ {
			for _, start := range []int64{ws, ws - int64(time.Minute)} {
				rows = append(rows, clustersync.Row{WindowKey: wk("api", benchKey(i), time.Minute, start),
					Total: 1_000_000, Version: 1, ExpireAt: time.Now().Add(time.Hour)})
			}
			if len(rows) >= 5000 || i == n-1 {
				if err := s.Push(context.Background(), inc, rows); err != nil {
					b.Fatal(err)
				}
				rows = rows[:0]
			}
		}
	}
}

func benchKey(i int) string { return fmt.Sprintf("user-%08d", i) }

// BenchmarkTick is one Syncer tick of a node with n dirty keys (one window
// size): it pushes n rows and fetches 2n windows (current and previous) in
// the Syncer's batches of 5000, against a table already holding two other
// incarnations' rows for those keys. keys/s is n per tick time, over ticks
// that update this node's rows; first-tick-keys/s is the tick that
// inserts them (a new window). The timed ticks include counting the n
// increments in memory (well under a millisecond per 10 000 keys).
// client-cpu-µs/key counts everything this process ran during the ticks
// (including the increments and GC); server-cpu-µs/key is the CPU time of
// the one backend process serving the store's single connection.
func BenchmarkTick(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			// One connection, so the server's CPU for the tick is that of
			// one backend process.
			pc, err := pgxpool.ParseConfig(harness.SharedPostgres(b).DSN())
			if err != nil {
				b.Fatal(err)
			}
			pc.MaxConns = 1
			pool, err := pgxpool.NewWithConfig(context.Background(), pc)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			s := pgstore.New(pool, testConfig("", pgstore.DefaultTable))
			seedOthers(b, s, n)
			var pid int
			if err := pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid); err != nil {
				b.Fatal(err)
			}
			clock := &fixedClock{t: benchStart}
			ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Minute},
				SyncRate: 1, Store: "main"}, clock)
			if err != nil {
				b.Fatal(err)
			}
			sy, err := clustersync.NewSyncer(ns, s, "bench/0", clustersync.NewVersions(clock.Now),
				clustersync.Config{TickTimeout: 5 * time.Minute, NoJitter: true}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, n)
			for i := range keys {
				keys[i] = benchKey(i)
			}
			ctx := context.Background()
			tickOnce := func() time.Duration {
				for _, k := range keys {
					if _, err := ns.Increment(k, time.Minute, 1, nil); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				if err := sy.SyncOnce(ctx); err != nil {
					b.Fatal(err)
				}
				return time.Since(start)
			}
			// The first tick inserts this node's rows; later ones update them.
			first := tickOnce()
			var tick, client time.Duration
			server0, ok0 := procCPU(pid)
			b.ResetTimer()
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				c0 := selfCPU()
				b.StartTimer()
				tick += tickOnce()
				b.StopTimer()
				client += selfCPU() - c0
			}
			keyTicks := float64(n) * float64(b.N)
			b.ReportMetric(float64(n)/first.Seconds(), "first-tick-keys/s")
			b.ReportMetric(keyTicks/tick.Seconds(), "keys/s")
			b.ReportMetric(float64(client.Microseconds())/keyTicks, "client-cpu-µs/key")
			var pid2 int
			if server1, ok1 := procCPU(pid); ok0 && ok1 &&
				pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid2) == nil && pid2 == pid {
				b.ReportMetric(float64((server1-server0).Microseconds())/keyTicks, "server-cpu-µs/key")
			}
		})
	}
}

// procCPU is the user and system CPU time of process pid, when this
// machine runs the server and /proc is readable.
func procCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command name (which may hold spaces and ')').
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / hz, true
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// latencies runs op b.N times from one goroutine and reports p50 and p99.
func latencies(b *testing.B, op func(i int) error) {
	b.Helper()
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := op(i); err != nil {
			b.Fatal(err)
		}
		d = append(d, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(d[len(d)*99/100].Microseconds()), "p99-µs")
}

// BenchmarkPushFetch is the store call of a synchronous Increment: the
// current and previous window of one key (one window size) pushed and the
// others' totals read back, in one round trip, from one goroutine, over
// 10 000 keys that two other incarnations also hold.
func BenchmarkPushFetch(b *testing.B) {
	const keys = 10_000
	s := openStore(b, testConfig(harness.SharedPostgres(b).DSN(), pgstore.DefaultTable))
	seedOthers(b, s, keys)
	ws := benchStart.Truncate(time.Minute).UnixNano()
	versions := clustersync.NewVersions(time.Now)
	rows := make([]clustersync.Row, 2)
	others := make([]int64, 2)
	ctx := context.Background()
	latencies(b, func(i int) error {
		k, v := benchKey(i%keys), versions.Next()
		rows[0] = clustersync.Row{WindowKey: wk("api", k, time.Minute, ws), Total: int64(i), Version: v, ExpireAt: benchStart.Add(3 * time.Minute)}
		rows[1] = clustersync.Row{WindowKey: wk("api", k, time.Minute, ws-int64(time.Minute)), Total: 5, Version: v, ExpireAt: benchStart.Add(2 * time.Minute)}
		cctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
		return s.PushFetch(cctx, "bench/0", rows, others)
	})
}

// BenchmarkAllow is the store call of a synchronous Allow with one limit:
// lock the key, read, decide and write, in one round trip.
func BenchmarkAllow(b *testing.B) {
	const keys = 10_000
	s := openStore(b, testConfig(harness.SharedPostgres(b).DSN(), pgstore.DefaultTable))
	seedOthers(b, s, keys)
	ws := benchStart.Truncate(time.Minute).UnixNano()
	versions := clustersync.NewVersions(time.Now)
	ctx := context.Background()
	latencies(b, func(i int) error {
		k, v := benchKey(i%keys), versions.Next()
		req := clustersync.AllowRequest{Inc: "bench/0", At: benchStart.UnixNano(), Cost: 1_000_000,
			Limits: []clustersync.AllowLimit{{Size: time.Minute, Limit: 1_000_000_000,
				Cur:  clustersync.Row{WindowKey: wk("api", k, time.Minute, ws), Total: int64(i), Version: v, ExpireAt: benchStart.Add(3 * time.Minute)},
				Prev: clustersync.Row{WindowKey: wk("api", k, time.Minute, ws-int64(time.Minute)), Total: 5, Version: v, ExpireAt: benchStart.Add(2 * time.Minute)}}}}
		cctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
		_, err := s.Allow(cctx, req)
		return err
	})
}
