package cassandra_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
	clustersync "github.com/limiterd/limiterd/sync"
)

// tickBatch is the Syncer's default BatchSize: the most rows per store
// call.
const tickBatch = 5000

// BenchmarkTick measures one periodic tick of n dirty keys: Push n rows,
// then Fetch n windows, in calls of at most 5000 as the Syncer makes them
// (one after the other). Each key has one window of 1 s or 1 min (the
// current ones, so the windows of a tick share 2 starts); two other
// incarnations hold a row in every window. keys/s = n / tick.
// batch_rows=1 is one request per window (token-aware on a cluster).
func BenchmarkTick(b *testing.B) {
	c := harness.SharedCassandra(b)
	e := newEnv(b, c)
	for _, n := range []int{10_000, 100_000} {
		for _, batchRows := range []int{cassandrastore.DefaultBatchRows, 10, 1} {
			b.Run(fmt.Sprintf("keys=%d/batch_rows=%d", n, batchRows), func(b *testing.B) {
				cfg := e.config()
				cfg.BatchRows = batchRows
				s := open(b, cfg)
				now := time.Now()
				rows := make([]clustersync.Row, n)
				keys := make([]clustersync.WindowKey, n)
				for i := range rows {
					size := []time.Duration{time.Second, time.Minute}[i%2]
					keys[i] = clustersync.WindowKey{
						Namespace: fmt.Sprintf("bench%d", n), Size: size,
						Start: now.Truncate(size).UnixNano(), Key: fmt.Sprintf("user-%07d", i),
					}
					rows[i] = clustersync.Row{WindowKey: keys[i], Total: int64(i), ExpireAt: now.Add(time.Hour)}
				}
				ctx := context.Background()
				version := now.UnixMicro()
				pushAll := func(inc string) {
					version++
					for lo := 0; lo < n; lo += tickBatch {
						batch := rows[lo:min(lo+tickBatch, n)]
						for i := range batch {
							batch[i].Version = version
							batch[i].Total++
						}
						if err := s.Push(ctx, inc, batch); err != nil {
							b.Fatal(err)
						}
					}
				}
				pushAll("other-1")
				pushAll("other-2")
				others := make([]int64, tickBatch)
				var pushTime time.Duration
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					began := time.Now()
					pushAll("me")
					pushTime += time.Since(began)
					for lo := 0; lo < n; lo += tickBatch {
						batch := keys[lo:min(lo+tickBatch, n)]
						if err := s.Fetch(ctx, "me", batch, others[:len(batch)]); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
				b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "ms/tick")
				b.ReportMetric(pushTime.Seconds()*1000/float64(b.N), "push-ms/tick")
			})
		}
	}
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
