package strategytest

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// BenchIdleKeysTick measures a periodic tick of one node holding n active
// keys (one 1-minute window size, sync_rate 0.1) of which 10 000 change
// per tick: 5 000 counted by this node, 5 000 by another incarnation
// (pushed to s between ticks). It reports the tick's wall time, the
// store's CPU per tick (server: its CPU time so far) and this process's
// CPU per tick. For the stores' largebench benchmarks: a million keys take
// minutes to set up.
func BenchIdleKeysTick(b *testing.B, s clustersync.Store, n int, server func() time.Duration) {
	const changed = 10_000
	var m countMetrics
	ctx := context.Background()
	// The middle of a minute, fixed: no window ends during the run.
	clock := fixedClock(time.Now().Truncate(time.Minute).Add(30 * time.Second))
	ns, err := node.NewNamespace(node.Config{Name: "bench", WindowSizes: []time.Duration{time.Minute}, Shared: true, MaxKeys: 2 * n}, clock)
	if err != nil {
		b.Fatal(err)
	}
	sy, err := clustersync.NewSyncer(ns, clustersync.Periodic{Period: 100 * time.Millisecond}, s, clustersync.NewIncarnation("me"), clustersync.NewVersions(time.Now),
		clustersync.Config{NoJitter: true, NoEscalate: true, TickTimeout: 10 * time.Minute}, nil, &m)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%08d", i)
		if _, err := ns.IncrementAt(ns.Now(), keys[i], time.Minute, 1, nil); err != nil {
			b.Fatal(err)
		}
	}
	start := time.Now()
	if err := sy.SyncOnce(ctx); err != nil { // the first tick reads all
		b.Fatal(err)
	}
	b.Logf("first tick over %d keys: %v", n, time.Since(start))
	other := clustersync.NewIncarnation("other")
	versions := clustersync.NewVersions(time.Now)
	ws := ratelimit.WindowStart(time.Time(clock).UnixNano(), time.Minute)
	rows := make([]clustersync.Row, changed/2)
	off := 0
	var tick, srv, cli time.Duration
	read := 0
	b.ResetTimer()
	b.StopTimer()
	for it := 0; it < b.N; it++ {
		v := versions.Next()
		for j := range rows {
			k := keys[(off+changed/2+j)%n]
			rows[j] = clustersync.Row{WindowKey: clustersync.WindowKey{Namespace: "bench", Size: time.Minute, Start: ws, Key: k},
				Total: int64(it+1) * 1_000_000, Version: v, ExpireAt: time.Time(clock).Add(3 * time.Minute)}
		}
		if err := s.Push(ctx, other, rows); err != nil {
			b.Fatal(err)
		}
		for j := 0; j < changed/2; j++ {
			if _, err := ns.IncrementAt(ns.Now(), keys[(off+j)%n], time.Minute, 1, nil); err != nil {
				b.Fatal(err)
			}
		}
		m.fetched = 0
		s0, c0 := server(), processCPU()
		t0 := time.Now()
		b.StartTimer()
		if err := sy.SyncOnce(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		tick += time.Since(t0)
		srv += server() - s0
		read += m.fetched
		cli += processCPU() - c0
		// The other node's hits are in this node's view.
		r, err := ns.RateAt(ns.Now(), rows[0].Key, time.Minute, 0, nil)
		if err != nil || r[0].Rate < float64(it+1) {
			b.Fatalf("key %s after the tick: rate %v, %v; want ≥ %d", rows[0].Key, r, err, it+1)
		}
		off = (off + changed) % n
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 / float64(b.N) }
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(per(tick), "ms/tick")
	b.ReportMetric(per(srv), "server-cpu-ms/tick")
	b.ReportMetric(per(cli), "client-cpu-ms/tick")
	b.ReportMetric(float64(read)/float64(b.N), "windows-read/tick")
}

// countMetrics counts the windows a tick reads (Fetched: fetched, read
// back by PushFetch, or read as changes).
type countMetrics struct {
	clustersync.NopMetrics
	fetched int
}

func (m *countMetrics) Fetched(_ string, rows int) { m.fetched += rows }

// processCPU returns this process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }
