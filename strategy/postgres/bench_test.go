package postgres_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/ratelimit"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	"github.com/limiterd/limiterd/strategy/strategytest"
	clustersync "github.com/limiterd/limiterd/sync"
)

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

// BenchmarkTick is the store's share of one periodic tick of a node with n
// dirty keys (one window size, 1 min), against a table where two other
// incarnations already hold the current and previous window of every key,
// in calls of 5000 windows as the Syncer makes them:
//
//   - pushfetch: PushFetch of the n dirty rows, which writes them and reads
//     back the others' totals of the same windows (what a tick sends for
//     its dirty windows);
//   - pushfetch+prev: that, then Fetch of the n previous windows, the rest
//     of the interest set as the Syncer collects it;
//   - push+fetch: Push of the n rows, then Fetch of the 2n windows
//     (current and previous), for comparison.
//
// Every timed tick writes a newer version of this node's rows;
// first-tick-keys/s is the tick that inserts them. keys/s is n per tick
// time. client-cpu-µs/key counts everything this process ran during the
// ticks; server-cpu-µs/key is the CPU time of the store's backend
// processes (the store's pool, as Open makes it).
func BenchmarkTick(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		for _, call := range []string{"pushfetch", "pushfetch+prev", "push+fetch"} {
			b.Run(fmt.Sprintf("keys=%d/call=%s", n, call), func(b *testing.B) { benchTick(b, n, call) })
		}
	}
}

func benchTick(b *testing.B, n int, call string) {
	ctx := context.Background()
	dsn := harness.SharedPostgres(b).DSN() // a fresh database
	s := openStore(b, testConfig(dsn, pgstore.DefaultTable))
	seedOthers(b, s, n)
	ws := benchStart.Truncate(time.Minute).UnixNano()
	rows := make([]clustersync.Row, n)
	prev := make([]clustersync.WindowKey, n)
	both := make([]clustersync.WindowKey, 0, 2*n)
	for i := range rows {
		k := wk("api", benchKey(i), time.Minute, ws)
		rows[i] = clustersync.Row{WindowKey: k, ExpireAt: benchStart.Add(3 * time.Minute)}
		prev[i] = wk("api", benchKey(i), time.Minute, ws-int64(time.Minute))
		both = append(both, k, prev[i])
	}
	others := make([]int64, 2*n)
	versions := clustersync.NewVersions(time.Now)
	const batch = 5000 // the Syncer's default batch_size
	fetch := func(keys []clustersync.WindowKey) {
		for lo := 0; lo < len(keys); lo += batch {
			hi := min(lo+batch, len(keys))
			if err := s.Fetch(ctx, "bench/0", keys[lo:hi], others[lo:hi]); err != nil {
				b.Fatal(err)
			}
		}
	}
	tickOnce := func() time.Duration {
		v := versions.Next()
		for i := range rows {
			rows[i].Total += 1_000_000
			rows[i].Version = v
		}
		start := time.Now()
		for lo := 0; lo < n; lo += batch {
			hi := min(lo+batch, n)
			var err error
			if call == "push+fetch" {
				err = s.Push(ctx, "bench/0", rows[lo:hi])
			} else {
				err = s.PushFetch(ctx, "bench/0", rows[lo:hi], others[lo:hi])
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		switch call {
		case "pushfetch+prev":
			fetch(prev)
		case "push+fetch":
			fetch(both)
		}
		return time.Since(start)
	}
	// The first tick inserts this node's rows (and opens the pool's
	// connections); later ones update them.
	first := tickOnce()
	if call != "push+fetch" && others[0] != 2_000_000 {
		b.Fatalf("others[0] = %d, want 2000000", others[0])
	}
	pids := backendPIDs(b, dsn)
	server0 := serverCPU(pids)
	var tick, client time.Duration
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
	b.ReportMetric(float64(tick.Milliseconds())/float64(b.N), "ms/tick")
	b.ReportMetric(float64(client.Microseconds())/keyTicks, "client-cpu-µs/key")
	if server1 := serverCPU(pids); server0 >= 0 && server1 >= 0 && slices.Equal(pids, backendPIDs(b, dsn)) {
		b.ReportMetric(float64((server1-server0).Microseconds())/keyTicks, "server-cpu-µs/key")
	}
}

// backendPIDs lists the server processes of the limiterd connections to
// dsn's database, sorted.
func backendPIDs(b *testing.B, dsn string) []int {
	b.Helper()
	c := connect(b, dsn)
	defer c.Close(context.Background())
	var pids []int
	err := c.QueryRow(context.Background(), `SELECT coalesce(array_agg(pid ORDER BY pid), '{}') FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'limiterd'`).Scan(&pids)
	if err != nil {
		b.Fatal(err)
	}
	return pids
}

// serverCPU is the CPU time of processes pids, or -1 when /proc cannot
// tell (the server runs elsewhere).
func serverCPU(pids []int) time.Duration {
	var sum time.Duration
	for _, pid := range pids {
		d, ok := procCPU(pid)
		if !ok {
			return -1
		}
		sum += d
	}
	return sum
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

// BenchmarkAllow is the store call of a synchronous Allow with one limit
// (a group of one): lock the key, read, decide and write, in one round
// trip.
func BenchmarkAllow(b *testing.B) {
	const keys = 10_000
	s := openStore(b, testConfig(harness.SharedPostgres(b).DSN(), pgstore.DefaultTable))
	seedOthers(b, s, keys)
	ws := benchStart.Truncate(time.Minute).UnixNano()
	versions := clustersync.NewVersions(time.Now)
	ctx := context.Background()
	latencies(b, func(i int) error {
		k, v := benchKey(i%keys), versions.Next()
		req := strategytest.OneAllow{Inc: "bench/0", At: benchStart.UnixNano(), Cost: 1_000_000,
			Limits: []strategytest.OneLimit{{Size: time.Minute, Limit: 1_000_000_000,
				Cur:  clustersync.Row{WindowKey: wk("api", k, time.Minute, ws), Total: int64(i), Version: v, ExpireAt: benchStart.Add(3 * time.Minute)},
				Prev: clustersync.Row{WindowKey: wk("api", k, time.Minute, ws-int64(time.Minute)), Total: 5, Version: v, ExpireAt: benchStart.Add(2 * time.Minute)}}}}
		cctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
		_, err := strategytest.AllowOne(cctx, s, req)
		return err
	})
}

// BenchmarkLeases is the store side of one synchronous concurrency-
// limited request: a LeaseAcquire, then a LeaseRelease of the same
// lease, two calls (two round trips) from one goroutine and one
// incarnation, a distinct id each time, over 10 000 keys. Next to
// BenchmarkAllow, the sliding window's call.
func BenchmarkLeases(b *testing.B) {
	const keys = 10_000
	s := openStore(b, testConfig(harness.SharedPostgres(b).DSN(), pgstore.DefaultTable))
	now := time.Now().UnixNano()
	exp := now + int64(time.Minute)
	ops := make([]clustersync.LeaseOp, 1)
	replies := make([]clustersync.LeaseReply, 1)
	ctx := context.Background()
	call := func(op clustersync.LeaseOp) error {
		ops[0] = op
		cctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
		if err := s.Leases(cctx, now, ops, replies); err != nil {
			return err
		}
		if !replies[0].OK {
			return fmt.Errorf("%s of %s/%s refused", op.Kind, op.Key, op.ID)
		}
		return nil
	}
	latencies(b, func(i int) error {
		k, id := benchKey(i%keys), "bench/0."+strconv.Itoa(i)
		if err := call(clustersync.LeaseOp{Kind: clustersync.LeaseAcquire, Namespace: "api", Key: k, ID: id, Limit: 100, Expiry: exp}); err != nil {
			return err
		}
		return call(clustersync.LeaseOp{Kind: clustersync.LeaseRelease, Namespace: "api", Key: k, ID: id, Expiry: exp})
	})
}

// BenchmarkBuckets is the store call of a synchronous Allow with one
// bucket limit, per kind: lock the bucket's row, catch up, take 1 and
// write, in one round trip, from one goroutine and one incarnation, over
// 10 000 existing buckets. Next to BenchmarkAllow, the sliding window's
// call.
func BenchmarkBuckets(b *testing.B) {
	const keys = 10_000
	s := openStore(b, testConfig(harness.SharedPostgres(b).DSN(), pgstore.DefaultTable))
	for _, spec := range []ratelimit.BucketSpec{
		{Kind: ratelimit.TokenLimit, A: 1e9 * hit, B: int64(time.Minute), C: 1e9 * hit},
		leakySpec("", 1e9*hit, int64(time.Minute)),
		{Kind: ratelimit.FixedLimit, A: int64(time.Minute), B: 1e9 * hit},
	} {
		b.Run("kind="+spec.Kind.String(), func(b *testing.B) {
			versions := clustersync.NewVersions(time.Now)
			applied := make([]int64, keys)
			calls := make([]clustersync.BucketCall, 1)
			replies := make([]clustersync.BucketReply, 1)
			ctx := context.Background()
			call := func(i int) error {
				k := i % keys
				spec.Key = benchKey(k)
				calls[0] = clustersync.BucketCall{Namespace: "api", Bucket: spec, Life: 1, Total: applied[k],
					ApplyAt: benchStart.UnixNano(), Version: versions.Next(), ExpireAt: benchStart.Add(3 * time.Minute)}
				cctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
				defer cancel()
				ok, err := s.Buckets(cctx, "bench/0", benchStart.UnixNano(), hit, calls, replies)
				if err == nil && !ok {
					err = fmt.Errorf("take %d of %s refused", i, spec.StoreKey())
				}
				applied[k] = replies[0].Applied
				return err
			}
			// The buckets exist, as a busy key's do: a first pass makes them.
			for i := range keys {
				if err := call(i); err != nil {
					b.Fatal(err)
				}
			}
			latencies(b, call)
		})
	}
}
