//go:build integration

package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Concurrency leases across the cluster, on real stores and limiterd
// processes.

func acquire(ctx context.Context, n *harness.Limiterd, ns, key string, limit int64, ttl time.Duration) (*limiterv1.AcquireResponse, error) {
	return n.Client.Acquire(ctx, &limiterv1.AcquireRequest{Namespace: ns, Key: key, Limit: limit, Ttl: durationpb.New(ttl)})
}

func release(ctx context.Context, n *harness.Limiterd, lease string) (*limiterv1.ReleaseResponse, error) {
	return n.Client.Release(ctx, &limiterv1.ReleaseRequest{Lease: lease})
}

// checkLeasesFreedAfterKill: a node granted 50 leases and is SIGKILLed;
// another node acquires all 50 once their TTL (plus one sync period when
// periodic) has passed, and not before.
func checkLeasesFreedAfterKill(t *testing.T, store string, syncRate float64) {
	cfg := clusterConfig(store, syncRate)
	if syncRate == 0 {
		// Synchronous: every Acquire is a store call, and one past
		// call_timeout is refused UNAVAILABLE (on_store_down: refuse),
		// its lease perhaps granted in the store all the same, which
		// this test counts exactly. A store call can take over 500 ms on
		// a loaded host: allow 5 s, as the exact tests do.
		cfg = withCallTimeout(cfg, "5s")
	}
	nodes := harness.Cluster(t, 3, cfg)
	ctx := context.Background()
	key := harness.UniqueName("killed")
	const limit, ttl = 50, 3 * time.Second
	period := time.Duration(syncRate * float64(time.Second))
	// No lease can expire before a ttl after the first was asked for; on
	// a loaded host the 50 grants can take over a second.
	first := time.Now()
	for i := range limit {
		resp, err := acquire(ctx, nodes[0], "api", key, limit, ttl)
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("lease %d at node 0: %v, %v", i, resp, err)
		}
	}
	granted := time.Now() // the last lease expires by granted + ttl
	// Periodic: the others see the leases after a tick of each.
	time.Sleep(2*period + 200*time.Millisecond)
	nodes[0].Kill()
	if resp, err := acquire(ctx, nodes[1], "api", key, limit, ttl); err != nil || resp.GetAcquired() || resp.GetHeld() != limit {
		t.Fatalf("node 1 with 50 held by node 0: %v, %v; want refused at 50", resp, err)
	}
	for {
		resp, err := acquire(ctx, nodes[1], "api", key, limit, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetAcquired() {
			break
		}
		if time.Since(granted) > ttl+period+2*time.Second {
			t.Fatalf("leases of the killed node still held %s after the last was granted (ttl %s, sync period %s): %v",
				time.Since(granted).Round(time.Millisecond), ttl, period, resp)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The last of the killed node's leases lives until granted + ttl, the
	// first until at least first + ttl.
	freed := time.Since(granted)
	if early := time.Since(first); early < ttl-time.Second {
		t.Fatalf("a lease freed %s after the first was asked for, before its ttl %s", early, ttl)
	}
	t.Logf("a lease of the killed node free again %s after the last grant (ttl %s, sync period %s)", freed.Round(time.Millisecond), ttl, period)
	// Every one is free once the last granted has expired: node 2 takes
	// the other 49 (periodic: once node 1's lease reached it). On a loaded
	// host the 50 grants span seconds, so the first frees well before
	// the last.
	time.Sleep(time.Until(granted.Add(ttl)) + 2*period + 200*time.Millisecond)
	got := 1
	for range limit {
		resp, err := acquire(ctx, nodes[2], "api", key, limit, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetAcquired() {
			got++
		}
	}
	if got != limit {
		t.Fatalf("after the kill the others acquired %d leases, want %d", got, limit)
	}
}

func TestRedisLeasesFreedAfterKill(t *testing.T) {
	r := harness.SharedRedis(t)
	for _, s := range []float64{0, 0.1} {
		t.Run(fmt.Sprint("sync_rate=", s), func(t *testing.T) {
			checkLeasesFreedAfterKill(t, redisStore(r.Addr(), harness.UniqueName("lkill")), s)
		})
	}
}

func TestPostgresLeasesFreedAfterKill(t *testing.T) {
	checkLeasesFreedAfterKill(t, postgresStore(harness.SharedPostgres(t).DSN()), 0)
}

// checkLeasesExact: 8 callers on each of 3 synchronous nodes acquire,
// hold for a moment and release. By the callers' own accounting no
// instant holds more than the limit, and some instant holds exactly it.
func checkLeasesExact(t *testing.T, store string) {
	nodes := harness.Cluster(t, 3, exactConfig(store))
	key := harness.UniqueName("exact")
	const limit = 6
	var inFlight, peak, granted, failed atomic.Int64
	var wg sync.WaitGroup
	// Callers go on until the limit was reached and each made 30 tries,
	// for at most 20 s: how soon the peak comes depends on the machine.
	deadline := time.Now().Add(20 * time.Second)
	for _, n := range nodes {
		for range 8 {
			wg.Go(func() {
				ctx := context.Background()
				for i := 0; (i < 30 || peak.Load() < limit) && time.Now().Before(deadline); i++ {
					resp, err := acquire(ctx, n, "api", key, limit, 10*time.Second)
					if err != nil {
						failed.Add(1)
						continue
					}
					if !resp.GetAcquired() {
						continue
					}
					granted.Add(1)
					now := inFlight.Add(1)
					for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
					}
					time.Sleep(time.Duration(1000+rand.IntN(4000)) * time.Microsecond)
					inFlight.Add(-1) // before the release: never counted after it
					if r, err := release(ctx, n, resp.GetLease()); err != nil || !r.GetReleased() {
						failed.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d calls failed", failed.Load())
	}
	if p := peak.Load(); p != limit {
		t.Fatalf("peak in flight %d with a limit of %d (%d leases granted)", p, limit, granted.Load())
	}
	t.Logf("%d leases granted, peak in flight %d", granted.Load(), peak.Load())
}

func TestRedisLeasesExact(t *testing.T) {
	checkLeasesExact(t, redisStore(harness.SharedRedis(t).Addr(), harness.UniqueName("lexact")))
}

func TestPostgresLeasesExact(t *testing.T) {
	checkLeasesExact(t, postgresStore(harness.SharedPostgres(t).DSN()))
}

// TestRedisLeasesOutage, TestPostgresLeasesOutage: while the store is down a synchronous namespace
// refuses Acquire (UNAVAILABLE) and one with on_store_down: local grants
// from the node's own leases; releases made meanwhile reach the store
// afterwards. After recovery the store holds exactly the leases the
// callers still hold.
func TestRedisLeasesOutage(t *testing.T) {
	r := harness.StartRedis(t)
	prefix := harness.UniqueName("loutage")
	cfg := redisstore.DefaultConfig()
	cfg.Addrs, cfg.KeyPrefix = []string{r.Addr()}, prefix
	st, err := redisstore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	checkLeasesOutage(t, redisStore(r.Addr(), prefix), r.Stop, r.Start, st)
}

func TestPostgresLeasesOutage(t *testing.T) {
	p := harness.StartPostgres(t)
	checkLeasesOutage(t, postgresStore(p.DSN()), p.Stop, p.Start, openPostgres(t, p.DSN()))
}

func checkLeasesOutage(t *testing.T, store string, stop, start func(), st clustersync.LeaseStore) {
	nodes := harness.Cluster(t, 2, fmt.Sprintf(`sync:
  tick_timeout: 1s
  call_timeout: 300ms
stores:
  main: %s
namespaces:
  - name: refuse
    window_sizes: ["1h"]
    sync_rate: 0
    store: main
  - name: local
    window_sizes: ["1h"]
    sync_rate: 0
    store: main
    on_store_down: local
`, store))
	ctx := context.Background()
	// A fresh store's first calls create its tables, which can take past
	// call_timeout on a loaded host: wait until each node's store answers.
	for _, n := range nodes {
		waitUntil(t, "the store answers "+n.Name, 30*time.Second, func() bool {
			_, err := acquire(ctx, n, "refuse", "warm-up", 10, time.Second)
			return err == nil
		})
	}
	var before []string
	for range 4 {
		resp, err := acquire(ctx, nodes[0], "refuse", "k", 10, time.Minute)
		if err != nil || !resp.GetAcquired() {
			t.Fatalf("acquire before the outage: %v, %v", resp, err)
		}
		before = append(before, resp.GetLease())
	}
	stop()
	_, err := acquire(ctx, nodes[0], "refuse", "k", 10, time.Minute)
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("acquire while Redis is down: %v, want UNAVAILABLE", err)
	}
	// Released at the other node while down: pending, sent later.
	for _, l := range before[:3] {
		resp, err := release(ctx, nodes[1], l)
		if err != nil || !resp.GetPending() {
			t.Fatalf("release while down: %v, %v; want pending", resp, err)
		}
	}
	var local []string
	for range 3 {
		resp, err := acquire(ctx, nodes[1], "local", "k", 2, time.Minute)
		if err != nil {
			t.Fatalf("acquire, on_store_down local: %v", err)
		}
		if resp.GetAcquired() {
			local = append(local, resp.GetLease())
		}
	}
	if len(local) != 2 {
		t.Fatalf("on_store_down local granted %d with limit 2", len(local))
	}
	if resp, err := release(ctx, nodes[1], local[0]); err != nil || !resp.GetReleased() {
		t.Fatalf("release of a local lease while down: %v, %v", resp, err)
	}
	start()
	// Held by callers now: before[3] (refuse) and local[1] (local).
	want := map[string]int64{"refuse": 1, "local": 1}
	deadline := time.Now().Add(20 * time.Second)
	for ns, n := range want {
		for {
			got := storeLeases(t, st, ns, "k")
			if got == n {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("namespace %s: the store holds %d leases after recovery, want %d (those callers hold)", ns, got, n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The node's first store call after the restart can still fail (a
	// pooled connection the restart broke): its release then answers
	// pending and a later tick sends it.
	for _, l := range []string{before[3], local[1]} {
		if resp, err := release(ctx, nodes[0], l); err != nil || !resp.GetReleased() && !resp.GetPending() {
			t.Fatalf("release after recovery: %v, %v", resp, err)
		}
	}
	for ns := range want {
		for got := storeLeases(t, st, ns, "k"); got != 0; got = storeLeases(t, st, ns, "k") {
			if time.Now().After(deadline) {
				t.Fatalf("namespace %s: %d leases left", ns, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// storeLeases is the key's live leases in the store, now.
func storeLeases(t *testing.T, st clustersync.LeaseStore, ns, key string) int64 {
	t.Helper()
	r := make([]clustersync.LeaseReply, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := st.Leases(ctx, time.Now().UnixNano(), []clustersync.LeaseOp{{Kind: clustersync.LeaseCount, Namespace: ns, Key: key}}, r); err != nil {
		return -1
	}
	return r[0].Held
}
