package redis_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

// BenchmarkTick measures the store calls of one periodic tick for n dirty
// windows, in batches of 5000 (the Syncer's BatchSize): push n rows, then
// fetch the same n windows; with "-pushfetch", one PushFetch of the n rows,
// which is what the Syncer sends on a PushFetcher. Two other incarnations
// hold rows for every window. "single" is a *redis.Client (one server: up
// to 100 windows per script call); "per-key" hides that, so calls are
// grouped per (namespace, key) as on a cluster or ring.
func BenchmarkTick(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		for _, mode := range []string{"single", "per-key", "single-pushfetch", "per-key-pushfetch"} {
			b.Run(fmt.Sprintf("keys=%d/%s", n, mode), func(b *testing.B) {
				c := redis.NewClient(&redis.Options{Addr: redisAddr(b), ContextTimeoutEnabled: true})
				b.Cleanup(func() { _ = c.Close() })
				var s *redisstore.Store
				if strings.HasPrefix(mode, "single") {
					s = redisstore.New(c, newPrefix())
				} else {
					s = redisstore.New(notSingle{c}, newPrefix())
				}
				rows := make([]clustersync.Row, n)
				keys := make([]clustersync.WindowKey, n)
				others := make([]int64, n)
				// One-minute windows: no row expires during the run, so every
				// tick measures updates, not re-creations.
				start := ratelimit.WindowStart(time.Now().UnixNano(), time.Minute)
				for i := range rows {
					keys[i] = wk("bench", fmt.Sprint("user-", i), time.Minute, start)
					rows[i] = syncerRow(keys[i], int64(i), 1, 100*time.Millisecond)
				}
				ctx := context.Background()
				const batch = 5000
				pushFetch := strings.HasSuffix(mode, "-pushfetch")
				tick := func(inc string, version int64) {
					for lo := 0; lo < n; lo += batch {
						hi := min(lo+batch, n)
						for i := lo; i < hi; i++ {
							rows[i].Version = version
							rows[i].Total++
						}
						var err error
						if pushFetch {
							err = s.PushFetch(ctx, inc, rows[lo:hi], others[lo:hi])
						} else {
							err = s.Push(ctx, inc, rows[lo:hi])
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					if pushFetch {
						return
					}
					for lo := 0; lo < n; lo += batch {
						hi := min(lo+batch, n)
						if err := s.Fetch(ctx, inc, keys[lo:hi], others[lo:hi]); err != nil {
							b.Fatal(err)
						}
					}
				}
				tick("other-1", 1)
				tick("other-2", 1)
				tick("me", 1) // warm: scripts loaded, pool filled
				b.ReportAllocs()
				cpu0 := serverCPU(b, c)
				b.ResetTimer()
				for i := range b.N {
					tick("me", int64(i)+2)
				}
				b.StopTimer()
				b.ReportMetric(float64((serverCPU(b, c)-cpu0).Nanoseconds())/1e3/float64(n*b.N), "server-µs/key")
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
				b.ReportMetric(0, "ns/op") // ms/tick below reads better
				b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/tick")
			})
		}
	}
}

// BenchmarkSyncerTick measures one tick of a real Syncer against Redis
// for a namespace with one window size (1 m) and n keys, of which c are
// counted once since the last tick (all n unless the name says
// "changed"): c dirty windows pushed, then (the store being a
// ChangeReader, after the untimed first tick) the windows the other nodes
// wrote since read: none. Two other nodes hold rows for every current
// window. "keys=10000,changed=2000" is what one node sees at sync_rate
// 0.1 under about 24 000 calls/s over 10 000 keys: each tick changes a
// different fifth of them, about 31 per bucket. largebench_test.go
// measures ticks with idle keys.
func BenchmarkSyncerTick(b *testing.B) {
	for _, bc := range []struct{ n, changed int }{{10_000, 10_000}, {100_000, 100_000}, {10_000, 2_000}} {
		name := fmt.Sprintf("keys=%d", bc.n)
		if bc.changed < bc.n {
			name += fmt.Sprintf(",changed=%d", bc.changed)
		}
		b.Run(name, func(b *testing.B) {
			n := bc.n
			c := redis.NewClient(&redis.Options{Addr: redisAddr(b), ContextTimeoutEnabled: true})
			b.Cleanup(func() { _ = c.Close() })
			s := redisstore.New(c, newPrefix())
			// The middle of a minute, fixed: no window ends during the run.
			clock := fixedClock(time.Now().Truncate(time.Minute).Add(30 * time.Second))
			keys := make([]string, n)
			for i := range keys {
				keys[i] = fmt.Sprint("user-", i)
			}
			newSyncer := func(name string) (*node.Namespace, *clustersync.Syncer) {
				ns, err := node.NewNamespace(node.Config{Name: "bench", WindowSizes: []time.Duration{time.Minute}, Shared: true}, clock)
				if err != nil {
					b.Fatal(err)
				}
				sy, err := clustersync.NewSyncer(ns, clustersync.Periodic{Period: time.Second}, s, clustersync.NewIncarnation(name), clustersync.NewVersions(time.Now), clustersync.Config{NoJitter: true, TickTimeout: time.Minute}, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				return ns, sy
			}
			// count counts keys off+7i mod n, i < changed: distinct, as 7
			// and n are coprime.
			count := func(ns *node.Namespace, off, changed int) {
				for i := range changed {
					if _, err := ns.IncrementAt(ns.Now(), keys[(off+7*i)%n], time.Minute, 1, nil); err != nil {
						b.Fatal(err)
					}
				}
			}
			tick := func(ns *node.Namespace, sy *clustersync.Syncer) {
				count(ns, 0, n)
				if err := sy.SyncOnce(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			for _, other := range []string{"other-1", "other-2"} {
				tick(newSyncer(other))
			}
			ns, sy := newSyncer("me")
			tick(ns, sy) // warm: scripts loaded, pool filled
			b.ReportAllocs()
			var cpu time.Duration
			b.ResetTimer()
			for i := range b.N {
				b.StopTimer()
				count(ns, i*7*bc.changed, bc.changed)
				cpu0 := serverCPU(b, c)
				b.StartTimer()
				if err := sy.SyncOnce(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cpu += serverCPU(b, c) - cpu0
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(bc.changed*b.N), "server-µs/key")
			b.ReportMetric(float64(bc.changed)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/tick")
		})
	}
}

// serverCPU returns the CPU time Redis's main thread has used, from INFO
// cpu: the server's cost, which other jobs on a shared machine inflate far
// less than wall time.
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for _, l := range strings.Split(info, "\r\n") {
		name, v, _ := strings.Cut(l, ":")
		if name == "used_cpu_sys_main_thread" || name == "used_cpu_user_main_thread" {
			f, _ := strconv.ParseFloat(v, 64)
			sec += f
		}
	}
	return time.Duration(sec * float64(time.Second))
}

// commandTime returns the time Redis has spent executing command name
// (INFO commandstats; a script's time includes the commands it calls): the
// server's own cost of the calls, without its network and event loop.
func commandTime(b *testing.B, c *redis.Client, name string) time.Duration {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		fields, ok := strings.CutPrefix(l, "cmdstat_"+name+":")
		if !ok {
			continue
		}
		for _, f := range strings.Split(fields, ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return time.Duration(n) * time.Microsecond
			}
		}
	}
	return 0
}

type fixedClock time.Time

func (c fixedClock) Now() time.Time { return time.Time(c) }

// BenchmarkSyncCall measures the store call of a synchronous namespace
// from one goroutine, as a node makes it: a real Syncer with sync_rate 0,
// window sizes 1 s and 1 m, the default 250 ms call timeout, 1000 keys in
// turn. "increment" is Syncer.IncrementAt (one PushFetch of the key's 2
// current windows, and of its 2 previous ones for the first call after a
// boundary and the first one 250 ms after it), "increment-10keys" the same
// over 10 keys (hot keys: nearly every call sends the current windows
// only), "allow" is Syncer.AllowAt over both sizes (one call of the allow
// script, a group of one).
// "bucket-token", "bucket-leaky" and "bucket-fixed" are one store Buckets
// call (one script) taking 1 from one bucket of that kind, in one
// incarnation, as a synchronous bucket limit makes it.
// "lease-acquire-release" is a synchronous concurrency limit's two store
// calls: one Leases call (one script) acquiring a new lease of the key,
// then one releasing it, in one incarnation; its ns/op and p50 cover
// both.
// "go-redis-incr" is a plain INCR through
// go-redis from the same goroutine: the client's own floor. Each reports
// p50/p99 latency and, next to them, the p50 of redis-benchmark -c 1 -t
// incr on the same server, and server-µs, the server's time executing
// the call (INFO commandstats).
func BenchmarkSyncCall(b *testing.B) {
	addr := redisAddr(b)
	sizes := []time.Duration{time.Second, time.Minute}
	buckets := map[string]ratelimit.BucketSpec{
		"bucket-token": {Kind: ratelimit.TokenLimit, A: ratelimit.MaxValue * ratelimit.Micro, B: int64(time.Second), C: ratelimit.MaxValue * ratelimit.Micro},
		"bucket-leaky": {Kind: ratelimit.LeakyLimit, A: ratelimit.MaxValue * ratelimit.Micro, B: int64(time.Second), C: 1},
		"bucket-fixed": {Kind: ratelimit.FixedLimit, A: int64(time.Minute), B: ratelimit.MaxValue * ratelimit.Micro},
	}
	for _, op := range []string{"go-redis-incr", "increment", "increment-10keys", "allow", "lease-acquire-release", "bucket-token", "bucket-leaky", "bucket-fixed"} {
		b.Run(op, func(b *testing.B) {
			s, _ := newStoreAt(b, addr)
			raw := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
			b.Cleanup(func() { _ = raw.Close() })
			ns, err := node.NewNamespace(node.Config{Name: "sync", WindowSizes: sizes, Shared: true}, node.SystemClock{})
			if err != nil {
				b.Fatal(err)
			}
			m := new(fallbackCounter)
			sy, err := clustersync.NewSyncer(ns, clustersync.Synchronous{}, s, clustersync.NewIncarnation("me"), clustersync.NewVersions(time.Now), clustersync.Config{}, nil, m)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			keys := make([]string, 1000)
			if op == "increment-10keys" {
				keys = keys[:10]
			}
			for i := range keys {
				keys[i] = fmt.Sprint("user-", i)
			}
			limits := []ratelimit.Limit{{Size: time.Second, Limit: 1e9}, {Size: time.Minute, Limit: 1e9}}
			// A bucket call's state per key: this incarnation's total and
			// its versions, as a node keeps them.
			totals := make([]int64, len(keys))
			life, version := time.Now().UnixNano(), time.Now().UnixMicro()
			bcalls := make([]clustersync.BucketCall, 1)
			breplies := make([]clustersync.BucketReply, 1)
			// A lease call's op and reply; ids are the incarnation's and a
			// counter, as a node makes them.
			inc := clustersync.NewIncarnation("me")
			lops := make([]clustersync.LeaseOp, 1)
			lreplies := make([]clustersync.LeaseReply, 1)
			var leaseSeq int
			var rates []ratelimit.Rate
			var statuses []ratelimit.LimitStatus
			lat := make([]time.Duration, 0, b.N)
			call := func(i int) {
				key := keys[i%len(keys)]
				var err error
				switch op {
				case "go-redis-incr":
					cctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
					err = raw.Incr(cctx, "limiterd-bench-incr").Err()
					cancel()
				case "increment", "increment-10keys":
					rates, err = sy.Calls().IncrementAt(ctx, time.Now(), key, 0, 1, rates[:0])
				case "allow":
					var d ratelimit.Decision
					d, err = sy.Calls().AllowAt(ctx, time.Now(), ratelimit.AllowRequest{Key: key, Cost: 1, Limits: limits}, statuses[:0])
					statuses = d.Limits
				case "lease-acquire-release":
					now := time.Now().UnixNano()
					exp := now + int64(30*time.Second)
					leaseSeq++
					lops[0] = clustersync.LeaseOp{Kind: clustersync.LeaseAcquire, Namespace: "sync", Key: key,
						ID: inc + "." + strconv.Itoa(leaseSeq), Limit: 1000, Expiry: exp}
					cctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
					err = s.Leases(cctx, now, lops, lreplies)
					if err == nil && !lreplies[0].OK {
						err = fmt.Errorf("lease %s refused: %+v", lops[0].ID, lreplies[0])
					}
					if err == nil {
						lops[0].Kind, lops[0].Limit = clustersync.LeaseRelease, 0
						err = s.Leases(cctx, time.Now().UnixNano(), lops, lreplies)
					}
					cancel()
				default:
					j := i % len(keys)
					at := time.Now()
					version++
					bcalls[0] = clustersync.BucketCall{Namespace: "sync", Bucket: buckets[op], Life: life, Total: totals[j],
						ApplyAt: at.UnixNano(), Version: version, ExpireAt: at.Add(time.Minute)}
					bcalls[0].Bucket.Key = key
					cctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
					var ok bool
					ok, err = s.Buckets(cctx, "me", at.UnixNano(), ratelimit.Micro, bcalls, breplies)
					cancel()
					if err == nil && !ok {
						err = fmt.Errorf("%s: take of 1 refused", op)
					}
					totals[j] = breplies[0].Applied
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			for i := range 1000 {
				call(i) // warm up
			}
			fallback := func() float64 { return float64(m.n.Load()) }
			f0 := fallback()
			cmd := "evalsha"
			if op == "go-redis-incr" {
				cmd = "incr"
			}
			ct0 := commandTime(b, raw, cmd)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				call(i)
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			b.ReportMetric(float64((commandTime(b, raw, cmd)-ct0).Nanoseconds())/1e3/float64(b.N), "server-µs")
			if f := fallback() - f0; f != 0 {
				b.Fatalf("%v calls answered locally: the store did not answer in time", f)
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
			if b.N == 1 {
				return // the probe run: nothing to compare
			}
			if p50, ok := redisBenchmarkP50(b, addr); ok {
				b.ReportMetric(p50, "incr-p50-µs")
			}
		})
	}
}

var p50RE = regexp.MustCompile(`p50=([0-9.]+) msec`)

// redisBenchmarkP50 runs redis-benchmark -c 1 -n 100000 -t incr against
// addr and returns its p50 in µs (false when the tool is missing).
func redisBenchmarkP50(b *testing.B, addr string) (float64, bool) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return 0, false
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command(bin, "-h", host, "-p", port, "-c", "1", "-n", "100000", "-t", "incr", "-q").CombinedOutput()
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	m := p50RE.FindSubmatch(out)
	if m == nil {
		b.Fatalf("no p50 in redis-benchmark output %q", out)
	}
	ms, _ := strconv.ParseFloat(string(m[1]), 64)
	return ms * 1e3, true
}

// syncerRow is a row as the Syncer builds it: it expires at window end +
// size + 2 × sync_rate.
func syncerRow(k clustersync.WindowKey, total, version int64, syncRate time.Duration) clustersync.Row {
	return clustersync.Row{WindowKey: k, Total: total, Version: version,
		ExpireAt: time.Unix(0, k.Start).Add(2*k.Size + 2*syncRate)}
}

// fallbackCounter counts a Syncer's fallbacks to local counts.
type fallbackCounter struct {
	clustersync.NopMetrics
	n atomic.Int64
}

func (c *fallbackCounter) Fallback(string) { c.n.Add(1) }
