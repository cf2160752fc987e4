package cassandra_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/ratelimit"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
	clustersync "github.com/limiterd/limiterd/sync"
)

// tickBatch is the Syncer's default BatchSize: the most rows per store
// call.
const tickBatch = 5000

// BenchmarkTick measures one periodic tick of n dirty keys, in calls of at
// most 5000 rows as the Syncer makes them (one after the other):
// call=pushfetch is PushFetch of the n dirty rows (writes them and reads
// back the other incarnations' totals of the same windows: what a tick
// sends for its dirty windows); call=push+fetch is Push of the n rows,
// then Fetch of their n windows, for comparison. Each key has one window
// of 1 s or 1 min (the current ones, so the windows of a tick share 2
// starts); two other incarnations hold a row in every window, and each
// tick writes a newer version of every row. keys/s = n / tick.
// batch_rows=1 is one request per window (token-aware on a cluster).
func BenchmarkTick(b *testing.B) {
	c := harness.SharedCassandra(b)
	e := newEnv(b, c)
	for _, n := range []int{10_000, 100_000} {
		for _, call := range []string{"pushfetch", "push+fetch"} {
			for _, batchRows := range []int{cassandrastore.DefaultBatchRows, 1} {
				b.Run(fmt.Sprintf("keys=%d/call=%s/batch_rows=%d", n, call, batchRows), func(b *testing.B) {
					benchTick(b, e, n, call, batchRows)
				})
			}
		}
	}
}

func benchTick(b *testing.B, e *env, n int, call string, batchRows int) {
	cfg := e.config()
	cfg.BatchRows = batchRows
	s := open(b, cfg)
	now := time.Now()
	// A namespace per run, so every run starts from the same table state.
	ns := harness.UniqueName("bench")
	rows := make([]clustersync.Row, n)
	keys := make([]clustersync.WindowKey, n)
	for i := range rows {
		size := []time.Duration{time.Second, time.Minute}[i%2]
		keys[i] = clustersync.WindowKey{
			Namespace: ns, Size: size,
			Start: now.Truncate(size).UnixNano(), Key: fmt.Sprintf("user-%07d", i),
		}
		rows[i] = clustersync.Row{WindowKey: keys[i], Total: int64(i), ExpireAt: now.Add(time.Hour)}
	}
	ctx := context.Background()
	version := now.UnixMicro()
	others := make([]int64, tickBatch)
	tick := func(inc string, call string) {
		version++
		for lo := 0; lo < n; lo += tickBatch {
			batch := rows[lo:min(lo+tickBatch, n)]
			for i := range batch {
				batch[i].Version = version
				batch[i].Total++
			}
			var err error
			if call == "pushfetch" {
				err = s.PushFetch(ctx, inc, batch, others[:len(batch)])
			} else {
				err = s.Push(ctx, inc, batch)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if call != "push+fetch" {
			return
		}
		for lo := 0; lo < n; lo += tickBatch {
			batch := keys[lo:min(lo+tickBatch, n)]
			if err := s.Fetch(ctx, inc, batch, others[:len(batch)]); err != nil {
				b.Fatal(err)
			}
		}
	}
	tick("other-1", "push")
	tick("other-2", "push")
	tick("me", call) // inserts this node's rows; the timed ticks update them
	// others holds the last call's sums; its first row, index lo, was
	// pushed with totals lo+1 and lo+2 by the other two.
	if lo := int64((n - 1) / tickBatch * tickBatch); others[0] != 2*lo+3 {
		b.Fatalf("others[0] = %d, want %d", others[0], 2*lo+3)
	}
	server0, client0 := serverCPU(), selfCPU()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		tick("me", call)
	}
	keyTicks := float64(n) * float64(b.N)
	b.ReportMetric(keyTicks/b.Elapsed().Seconds(), "keys/s")
	b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/tick")
	b.ReportMetric(float64((selfCPU()-client0).Microseconds())/keyTicks, "client-cpu-µs/key")
	if server1 := serverCPU(); server0 >= 0 && server1 >= 0 {
		b.ReportMetric(float64((server1-server0).Microseconds())/keyTicks, "server-cpu-µs/key")
	}
}

// serverCPU is the CPU time of the Cassandra process whose pid is in
// LIMITERD_BENCH_CASSANDRA_PID (it runs on this machine), or -1.
func serverCPU() time.Duration {
	pid, err := strconv.Atoi(os.Getenv("LIMITERD_BENCH_CASSANDRA_PID"))
	if err != nil {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command name (which may hold spaces and ')').
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / hz
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSyncCall measures what a synchronous (sync_rate = 0)
// Increment sends, from one goroutine: one key's rows of 2 window sizes
// (1 s, 1 min) × (current, previous) pushed, and the other incarnations'
// totals of those 4 windows read back, with the Syncer's 250 ms timeout;
// 1000 keys in turn, another incarnation holding a row in each window.
// PushFetch writes and reads at once; Push+Fetch is the same as two
// sequential calls (what the Syncer does with a store that is no
// PushFetcher); Window, one SELECT of one partition, is the floor: one
// round trip. Reports p50 and p99 in µs.
func BenchmarkSyncCall(b *testing.B) {
	c := harness.SharedCassandra(b)
	e := newEnv(b, c)
	s := open(b, e.config())
	const nkeys = 1000
	now := time.Now()
	mk := func(i int, inc string, version int64) []clustersync.Row {
		rows := make([]clustersync.Row, 0, 4)
		for _, size := range []time.Duration{time.Second, time.Minute} {
			cur := now.Truncate(size)
			for _, start := range []time.Time{cur, cur.Add(-size)} {
				rows = append(rows, clustersync.Row{
					WindowKey: clustersync.WindowKey{Namespace: "sync", Size: size, Start: start.UnixNano(), Key: fmt.Sprintf("user-%04d", i)},
					Total:     version % 1000, Version: version, ExpireAt: now.Add(time.Hour),
				})
			}
		}
		return rows
	}
	for i := range nkeys {
		if err := s.Push(context.Background(), "other", mk(i, "other", 1)); err != nil {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"PushFetch", "Push+Fetch", "Window"} {
		b.Run(mode, func(b *testing.B) {
			lat := make([]time.Duration, 0, b.N)
			others := make([]int64, 4)
			keys := make([]clustersync.WindowKey, 4)
			version := time.Now().UnixMicro()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				version++
				rows := mk(i%nkeys, "me", version)
				i++
				began := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
				var err error
				switch mode {
				case "PushFetch":
					err = s.PushFetch(ctx, "me", rows, others)
				case "Window":
					_, err = s.Window(ctx, rows[0].WindowKey)
				default:
					if err = s.Push(ctx, "me", rows); err != nil {
						break
					}
					for j := range rows {
						keys[j] = rows[j].WindowKey
					}
					err = s.Fetch(ctx, "me", keys, others)
				}
				cancel()
				lat = append(lat, time.Since(began))
				if err != nil {
					b.Fatal(err)
				}
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
			b.ReportMetric(q(0.5), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
		})
	}
}

// BenchmarkLeases measures a synchronous lease from one goroutine, next
// to BenchmarkSyncCall's sliding window: LeaseAcquire then LeaseRelease
// of a new id (two calls, one incarnation, each with the Syncer's
// 250 ms timeout), 1000 keys in turn, the limit never reached. One op
// is both calls; reports their p50 and p99 in µs and the requests per
// op.
func BenchmarkLeases(b *testing.B) {
	c := harness.SharedCassandra(b)
	e := newEnv(b, c)
	s := open(b, e.config())
	const nkeys = 1000
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%04d", i)
	}
	ops := make([]clustersync.LeaseOp, 1)
	replies := make([]clustersync.LeaseReply, 1)
	call := func(op clustersync.LeaseOp, timeout time.Duration) error {
		ops[0] = op
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err := s.Leases(ctx, time.Now().UnixNano(), ops, replies)
		if err == nil && !replies[0].OK {
			err = fmt.Errorf("%v %q: %+v, want OK", op.Kind, op.ID, replies[0])
		}
		return err
	}
	// Create the session and the schema before timing.
	if err := call(clustersync.LeaseOp{Kind: clustersync.LeaseCount, Namespace: "warmup"}, time.Minute); err != nil {
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	trips0 := cassandrastore.LeaseTrips(s)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		key, id := keys[i%nkeys], "me-"+strconv.Itoa(i)
		i++
		began := time.Now()
		exp := began.Add(time.Minute).UnixNano()
		err := call(clustersync.LeaseOp{Kind: clustersync.LeaseAcquire, Namespace: "bench", Key: key, ID: id, Limit: 1000, Expiry: exp}, 250*time.Millisecond)
		if err == nil {
			err = call(clustersync.LeaseOp{Kind: clustersync.LeaseRelease, Namespace: "bench", Key: key, ID: id, Expiry: exp}, 250*time.Millisecond)
		}
		lat = append(lat, time.Since(began))
		if err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(q(0.5), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
	b.ReportMetric(float64(cassandrastore.LeaseTrips(s)-trips0)/float64(len(lat)), "requests/op")
}

// BenchmarkBuckets measures one synchronous bucket call from one
// goroutine, next to BenchmarkSyncCall's sliding window: take 1 of one
// bucket of each kind (large enough to admit every take), one
// incarnation, 1000 keys in turn, with the Syncer's 250 ms timeout.
// Reports p50 and p99 in µs and the requests per call.
func BenchmarkBuckets(b *testing.B) {
	c := harness.SharedCassandra(b)
	e := newEnv(b, c)
	s := open(b, e.config())
	// Create the session and the schema before timing.
	warm := []clustersync.BucketCall{bucketCall("warmup", bucketSpecs("k")["token"], 0, 1)}
	if _, err := s.Buckets(context.Background(), "me", time.Now().UnixNano(), 0, warm, make([]clustersync.BucketReply, 1)); err != nil {
		b.Fatal(err)
	}
	const nkeys = 1000
	for _, kind := range []string{"token", "leaky", "fixed"} {
		b.Run("kind="+kind, func(b *testing.B) {
			specs := make([]ratelimit.BucketSpec, nkeys)
			for i := range specs {
				specs[i] = bucketSpecs(fmt.Sprintf("user-%04d", i))[kind]
			}
			applied := make([]int64, nkeys)
			version := time.Now().UnixMicro()
			calls := make([]clustersync.BucketCall, 1)
			replies := make([]clustersync.BucketReply, 1)
			lat := make([]time.Duration, 0, b.N)
			trips0 := cassandrastore.BucketTrips(s)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				k := i % nkeys
				i++
				version++
				calls[0] = bucketCall("bench", specs[k], applied[k], version)
				began := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
				ok, err := s.Buckets(ctx, "me", began.UnixNano(), ratelimit.Micro, calls, replies)
				cancel()
				lat = append(lat, time.Since(began))
				if err != nil || !ok {
					b.Fatalf("Buckets = %v, %v", ok, err)
				}
				applied[k] = replies[0].Applied
			}
			slices.Sort(lat)
			q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
			b.ReportMetric(q(0.5), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(float64(cassandrastore.BucketTrips(s)-trips0)/float64(len(lat)), "requests/call")
		})
	}
}

// BenchmarkBucketsContended is the conformance suite's concurrency test
// as a measure: callers in 4 incarnations, each incarnation's calls in
// order (one at a time), take 1 at a time from one token bucket of 100
// until it refuses, as the suite does with 8 callers per incarnation (so
// 4 calls at once). Reports the calls' p50 and p99 latency, the attempts
// started again after a failed condition and the requests per call, and
// the share of calls over the Syncer's 250 ms. It fails unless
// exactly 100 takes were admitted.
func BenchmarkBucketsContended(b *testing.B) {
	c := harness.SharedCassandra(b)
	e := newEnv(b, c)
	s := open(b, e.config())
	const incs, capacity = 4, 100
	for _, per := range []int{8} {
		b.Run(fmt.Sprintf("incs=%d/callers=%d", incs, per), func(b *testing.B) {
			var lats []time.Duration
			var calls, retries, trips int64
			run := 0
			for b.Loop() {
				run++
				spec := ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: capacity * ratelimit.Micro, B: int64(time.Hour), C: capacity * ratelimit.Micro,
					Key: fmt.Sprintf("%s-%d-%d", strings.ReplaceAll(b.Name(), "/", "-"), run, time.Now().UnixNano())}
				r0, t0 := cassandrastore.BucketRetries(s), cassandrastore.BucketTrips(s)
				var admitted atomic.Int64
				var mu gosync.Mutex
				var wg gosync.WaitGroup
				at := time.Now().UnixNano()
				version := time.Now().UnixMicro()
				for n := range incs {
					inc := fmt.Sprint("inc-", n)
					var incMu gosync.Mutex // one incarnation's calls in order
					var applied int64
					for range per {
						wg.Go(func() {
							replies := make([]clustersync.BucketReply, 1)
							for {
								incMu.Lock()
								v := atomic.AddInt64(&version, 1)
								call := []clustersync.BucketCall{bucketCall("contended", spec, applied, v)}
								began := time.Now()
								ok, err := s.Buckets(context.Background(), inc, at, ratelimit.Micro, call, replies)
								took := time.Since(began)
								if err == nil {
									applied = max(applied, replies[0].Applied)
								}
								incMu.Unlock()
								mu.Lock()
								lats = append(lats, took)
								mu.Unlock()
								if err != nil {
									b.Error(err)
									return
								}
								if !ok {
									return
								}
								admitted.Add(1)
							}
						})
					}
				}
				wg.Wait()
				if admitted.Load() != capacity {
					b.Fatalf("admitted %d, want %d", admitted.Load(), capacity)
				}
				retries += cassandrastore.BucketRetries(s) - r0
				trips += cassandrastore.BucketTrips(s) - t0
			}
			calls = int64(len(lats))
			slices.Sort(lats)
			q := func(p float64) float64 { return float64(lats[int(p*float64(len(lats)-1))].Microseconds()) }
			b.ReportMetric(q(0.5), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(float64(retries)/float64(calls), "retries/call")
			b.ReportMetric(float64(trips)/float64(calls), "requests/call")
			b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
			// The share of calls a synchronous namespace (250 ms) would
			// have timed out.
			slow := len(lats) - sort.Search(len(lats), func(i int) bool { return lats[i] > 250*time.Millisecond })
			b.ReportMetric(100*float64(slow)/float64(calls), "over-250ms-%")
		})
	}
}

// BenchmarkHarnessStart measures how long harness.StartCassandra takes
// until Cassandra answers a query: cold (a new directory: fresh system
// keyspaces), then Start after Stop (SIGTERM, drained) and after Kill
// (SIGKILL, commit log replayed). It always starts a private server.
// Run it with -benchtime 1x.
func BenchmarkHarnessStart(b *testing.B) {
	for b.Loop() {
		began := time.Now()
		c := harness.StartCassandra(b)
		cold := time.Since(began)
		s := open(b, (&env{c: c, keyspace: harness.UniqueName("start")}).config())
		if err := s.Push(context.Background(), "inc", []clustersync.Row{{
			WindowKey: clustersync.WindowKey{Namespace: "ns", Size: time.Second, Key: "k"},
			Total:     1, Version: 1, ExpireAt: time.Now().Add(time.Hour),
		}}); err != nil {
			b.Fatal(err)
		}
		c.Stop()
		began = time.Now()
		c.Start()
		restart := time.Since(began)
		c.Kill()
		began = time.Now()
		c.Start()
		afterKill := time.Since(began)
		b.ReportMetric(cold.Seconds(), "cold-s")
		b.ReportMetric(restart.Seconds(), "restart-s")
		b.ReportMetric(afterKill.Seconds(), "restart-after-kill-s")
		c.Kill()
	}
}
