package redis_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/strategy/strategytest"
	clustersync "github.com/limiterd/limiterd/sync"
)

// clusterPort returns a free port whose cluster bus port (+10000) is free too.
func clusterPort(tb testing.TB) int {
	tb.Helper()
	for range 100 {
		p := harness.FreePort(tb)
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		if err == nil {
			l.Close()
			return p
		}
	}
	tb.Fatal("no free port pair for a cluster node")
	return 0
}

// startCluster starts a Redis Cluster of three masters and returns their
// addresses.
func startCluster(tb testing.TB) []string {
	tb.Helper()
	cli := requireBinary(tb, "redis-cli")
	var addrs []string
	for range 3 {
		p := clusterPort(tb)
		s := startServerOn(tb, p, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
		addrs = append(addrs, s.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				tb.Fatalf("cluster node %s not ready: %v %q", a, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return addrs
}

// TestCluster runs every operation on a real three-master Redis Cluster:
// scripts touch only keys of one slot (else CROSSSLOT), and keys spread.
func TestCluster(t *testing.T) {
	addrs := startCluster(t)
	s, _ := newStoreAt(t, addrs...)
	ctx := ctxT(t)
	_, cursor, _, err := s.Changes(ctx, "z", "api", "", 0, nil)
	if err != nil {
		t.Fatalf("Changes from no cursor: %v", err)
	}
	const nKeys = 1500
	var rows []clustersync.Row
	for i := range nKeys {
		for _, size := range []time.Duration{time.Second, time.Minute} {
			rows = append(rows, row(wk("api", fmt.Sprint("user-", i), size, 0), int64(i), 1))
		}
	}
	mustPush(t, s, "a", rows...)
	keys := make([]clustersync.WindowKey, len(rows))
	for i := range rows {
		keys[i] = rows[i].WindowKey
	}
	got := fetch(t, s, "b", keys...)
	for i := range got {
		if got[i] != rows[i].Total {
			t.Fatalf("Fetch[%d] = %d, want %d", i, got[i], rows[i].Total)
		}
	}
	for _, a := range addrs {
		c := rawClient(t, a)
		n, err := c.DBSize(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		// 2 windows × 64 buckets = 128 hashes over 3 nodes.
		if n < 128/3/2 {
			t.Errorf("node %s holds %d of 128 hashes: keys do not spread", a, n)
		}
	}
	// PushFetch over windows of different keys (different slots).
	others := make([]int64, 3)
	pf := []clustersync.Row{row(keys[0], 5, 2), row(keys[1], 5, 2), row(keys[500], 5, 2)}
	if err := s.PushFetch(ctx, "b", pf, others); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(others) != "[0 0 250]" {
		t.Errorf("PushFetch others = %v, want [0 0 250]", others)
	}
	// Allow over two sizes of one key: one script, one slot.
	const m = ratelimit.Micro
	at := int64(30 * time.Second)
	req := strategytest.OneAllow{Inc: "c", At: at, Cost: m, Limits: []strategytest.OneLimit{
		allowLimit("api", "user-7", time.Second, 10*m, ratelimit.WindowStart(at, time.Second), 0, 0, 1),
		allowLimit("api", "user-7", time.Minute, 10*m, 0, 0, 0, 1),
	}}
	mustPush(t, s, "a", row(req.Limits[1].Cur.WindowKey, 9*m, 2))
	res, err := strategytest.AllowOne(ctx, s, req)
	if err != nil || !res.Allowed {
		t.Fatalf("Allow = %+v, %v; want allowed", res, err)
	}
	// The caller now holds one hit of its own in both windows.
	for i := range req.Limits {
		req.Limits[i].Cur.Total, req.Limits[i].Cur.Version = m, 2
		req.Limits[i].Prev.Version = 2
	}
	if res, err = strategytest.AllowOne(ctx, s, req); err != nil || res.Allowed {
		t.Fatalf("second Allow = %+v, %v; want denied", res, err)
	}
	if n := window(t, s, req.Limits[1].Cur.WindowKey); n != 10*m {
		t.Errorf("Window(minute) = %d, want %d", n, 10*m)
	}
	// The change logs, one per bucket, read in pages across the slots.
	seen := map[clustersync.WindowKey]int64{}
	for more := true; more; {
		var changes []clustersync.Change
		changes, cursor, more, err = s.Changes(ctx, "z", "api", cursor, 1000, nil)
		if err != nil {
			t.Fatalf("Changes: %v", err)
		}
		for _, c := range changes {
			seen[c.WindowKey] = c.Others
		}
	}
	// The pushes' windows, and three new ones of the Allow: both windows
	// of one second, the previous minute.
	if len(seen) != 2*nKeys+3 {
		t.Errorf("Changes read %d windows, want %d", len(seen), 2*nKeys+3)
	}
	if got := seen[keys[500]]; got != 255 {
		t.Errorf("Changes: window %v others = %d, want 255", keys[500], got)
	}
	if got := seen[req.Limits[1].Cur.WindowKey]; got != 10*m {
		t.Errorf("Changes: allow's window others = %d, want %d", got, 10*m)
	}
	// Buckets of all three kinds of one key: one script, one slot.
	bs := []clustersync.BucketCall{
		{Namespace: "api", Bucket: tokenBucket("user-7", 2*m, time.Hour, 2*m, false), Life: 1, Version: 1},
		{Namespace: "api", Bucket: leakyBucket("user-7", 2*m, time.Hour), Life: 1, Version: 1},
		{Namespace: "api", Bucket: fixedBucket("user-7", time.Hour, 2*m), Life: 1, Version: 1},
	}
	replies := make([]clustersync.BucketReply, len(bs))
	if ok, err := s.Buckets(ctx, "c", at, m, bs, replies); err != nil || !ok {
		t.Fatalf("Buckets = %v, %v; want allowed", ok, err)
	}
	for i := range replies {
		if replies[i].Applied != m {
			t.Errorf("Buckets: bucket %d applied %d, want %d", i, replies[i].Applied, m)
		}
	}
	// Leases of 20 keys (in several slots) in one call, then of one key.
	now := time.Now().UnixNano()
	exp := now + int64(time.Minute)
	var lops []clustersync.LeaseOp
	for i := range 20 {
		for _, id := range []string{"a", "b"} {
			lops = append(lops, clustersync.LeaseOp{Kind: clustersync.LeaseAcquire, Namespace: "api", Key: fmt.Sprint("user-", i), ID: id, Limit: 1, Expiry: exp})
		}
	}
	lr := make([]clustersync.LeaseReply, len(lops))
	if err := s.Leases(ctx, now, lops, lr); err != nil {
		t.Fatalf("Leases of 20 keys: %v", err)
	}
	for i, r := range lr {
		if want := (clustersync.LeaseReply{OK: i%2 == 0, Held: 1, Next: exp}); r != want {
			t.Errorf("Leases of 20 keys: op %d (%s of %s): %+v, want %+v", i, lops[i].ID, lops[i].Key, r, want)
		}
	}
	lops = []clustersync.LeaseOp{
		{Kind: clustersync.LeaseRelease, Namespace: "api", Key: "user-7", ID: "a", Expiry: exp},
		{Kind: clustersync.LeaseAcquire, Namespace: "api", Key: "user-7", ID: "b", Limit: 1, Expiry: exp},
	}
	lr = lr[:2]
	if err := s.Leases(ctx, now, lops, lr); err != nil || !lr[0].OK || !lr[1].OK || lr[1].Held != 1 {
		t.Errorf("Leases of one key: %+v, %v; want a released, b acquired", lr, err)
	}
	// Every call went straight to the shard of its keys: no node answered
	// MOVED (which the client would have followed, at a round trip each).
	for _, a := range addrs {
		info, err := rawClient(t, a).Info(ctx, "errorstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, "errorstat_MOVED") {
			t.Errorf("node %s redirected calls: %s", a, strings.TrimSpace(info))
		}
	}
}
