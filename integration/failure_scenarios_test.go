//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
)

// checkExact fails unless the store holds exactly the acknowledged hits
// of every key.
func checkExact(t *testing.T, l *harness.Load, stored []int64) {
	t.Helper()
	acked := l.Counts()
	if !slices.Equal(stored, acked) {
		t.Errorf("%s: store holds %v hits per key (total %d), acknowledged %v (total %d): want exactly the acknowledged ones",
			l.Namespace, stored, sum(stored), acked, sum(acked))
	}
}

// pushed reads how many rows node pushed for namespace so far.
func pushed(t *testing.T, n *harness.Limiterd, namespace string) float64 {
	v, _ := metric(t, n, fmt.Sprintf(`limiterd_sync_rows_pushed_total{limiter_namespace=%q}`, namespace))
	return v
}

// testKillRestart kills one of three nodes under load (SIGKILL) and
// restarts it: the hits lost are at most what the killed node
// acknowledged since its last push began — one sync period plus one tick
// — and what its previous incarnation pushed still counts.
func testKillRestart(t *testing.T, st *failStore) {
	nodes := harness.Cluster(t, 3, failConfig(st, st.addr))
	at := time.Now()
	keys := scenarioKeys("kill", 4)
	l := startFailLoad(nodes, "api", keys, at, 6)
	defer l.End()
	victim := nodes[1]
	waitUntil(t, "node-1 syncs", storeWait, func() bool {
		_, ok := trySync(t, victim, "api")
		return ok
	})
	// The first ticks include connecting to the store: measure the ticks
	// of the last sync periods before the kill only.
	warm := scrapeSync(t, victim, "api")
	warmAt := time.Now()
	// Ten sync periods of load and five ticks measured, and enough pushed
	// hits to tell from the lost ones: the last period and two ticks hold
	// at most a quarter of node-1's hits.
	waitUntil(t, "node-1 acknowledges hits and pushes them", 30*time.Second, func() bool {
		recent := scrapeSync(t, victim, "api").ticks.since(warm.ticks)
		if time.Since(warmAt) < 10*failSyncRate || recent.count() < 5 {
			return false
		}
		return l.AcksSince(1, at) >= 4*l.AcksSince(1, time.Now().Add(-failSyncRate-2*recent.max()))
	})
	last := scrapeSync(t, victim, "api")
	killAt := time.Now()
	victim.Kill()
	killed := time.Now()
	// What node-1 counted after its last successful push began is lost:
	// at most what it acknowledged since then. That push began at most
	// one tick before the tick ended (lastSuccess).
	d := last.ticks.since(warm.ticks).max()
	from := last.lastSuccess.Add(-d)
	window := killAt.Sub(from)
	bound := l.AcksSince(1, from)
	// Ticks begin every max(period, tick): the last successful one began
	// at most max(period, tick) + tick before the kill, give or take the
	// scheduling of a loaded test machine.
	if limit := max(failSyncRate, d) + d + 250*time.Millisecond; window > limit {
		t.Errorf("node-1's last successful push began %v before the kill; want at most one sync period and tick (%v, slowest tick %v)", window, limit, d)
	}
	before := l.AcksSince(1, at)
	unknown := l.FailedBefore(1, killed)
	if victim.Running() {
		t.Fatal("node-1 survived SIGKILL")
	}

	restarted := time.Now()
	victim.Start()
	waitUntil(t, "the restarted node-1 acknowledges hits", storeWait, func() bool {
		return l.AcksSince(1, restarted) >= 100
	})
	l.End()
	acked := l.Total()
	stored, took := settle(t, st, nodes, "api", keys, at, storeWait)
	lost := acked - sum(stored)
	switch {
	case lost > bound:
		t.Errorf("lost %d hits: more than node-1 acknowledged since its last successful push began (%v before the kill): %d", lost, window, bound)
	case lost < -unknown:
		t.Errorf("the store holds %d hits more than were acknowledged; only %d calls had an unknown outcome", -lost, unknown)
	}
	if bound*2 > before {
		t.Errorf("node-1 acknowledged %d hits since its last successful push, %d in all before the kill: too little load before the kill to tell pushed hits from lost ones", bound, before)
	}
	report(t, "acked %d; stored %d; lost %d (bound %d = node-1's acks since its last successful push began, %v before the kill; period %v, slowest tick %v; node-1 acked %d before the kill, %d calls of unknown outcome); converged %.2fs after the load; failed calls: %s",
		acked, sum(stored), lost, bound, window.Round(time.Millisecond), failSyncRate, d, before, unknown, took.Seconds(), l.Failures())
}

// testRollingRestart stops (SIGTERM) and restarts each of three nodes in
// turn under load on a periodic and a synchronous namespace: every
// acknowledged hit is stored, exactly once.
func testRollingRestart(t *testing.T, st *failStore) {
	nodes := harness.Cluster(t, 3, failConfig(st, st.addr))
	at := time.Now()
	keys, dkeys := scenarioKeys("rolling", 4), scenarioKeys("rolling-direct", 2)
	l := startFailLoad(nodes, "api", keys, at, 4)
	defer l.End()
	dl := startDirectLoad(st, nodes, dkeys, at, 2)
	defer dl.End()
	waitUntil(t, "every node acknowledges hits", storeWait, func() bool {
		return l.AcksSince(0, at) > 50 && l.AcksSince(1, at) > 50 && l.AcksSince(2, at) > 50
	})
	began := time.Now()
	for i, n := range nodes {
		n.Stop()
		restarted := time.Now()
		n.Start()
		waitUntil(t, fmt.Sprintf("the restarted %s acknowledges hits", n.Name), storeWait, func() bool {
			return l.AcksSince(i, restarted) >= 50
		})
	}
	rolled := time.Since(began)
	l.End()
	dl.End()
	stored, took := settle(t, st, nodes, "api", keys, at, storeWait)
	checkExact(t, l, stored)
	dstored := dl.settle(t, st, nodes, dkeys, at, storeWait)
	report(t, "periodic: acked %d, stored %d; synchronous: acked %d, stored %d; rolling restart took %.1fs; converged %.2fs after the load; failed calls: %s / %s",
		l.Total(), sum(stored), dl.Total(), sum(dstored), rolled.Seconds(), took.Seconds(), l.Failures(), dl.Failures())
}

// outageLength is how long the store is down: many sync periods and
// longer than a tick's time-out.
const outageLength = 3 * time.Second

// testStoreOutage stops the store under load for many sync periods:
// every call is answered (a synchronous one within its call time-out),
// no node crashes or grows its goroutines or heap without bound, and
// afterwards the store holds every acknowledged hit exactly once.
func testStoreOutage(t *testing.T, st *failStore) {
	addr, stop, start := st.addr, st.stop, st.start
	how := "server stopped"
	if stop == nil {
		p := harness.StartProxy(t, st.addr)
		addr, stop, start = p.Addr(), p.Drop, p.Heal
		how = "every connection dropped by a proxy"
	}
	nodes := harness.Cluster(t, 3, failConfig(st, addr))
	at := time.Now()
	keys, dkeys := scenarioKeys("outage", 4), scenarioKeys("outage-direct", 2)
	l := startFailLoad(nodes, "api", keys, at, 4)
	defer l.End()
	// One synchronous caller: a call waits for the store at most
	// call_timeout, but also for a call on the same key ahead of it.
	dl := startDirectLoad(st, nodes, dkeys, at, 1)
	defer dl.End()
	waitUntil(t, "every node pushes", storeWait, func() bool {
		return pushed(t, nodes[0], "api") >= 4 && pushed(t, nodes[1], "api") >= 4 && pushed(t, nodes[2], "api") >= 4
	})
	before := make([]usage, len(nodes))
	for i, n := range nodes {
		before[i] = measure(t, n)
	}
	stopped := time.Now()
	stop()
	late, lateReady := startLate(t, st, addr, "outage-late", at)
	during := make([]usage, len(nodes))
	for i, n := range nodes {
		during[i] = measure(t, n)
	}
	for time.Since(stopped) < outageLength {
		time.Sleep(250 * time.Millisecond)
		for i, n := range nodes {
			during[i] = maxUsage(during[i], measure(t, n))
		}
	}
	outageAcks := l.AcksSince(0, stopped) + l.AcksSince(1, stopped) + l.AcksSince(2, stopped)
	slowest := dl.Slowest()
	start()
	healed := time.Now()
	l.End()
	dl.End()
	for _, n := range nodes {
		if !n.Running() {
			t.Fatalf("%s died during the outage", n.Name)
		}
	}
	if n := l.FailedCount(-1) + dl.FailedCount(-1); n > 0 {
		t.Errorf("%d calls failed during the outage (%s / %s); want every call answered from local counts", n, l.Failures(), dl.Failures())
	}
	if outageAcks == 0 {
		t.Error("no hit was acknowledged during the outage")
	}
	// A synchronous call waits for the store at most call_timeout; the
	// rest is the call's own work on a loaded test machine. Without the
	// bound it would wait for the store client's own time-outs (3–5 s).
	if limit := failCallTimeout + 1200*time.Millisecond; slowest > limit {
		t.Errorf("slowest synchronous call took %v, want under %v (call_timeout %v)", slowest, limit, failCallTimeout)
	}
	stored, _ := settle(t, st, nodes, "api", keys, at, 30*time.Second)
	checkExact(t, l, stored)
	dstored := dl.settle(t, st, nodes, dkeys, at, 30*time.Second)
	checkLate(t, st, append(slices.Clone(nodes), late), "outage-late", at)
	caughtUp := time.Since(healed)
	for i, n := range nodes {
		if during[i].goroutines > before[i].goroutines+50 || during[i].heapMiB > before[i].heapMiB+64 {
			t.Errorf("%s grew during the outage: before %v, at most %v during", n.Name, before[i], during[i])
		}
		after := usageBack(t, n, before[i])
		report(t, "%s: before %v; outage (%s, %v) max %v; after %v", n.Name, before[i], how, outageLength, during[i], after)
	}
	report(t, "periodic: acked %d (%d during the outage), stored %d; synchronous: acked %d, stored %d, slowest call %v (call_timeout %v); caught up %.2fs after the store returned; a node started during the outage was ready in %.2fs and its hits were stored",
		l.Total(), outageAcks, sum(stored), dl.Total(), sum(dstored), slowest.Round(time.Millisecond), failCallTimeout, caughtUp.Seconds(), lateReady.Seconds())
}

// partitionLength is how long one node is cut off from the store.
const partitionLength = 2 * time.Second

// testPartition cuts one node off the store through a proxy under load:
// it keeps answering every call, and after the cut heals every node and
// the store agree on the exact count.
func testPartition(t *testing.T, st *failStore) {
	p := harness.StartProxy(t, st.addr)
	nodes := []*harness.Limiterd{
		harness.StartLimiterd(t, "node-0", failConfig(st, p.Addr())),
		harness.StartLimiterd(t, "node-1", failConfig(st, st.addr)),
		harness.StartLimiterd(t, "node-2", failConfig(st, st.addr)),
	}
	at := time.Now()
	keys, dkeys := scenarioKeys("partition", 4), scenarioKeys("partition-direct", 2)
	l := startFailLoad(nodes, "api", keys, at, 4)
	defer l.End()
	dl := startDirectLoad(st, nodes, dkeys, at, 1) // one caller: see testStoreOutage
	defer dl.End()
	waitUntil(t, "node-0 pushes through the proxy", storeWait, func() bool {
		return pushed(t, nodes[0], "api") >= 4
	})
	errsBefore, _ := metric(t, nodes[0], `limiterd_sync_push_errors_total{limiter_namespace="api"}`)
	before := measure(t, nodes[0])
	cut := time.Now()
	p.Cut()
	late, lateReady := startLate(t, st, p.Addr(), "partition-late", at)
	during := measure(t, nodes[0])
	for time.Since(cut) < partitionLength {
		time.Sleep(250 * time.Millisecond)
		during = maxUsage(during, measure(t, nodes[0]))
	}
	duringAcks := l.AcksSince(0, cut)
	errsDuring, _ := metric(t, nodes[0], `limiterd_sync_push_errors_total{limiter_namespace="api"}`)
	slowest := dl.Slowest()
	l.End()
	dl.End()
	healed := time.Now()
	p.Heal()
	stored, took := settle(t, st, nodes, "api", keys, at, 30*time.Second)
	checkExact(t, l, stored)
	dstored := dl.settle(t, st, nodes, dkeys, at, 30*time.Second)
	checkLate(t, st, append(slices.Clone(nodes), late), "partition-late", at)
	caughtUp := time.Since(healed)
	if during.goroutines > before.goroutines+50 || during.heapMiB > before.heapMiB+64 {
		t.Errorf("node-0 grew during the partition: before %v, at most %v during", before, during)
	}
	after := usageBack(t, nodes[0], before)
	if n := l.FailedCount(-1) + dl.FailedCount(-1); n > 0 {
		t.Errorf("%d calls failed (%s / %s); want the partitioned node to answer every call", n, l.Failures(), dl.Failures())
	}
	if duringAcks == 0 {
		t.Error("node-0 acknowledged no hit during the partition")
	}
	if errsDuring <= errsBefore {
		t.Errorf("node-0's failed pushes went from %v to %v during the partition: the cut did not reach it", errsBefore, errsDuring)
	}
	if limit := failCallTimeout + 1200*time.Millisecond; slowest > limit {
		t.Errorf("slowest synchronous call took %v, want under %v (call_timeout %v)", slowest, limit, failCallTimeout)
	}
	report(t, "node-0: before %v; partition max %v; after %v; a node started behind the cut was ready in %.2fs and its hits were stored after the heal", before, during, after, lateReady.Seconds())
	report(t, "node-0 cut off for %v: acked %d hits meanwhile, failed pushes %v; periodic acked %d, stored %d; synchronous acked %d, stored %d, slowest call %v; caught up %.2fs after the heal (periodic settled in %.2fs)",
		partitionLength, duringAcks, errsDuring-errsBefore, l.Total(), sum(stored), dl.Total(), sum(dstored), slowest.Round(time.Millisecond), caughtUp.Seconds(), took.Seconds())

	// A node stopped while cut off gives up its final push after
	// shutdown_timeout (its unpushed hits are lost: they are nowhere
	// else) and exits.
	p.Cut()
	for _, ns := range st.namespaces() {
		if _, err := nodes[0].Client.Increment(context.Background(), &limiterv1.IncrementRequest{
			Namespace: ns, Key: "partition-stop", At: timestamppb.New(at)}); err != nil {
			t.Fatalf("node-0, cut off: Increment: %v", err)
		}
	}
	stopping := time.Now()
	nodes[0].Stop()
	stopTook := time.Since(stopping)
	// The default shutdown_timeout (5 s) bounds the final push; the rest
	// is closing the store's connections.
	if limit := 5*time.Second + 3*time.Second; stopTook > limit {
		t.Errorf("node-0, cut off from the store, took %v to stop on SIGTERM; want under %v", stopTook, limit)
	}
	report(t, "node-0 stopped (SIGTERM) while cut off in %.2fs", stopTook.Seconds())
	p.Heal()
}

// usageBack waits until n runs at most 20 goroutines more than before (the
// calls and dials of a failure have ended) and returns its usage then; it
// fails the test when that does not happen within 10 s.
func usageBack(t *testing.T, n *harness.Limiterd, before usage) usage {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		u := measure(t, n)
		if u.goroutines <= before.goroutines+20 {
			return u
		}
		if time.Now().After(deadline) {
			t.Errorf("%s kept goroutines after the failure ended: before %v, after %v", n.Name, before, u)
			return u
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startLate starts node-3 reaching the store at addr while the store is
// out of reach, and counts 15 hits of key in the periodic namespace and 5
// in the synchronous one there. It returns the node and how long it took
// to become ready.
func startLate(t *testing.T, st *failStore, addr, key string, at time.Time) (*harness.Limiterd, time.Duration) {
	t.Helper()
	began := time.Now()
	late := harness.StartLimiterd(t, "node-3", failConfig(st, addr))
	ready := time.Since(began)
	for i := range 20 {
		ns := "api"
		if i%4 == 0 && st.decides {
			ns = "direct"
		}
		if _, err := late.Client.Increment(context.Background(), &limiterv1.IncrementRequest{
			Namespace: ns, Key: key, At: timestamppb.New(at)}); err != nil {
			t.Fatalf("node-3, started while the store is out of reach: Increment: %v", err)
		}
	}
	return late, ready
}

// checkLate waits until nodes and the store agree on key and checks that
// the store holds startLate's hits.
func checkLate(t *testing.T, st *failStore, nodes []*harness.Limiterd, key string, at time.Time) {
	t.Helper()
	periodic := 20
	if st.decides {
		periodic = 15
		if got, _ := settle(t, st, nodes, "direct", []string{key}, at, 30*time.Second); got[0] != 5 {
			t.Errorf("node-3's 5 synchronous hits while the store was out of reach: the store holds %d", got[0])
		}
	}
	if got, _ := settle(t, st, nodes, "api", []string{key}, at, 30*time.Second); got[0] != int64(periodic) {
		t.Errorf("node-3's %d periodic hits while the store was out of reach: the store holds %d", periodic, got[0])
	}
}

// directLoad is the load of the synchronous namespace "direct": with no
// load (nil) on a store that does not serve it, every method is a no-op
// reporting nothing.
type directLoad struct{ *harness.Load }

// startDirectLoad starts the synchronous namespace's load on a store that
// serves it.
func startDirectLoad(st *failStore, nodes []*harness.Limiterd, keys []string, at time.Time, workers int) directLoad {
	if !st.decides {
		return directLoad{}
	}
	return directLoad{startFailLoad(nodes, "direct", keys, at, workers)}
}

func (d directLoad) End() {
	if d.Load != nil {
		d.Load.End()
	}
}

func (d directLoad) Total() int64 {
	if d.Load == nil {
		return 0
	}
	return d.Load.Total()
}

func (d directLoad) Slowest() time.Duration {
	if d.Load == nil {
		return 0
	}
	return d.Load.Slowest()
}

func (d directLoad) FailedCount(skip int) int {
	if d.Load == nil {
		return 0
	}
	return d.Load.FailedCount(skip)
}

func (d directLoad) Failures() string {
	if d.Load == nil {
		return "none (no synchronous namespace)"
	}
	return d.Load.Failures()
}

// settle waits until the store holds keys' totals and checks them
// against what the load acknowledged.
func (d directLoad) settle(t *testing.T, st *failStore, nodes []*harness.Limiterd, keys []string, at time.Time, timeout time.Duration) []int64 {
	t.Helper()
	if d.Load == nil {
		return nil
	}
	stored, _ := settle(t, st, nodes, "direct", keys, at, timeout)
	checkExact(t, d.Load, stored)
	return stored
}

// namespaces are the namespaces failConfig gives st's nodes.
func (st *failStore) namespaces() []string {
	if st.decides {
		return []string{"api", "direct"}
	}
	return []string{"api"}
}
