//go:build integration

package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
)

// Resets across a cluster of limiterd processes on each real store.

// resetTokens are the tokens of the reset tests: app may count in every
// namespace, ops may also reset.
const (
	resetAppToken = "reset-app-token-0123456789"
	resetOpsToken = "reset-ops-token-0123456789"
)

// resetConfig is clusterConfig with an auth section of the two tokens,
// their files written in dir.
func resetConfig(t *testing.T, store string, syncRate float64) string {
	dir := t.TempDir()
	files := map[string]string{}
	for name, tok := range map[string]string{"app": resetAppToken, "ops": resetOpsToken} {
		files[name] = filepath.Join(dir, name+".token")
		if err := os.WriteFile(files[name], []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return clusterConfig(store, syncRate) + fmt.Sprintf(`auth:
  tokens:
    - {name: app, token_file: %s, namespaces: ["*"], operations: [read, write]}
    - {name: ops, token_file: %s, namespaces: ["*"], operations: [read, write, admin]}
`, files["app"], files["ops"])
}

// checkResetCluster: a key at its limit on three nodes is admitted right
// after a reset on the node that took it and, within one sync period and
// a tick, on the other two; a caller without the admin grant is refused
// and resets nothing; a reset taken again, at another node, forgets only
// what was counted since the first, and each node then admits exactly
// the limit again. Store calls may take 5 s (a loaded test host): one
// past call_timeout would be decided in its node, which may admit past
// the limit, as documented.
func checkResetCluster(t *testing.T, store string, syncRate float64) {
	nodes := harness.Cluster(t, 3, withCallTimeout(resetConfig(t, store, syncRate), "5s"))
	base, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	app := metadata.AppendToOutgoingContext(base, "authorization", "Bearer "+resetAppToken)
	ops := metadata.AppendToOutgoingContext(base, "authorization", "Bearer "+resetOpsToken)
	key := harness.UniqueName("reset")
	const limit = 6
	period := time.Duration(syncRate * float64(time.Second))
	// What a node needs to see the others' writes: D = 2·max(s, d) + 2·d
	// with d, a tick, within tick_timeout (1 s) (docs/reliability.md).
	settle := 2*max(period, time.Second) + 2*time.Second
	allow := func(i int) bool {
		t.Helper()
		resp, err := nodes[i].Client.Allow(app, &limiterv1.AllowRequest{Namespace: "api", Key: key,
			Limits: []*limiterv1.Limit{{WindowSize: durationpb.New(time.Hour), Limit: limit}}})
		if err != nil {
			t.Fatalf("Allow at node %d: %v", i, err)
		}
		return resp.GetAllowed()
	}
	reset := func(ctx context.Context, i int) error {
		t.Helper()
		_, err := nodes[i].Client.Reset(ctx, &limiterv1.ResetRequest{Namespace: "api", Key: key})
		return err
	}
	rate := func(i int) float64 {
		t.Helper()
		resp, err := nodes[i].Client.SlidingWindow(app, &limiterv1.SlidingWindowRequest{Namespace: "api", Key: key})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetRates()[0].GetRate()
	}
	// settled waits, within settle, until every node reads a rate that
	// ok accepts (reads count nothing, unlike Allow).
	settled := func(when string, ok func(float64) bool) {
		t.Helper()
		start := time.Now()
		for i := range nodes {
			for r := rate(i); !ok(r); r = rate(i) {
				if time.Since(start) > settle {
					t.Fatalf("%s: node %d reads a rate of %g %s after, beyond D", when, i, r, time.Since(start).Round(time.Millisecond))
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	// fill admits the limit, round-robin, and checks that every node then
	// refuses.
	fill := func(when string) {
		t.Helper()
		for i := range limit {
			if !allow(i % len(nodes)) {
				t.Fatalf("%s: hit %d of %d at node %d refused", when, i+1, limit, i%len(nodes))
			}
		}
		settled(when, func(r float64) bool { return r >= limit })
		for i := range nodes {
			if allow(i) {
				t.Fatalf("%s: node %d admits the key at its limit", when, i)
			}
		}
	}
	fill("before the reset")

	if err := reset(app, 0); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Reset without the admin grant: %v, want PermissionDenied", err)
	}
	if allow(0) {
		t.Fatal("a refused reset reset the key")
	}
	time.Sleep(2*period + 300*time.Millisecond) // a tick of each node, on a calm host
	if allow(1) {
		t.Fatal("a refused reset reset the key at another node")
	}

	if err := reset(ops, 0); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	done := time.Now()
	if !allow(0) {
		t.Fatal("the node that took the reset refuses the key right after it")
	}
	for _, i := range []int{1, 2} {
		for !allow(i) {
			if time.Since(done) > period+time.Second {
				t.Fatalf("node %d still refuses the key %s after the reset (sync period %s, a tick within 1 s)", i, time.Since(done), period)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("node %d admits the key %s after the reset (sync period %s)", i, time.Since(done).Round(time.Millisecond), period)
	}

	// Again, at another node, twice over (a retry): the 3 hits since are
	// forgotten, and the key takes its limit again, no more.
	settled("after the first reset", func(r float64) bool { return r >= 3 })
	for range 2 {
		if err := reset(ops, 2); err != nil {
			t.Fatalf("Reset again: %v", err)
		}
	}
	settled("after the key was reset again", func(r float64) bool { return r == 0 })
	fill("after the second reset")
}

func TestRedisReset(t *testing.T) {
	r := harness.SharedRedis(t)
	for _, s := range []float64{0, 0.1} {
		t.Run(fmt.Sprint("sync_rate=", s), func(t *testing.T) {
			checkResetCluster(t, redisStore(r.Addr(), harness.UniqueName("reset")), s)
		})
	}
}

func TestPostgresReset(t *testing.T) {
	pg := harness.SharedPostgres(t)
	for _, s := range []float64{0, 0.1} {
		t.Run(fmt.Sprint("sync_rate=", s), func(t *testing.T) {
			checkResetCluster(t, postgresStore(pg.DSN()), s)
		})
	}
}

func TestCassandraReset(t *testing.T) {
	c := harness.SharedCassandra(t)
	checkResetCluster(t, cassandraStore(c, keyspace("reset")), 0.1)
}

// checkResetBucketsAndLeases: a token bucket at its limit on three nodes
// is admitted right after a reset of it on the node that took it and,
// within one sync period and a tick, on the other two; a key at its
// lease limit is freed by a reset of its leases and another node
// acquires within a sync period and a tick, the freed leases staying
// released; a caller without the admin grant is refused and resets
// nothing; a reset taken again (a retry) is harmless: each limit then
// holds again. Store calls may take 5 s (a loaded test host).
func checkResetBucketsAndLeases(t *testing.T, store string, syncRate float64) {
	nodes := harness.Cluster(t, 3, withCallTimeout(resetConfig(t, store, syncRate), "5s"))
	base, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	app := metadata.AppendToOutgoingContext(base, "authorization", "Bearer "+resetAppToken)
	ops := metadata.AppendToOutgoingContext(base, "authorization", "Bearer "+resetOpsToken)
	key := harness.UniqueName("reset-bucket")
	period := time.Duration(syncRate * float64(time.Second))
	// One tick of each node (push, then read), each within tick_timeout
	// (1 s): a loaded test host's store calls may take most of it.
	settle := 2*period + time.Second
	const limit = 3
	token := &limiterv1.Limit{Kind: &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: limit, RefillTime: durationpb.New(time.Hour)}}}
	allow := func(i int) bool {
		t.Helper()
		resp, err := nodes[i].Client.Allow(app, &limiterv1.AllowRequest{Namespace: "api", Key: key, Limits: []*limiterv1.Limit{token}})
		if err != nil {
			t.Fatalf("Allow at node %d: %v", i, err)
		}
		return resp.GetAllowed()
	}
	reset := func(ctx context.Context, i int, req *limiterv1.ResetRequest) error {
		t.Helper()
		req.Namespace, req.Key = "api", key
		_, err := nodes[i].Client.Reset(ctx, req)
		return err
	}
	buckets := func() *limiterv1.ResetRequest { return &limiterv1.ResetRequest{Buckets: []*limiterv1.Limit{token}} }
	// eventually polls f at node i until it holds, within a sync period
	// and a tick of since.
	eventually := func(what string, i int, since time.Time, f func(int) bool) {
		t.Helper()
		for !f(i) {
			if time.Since(since) > period+time.Second {
				t.Fatalf("node %d: %s still fails %s after the reset (sync period %s, a tick within 1 s)", i, what, time.Since(since), period)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Logf("node %d: %s %s after the reset (sync period %s)", i, what, time.Since(since).Round(time.Millisecond), period)
	}
	fill := func(when string) {
		t.Helper()
		for i := range limit {
			if !allow(i % len(nodes)) {
				t.Fatalf("%s: take %d of %d at node %d refused", when, i+1, limit, i%len(nodes))
			}
		}
		time.Sleep(settle)
		for i := range nodes {
			if allow(i) {
				t.Fatalf("%s: node %d admits a take of a bucket at its limit", when, i)
			}
		}
	}
	fill("before the reset")
	if err := reset(app, 0, buckets()); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Reset of a bucket without the admin grant: %v, want PermissionDenied", err)
	}
	time.Sleep(settle)
	if allow(1) {
		t.Fatal("a refused reset reset the bucket")
	}
	if err := reset(ops, 0, buckets()); err != nil {
		t.Fatalf("Reset of a bucket: %v", err)
	}
	done := time.Now()
	if !allow(0) {
		t.Fatal("the node that took the reset refuses the bucket right after it")
	}
	for _, i := range []int{1, 2} {
		eventually("a take of the bucket", i, done, allow)
	}
	time.Sleep(settle)
	for i := range nodes {
		if allow(i) {
			t.Errorf("node %d admits a fourth take after the reset", i)
		}
	}
	for range 2 {
		if err := reset(ops, 2, buckets()); err != nil {
			t.Fatalf("Reset of a bucket again: %v", err)
		}
	}
	time.Sleep(settle)
	fill("after the second reset")

	// Leases: two of two held, at nodes 0 and 1.
	acquire := func(i int) (string, bool) {
		t.Helper()
		resp, err := nodes[i].Client.Acquire(app, &limiterv1.AcquireRequest{Namespace: "api", Key: key, Limit: 2, Ttl: durationpb.New(time.Minute)})
		if err != nil {
			t.Fatalf("Acquire at node %d: %v", i, err)
		}
		return resp.GetLease(), resp.GetAcquired()
	}
	granted := func(i int) bool { _, ok := acquire(i); return ok }
	fillLeases := func(when string) []string {
		t.Helper()
		var held []string
		for _, i := range []int{0, 1} {
			l, ok := acquire(i)
			if !ok {
				t.Fatalf("%s: a lease of 2 at node %d refused", when, i)
			}
			held = append(held, l)
		}
		time.Sleep(settle)
		if granted(2) {
			t.Fatalf("%s: node 2 grants a third lease of 2", when)
		}
		return held
	}
	held := fillLeases("before the reset")
	if err := reset(app, 2, &limiterv1.ResetRequest{Leases: true}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Reset of leases without the admin grant: %v, want PermissionDenied", err)
	}
	if err := reset(ops, 0, &limiterv1.ResetRequest{Leases: true}); err != nil {
		t.Fatalf("Reset of leases: %v", err)
	}
	done = time.Now()
	eventually("an Acquire", 2, done, granted)
	// At node 2, which granted neither: the store answers (the node
	// that granted one drops it at its next tick).
	for _, l := range held {
		resp, err := nodes[2].Client.Release(app, &limiterv1.ReleaseRequest{Lease: l})
		if err != nil || resp.GetReleased() {
			t.Errorf("Release of a lease the reset freed: %v, %v; want not released", resp, err)
		}
	}
	for range 2 {
		if err := reset(ops, 1, &limiterv1.ResetRequest{Leases: true}); err != nil {
			t.Fatalf("Reset of leases again: %v", err)
		}
	}
	time.Sleep(settle)
	fillLeases("after the second reset")
}

func TestRedisResetBucketsAndLeases(t *testing.T) {
	r := harness.SharedRedis(t)
	for _, s := range []float64{0, 0.1} {
		t.Run(fmt.Sprint("sync_rate=", s), func(t *testing.T) {
			checkResetBucketsAndLeases(t, redisStore(r.Addr(), harness.UniqueName("reset")), s)
		})
	}
}

func TestPostgresResetBucketsAndLeases(t *testing.T) {
	pg := harness.SharedPostgres(t)
	for _, s := range []float64{0, 0.1} {
		t.Run(fmt.Sprint("sync_rate=", s), func(t *testing.T) {
			checkResetBucketsAndLeases(t, postgresStore(pg.DSN()), s)
		})
	}
}

func TestCassandraResetBucketsAndLeases(t *testing.T) {
	c := harness.SharedCassandra(t)
	checkResetBucketsAndLeases(t, cassandraStore(c, keyspace("resetb")), 0.1)
}
