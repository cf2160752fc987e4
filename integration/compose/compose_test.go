//go:build compose

// Package compose runs docker-compose.yml for real: three limiterd
// containers and a store per profile, on a Docker engine, with faults
// injected by Docker itself (docker kill, docker network disconnect,
// docker-compose restart). The images come from scripts/images.sh;
// scripts/test.sh and `make compose-test` build them and start the engine.
//
//	go test -tags compose -count=1 -timeout 1200s -v ./integration/compose/
//
// Without a Docker engine, docker-compose or the images the tests skip,
// except under CI=true, where they fail.
package compose

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/integration/harness"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

// What deploy/*.yaml configures, which the bounds below follow.
const (
	// periodic is a namespace with sync_rate > 0, strict one with 0 (on
	// the stores that decide atomically).
	periodic = "default"
	strict   = "strict"
	// window is the window size the tests count in: every hit of a test
	// carries one timestamp, so a window holds all of them.
	window = time.Hour
)

// syncRate is each profile's periodic sync period (deploy/<profile>.yaml).
var syncRate = map[string]time.Duration{
	"redis":     100 * time.Millisecond,
	"postgres":  100 * time.Millisecond,
	"cassandra": 500 * time.Millisecond,
}

func inCI() bool { return os.Getenv("CI") == "true" }

// unavailable skips, or fails under CI=true.
func unavailable(t *testing.T, format string, args ...any) {
	t.Helper()
	if inCI() {
		t.Fatalf("CI=true: "+format, args...)
	}
	t.Skipf(format, args...)
}

// repoRoot is the directory of docker-compose.yml.
func repoRoot(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if _, err := os.Stat(filepath.Join(root, "docker-compose.yml")); err != nil {
		t.Fatal(err)
	}
	return root
}

// run runs a command bounded by timeout and returns its trimmed output
// (stdout and stderr).
func run(timeout time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return strings.TrimSpace(out.String()), err
}

// cluster is one compose project: a store and three nodes.
type cluster struct {
	t       *testing.T
	profile string
	project string
	root    string
	nodes   []*node
	window  interface {
		Window(ctx context.Context, key clustersync.WindowKey) (int64, error)
	}
}

type node struct {
	index   int
	service string // e.g. redis-limiterd-2
	http    string // published HTTP address
	client  limiterv1.RateLimiterClient
}

// up starts profile's services and waits until every one is healthy; the
// project is taken down when the test ends, its logs shown if it failed.
func up(t *testing.T, profile string) *cluster {
	t.Helper()
	for _, bin := range []string{"docker", "docker-compose"} {
		if _, err := exec.LookPath(bin); err != nil {
			unavailable(t, "%s is not installed (Debian: apt-get install docker.io docker-compose)", bin)
		}
	}
	if _, err := run(10*time.Second, nil, "docker", "info"); err != nil {
		unavailable(t, "no Docker engine answers: %v", err)
	}
	store := map[string]string{"redis": "limiterd-redis:local", "postgres": "limiterd-postgres:local", "cassandra": "limiterd-cassandra:local"}[profile]
	for _, image := range []string{"limiterd:local", store} {
		if _, err := run(10*time.Second, nil, "docker", "image", "inspect", image); err != nil {
			unavailable(t, "image %s is missing: bash scripts/images.sh builds it", image)
		}
	}
	c := &cluster{t: t, profile: profile, root: repoRoot(t),
		project: fmt.Sprintf("limiterdtest%s%d", profile, os.Getpid())}
	began := time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := c.compose(time.Minute, "logs", "--no-color", "--tail", "60")
			t.Logf("docker-compose logs:\n%s", logs)
		}
		stopped := time.Now()
		// Nothing of the project is kept: no graceful stop needed.
		c.compose(time.Minute, "kill")
		if out, err := c.compose(3*time.Minute, "down", "-t", "20", "-v", "--remove-orphans"); err != nil {
			t.Errorf("docker-compose down: %v\n%s", err, out)
		}
		t.Logf("timing: %s down in %.1f s", profile, time.Since(stopped).Seconds())
	})
	if out, err := c.compose(5*time.Minute, "up", "-d", "--no-build"); err != nil {
		t.Fatalf("docker-compose up: %v\n%s", err, out)
	}
	for i := 1; i <= 3; i++ {
		n := &node{index: i, service: fmt.Sprintf("%s-limiterd-%d", profile, i),
			http: fmt.Sprintf("127.0.0.1:70%d1", i)}
		conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:70%d0", i), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		n.client = limiterv1.NewRateLimiterClient(conn)
		c.nodes = append(c.nodes, n)
	}
	// Cassandra takes a minute or two to start on a loaded machine.
	for _, svc := range append([]string{profile}, c.services()...) {
		c.waitHealthy(svc, 5*time.Minute)
	}
	t.Logf("timing: %s up and healthy in %.1f s", profile, time.Since(began).Seconds())
	c.openStore()
	return c
}

func (c *cluster) services() []string {
	var s []string
	for _, n := range c.nodes {
		s = append(s, n.service)
	}
	return s
}

func (c *cluster) compose(timeout time.Duration, args ...string) (string, error) {
	args = append([]string{"-p", c.project, "-f", filepath.Join(c.root, "docker-compose.yml")}, args...)
	return run(timeout, []string{"COMPOSE_PROFILES=" + c.profile}, "docker-compose", args...)
}

func (c *cluster) mustCompose(timeout time.Duration, args ...string) {
	c.t.Helper()
	if out, err := c.compose(timeout, args...); err != nil {
		c.t.Fatalf("%v\n%s", err, out)
	}
}

func (c *cluster) docker(args ...string) string {
	c.t.Helper()
	out, err := run(time.Minute, nil, "docker", args...)
	if err != nil {
		c.t.Fatal(err)
	}
	return out
}

// container is the id of service's container.
func (c *cluster) container(service string) string {
	c.t.Helper()
	out, err := c.compose(time.Minute, "ps", "-q", service)
	if err != nil || out == "" {
		c.t.Fatalf("no container for %s: %v %s", service, err, out)
	}
	return out
}

func (c *cluster) network(name string) string { return c.project + "_" + name }

// waitHealthy waits for service's health check to pass.
func (c *cluster) waitHealthy(service string, timeout time.Duration) {
	c.t.Helper()
	id := c.container(service)
	deadline := time.Now().Add(timeout)
	for {
		st, err := run(10*time.Second, nil, "docker", "inspect", "-f", "{{.State.Status}} {{.State.Health.Status}}", id)
		if err == nil && st == "running healthy" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s not healthy after %v: %s %v", service, timeout, st, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// storeAddr is the store container's address on the store network, which
// this host reaches over Docker's bridge.
func (c *cluster) storeAddr(port int) string {
	c.t.Helper()
	ip := c.docker("inspect", "-f", fmt.Sprintf(`{{(index .NetworkSettings.Networks %q).IPAddress}}`, c.network("store")), c.container(c.profile))
	return fmt.Sprintf("%s:%d", ip, port)
}

// openStore connects the tests to the store, as the nodes' default config
// (key prefix, table, keyspace) reads it.
func (c *cluster) openStore() {
	t := c.t
	switch c.profile {
	case "redis":
		cfg := redisstore.DefaultConfig()
		cfg.Addrs = []string{c.storeAddr(6379)}
		st, err := redisstore.Open(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		c.window = st
	case "postgres":
		cfg := pgstore.DefaultConfig()
		cfg.DSN = fmt.Sprintf("postgres://postgres:limiterd@%s/limiter?sslmode=disable", c.storeAddr(5432))
		cfg.CreateSchema = false
		st, err := pgstore.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		c.window = st
	case "cassandra":
		host, _, _ := strings.Cut(c.storeAddr(9042), ":")
		cfg := cassandrastore.DefaultConfig()
		cfg.Hosts, cfg.Port = []string{host}, 9042
		var st *cassandrastore.Store
		// The nodes create the keyspace: wait for them to have done so.
		waitUntil(t, "the keyspace exists and the test connects", 2*time.Minute, func() bool {
			var err error
			cfg.CreateSchema = false
			st, err = cassandrastore.Open(cfg)
			return err == nil
		})
		t.Cleanup(func() { st.Close() })
		c.window = st
	}
}

// startLoad starts a harness.Load over the cluster's nodes, named as
// their services (node-1, ...).
func (c *cluster) startLoad(namespace string, keys []string, at time.Time, workers int) *harness.Load {
	clients := make([]limiterv1.RateLimiterClient, len(c.nodes))
	for i, n := range c.nodes {
		clients[i] = n.client
	}
	return harness.StartLoad(clients, 1, namespace, keys, at, workers)
}

// stored reads the store's totals of l's keys, in hits.
func (c *cluster) stored(l *harness.Load) []int64 {
	c.t.Helper()
	out := make([]int64, len(l.Keys))
	for i, key := range l.Keys {
		wk := clustersync.WindowKey{Namespace: l.Namespace, Size: window, Start: l.At.Truncate(window).UnixNano(), Key: key}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := c.window.Window(ctx, wk)
		cancel()
		if err != nil {
			c.t.Fatalf("store Window(%s/%s): %v", l.Namespace, key, err)
		}
		if got%1_000_000 != 0 {
			c.t.Fatalf("store holds %d micro-hits for %s/%s: not a whole number of hits", got, l.Namespace, key)
		}
		out[i] = got / 1_000_000
	}
	return out
}

// converge waits until every node reports, for each key, the count the
// store holds, and returns the stored total and how long that took.
func (c *cluster) converge(l *harness.Load, timeout time.Duration) (int64, time.Duration) {
	c.t.Helper()
	began := time.Now()
	deadline := began.Add(timeout)
	for {
		stored := c.stored(l)
		agreed := true
		var seen []string
		for i, key := range l.Keys {
			for _, n := range c.nodes {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				resp, err := n.client.SlidingWindow(ctx, &limiterv1.SlidingWindowRequest{
					Namespace: l.Namespace, Key: key, WindowSize: durationpb.New(window), At: timestamppb.New(l.At)})
				cancel()
				if err != nil {
					agreed = false
					seen = append(seen, fmt.Sprintf("%s@%d: %v", key, n.index, err))
					continue
				}
				r := resp.GetRates()[0].GetRate()
				if math.Abs(r-float64(stored[i])) > 1e-9 {
					agreed = false
				}
				seen = append(seen, fmt.Sprintf("%s@%d=%v", key, n.index, r))
			}
		}
		if agreed {
			var sum int64
			for _, v := range stored {
				sum += v
			}
			return sum, time.Since(began)
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: nodes and store did not agree within %v: store %v, nodes %v", l.Namespace, timeout, stored, seen)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exact checks that the store holds every acknowledged hit of l, and at
// most the failed calls' (outcome unknown) more, once the nodes agree.
func (c *cluster) exact(l *harness.Load) { c.exactLosing(l, 0) }

// exactLosing is exact with up to mayLose acknowledged hits missing: those
// a killed node answered from local counts and had not pushed yet.
func (c *cluster) exactLosing(l *harness.Load, mayLose int64) {
	c.t.Helper()
	acked := l.Total()
	stored, took := c.converge(l, time.Minute)
	unknown := int64(l.FailedCount(-1))
	if stored < acked-mayLose || stored > acked+unknown {
		c.t.Errorf("%s: acknowledged %d, stored %d (failed calls of unknown outcome: %d, hits that may be lost: %d): want every acknowledged hit stored, once", l.Namespace, acked, stored, unknown, mayLose)
	}
	c.t.Logf("%s: acknowledged %d, stored %d (may lose %d), converged %.2f s after the load; failed calls: %s", l.Namespace, acked, stored, mayLose, took.Seconds(), l.Failures())
}

// fallbackWatch reads a node's count of synchronous calls answered from
// local counts, every 20 ms, until the node stops answering.
type fallbackWatch struct {
	done  chan struct{}
	count int64     // the last count read
	at    time.Time // when that read began: later fallbacks are acked after it
}

// watchFallbacks reads n's count once, or fails the test, then goes on
// reading in the background.
func (c *cluster) watchFallbacks(n *node, namespace string) *fallbackWatch {
	c.t.Helper()
	series := `limiterd_sync_local_fallbacks_total{limiter_namespace="` + namespace + `"} `
	w := &fallbackWatch{done: make(chan struct{})}
	read := func() bool {
		began := time.Now()
		code, text, err := c.httpGet(n, "/metrics")
		if err != nil || code != http.StatusOK {
			return false
		}
		w.count, w.at = 0, began
		for line := range strings.Lines(text) {
			if v, ok := strings.CutPrefix(line, series); ok {
				f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
				w.count = int64(f)
			}
		}
		return true
	}
	if !read() {
		c.t.Fatalf("node %d /metrics: no answer", n.index)
	}
	go func() {
		defer close(w.done)
		for {
			time.Sleep(20 * time.Millisecond)
			if !read() {
				return
			}
		}
	}()
	return w
}

// wait returns the last count read and when that read began, once the
// node stopped answering.
func (w *fallbackWatch) wait() (int64, time.Time) {
	<-w.done
	return w.count, w.at
}

func (c *cluster) httpGet(n *node, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.http+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// keys are a scenario's keys, distinct across runs and scenarios.
func keys(scenario string, n int) []string {
	prefix := fmt.Sprintf("%s-%d-%d", scenario, os.Getpid(), time.Now().UnixNano())
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// timed runs a subtest and logs how long it took.
func timed(t *testing.T, name string, f func(t *testing.T)) {
	t.Run(name, func(t *testing.T) {
		began := time.Now()
		defer func() { t.Logf("timing: %s %.1f s", t.Name(), time.Since(began).Seconds()) }()
		f(t)
	})
}

func TestCompose(t *testing.T) {
	for _, profile := range []string{"redis", "postgres", "cassandra"} {
		if want := os.Getenv("LIMITERD_COMPOSE_PROFILES"); want != "" && !strings.Contains(","+want+",", ","+profile+",") {
			continue
		}
		t.Run(profile, func(t *testing.T) {
			c := up(t, profile)
			timed(t, "converge", func(t *testing.T) { testConverge(t, c) })
			timed(t, "kill", func(t *testing.T) { testKill(t, c) })
			if profile != "redis" {
				return
			}
			timed(t, "partition", func(t *testing.T) { testPartition(t, c) })
			timed(t, "storerestart", func(t *testing.T) { testStoreRestart(t, c) })
			timed(t, "rolling", func(t *testing.T) { testRolling(t, c) })
		})
	}
}

// on runs f with c's t swapped for the subtest's.
func (c *cluster) on(t *testing.T) func() {
	old := c.t
	c.t = t
	return func() { c.t = old }
}

// loads starts a load on the periodic and the strict namespace; s is nil
// on a store that cannot decide atomically, which has no strict
// namespace (deploy/cassandra.yaml).
func (c *cluster) loads(scenario string) (p, s *harness.Load) {
	at := time.Now()
	p = c.startLoad(periodic, keys(scenario+"-p", 4), at, 3)
	if c.profile != "cassandra" {
		s = c.startLoad(strict, keys(scenario+"-s", 4), at, 3)
	}
	return p, s
}

// both is the loads that run of p and s.
func both(p, s *harness.Load) []*harness.Load {
	if s == nil {
		return []*harness.Load{p}
	}
	return []*harness.Load{p, s}
}

// testConverge: load through every node, then every node and the store
// agree on the exact total.
func testConverge(t *testing.T, c *cluster) {
	defer c.on(t)()
	p, s := c.loads("converge")
	loads := both(p, s)
	defer endAll(loads)
	time.Sleep(3 * time.Second)
	endAll(loads)
	for _, l := range loads {
		if n := l.FailedCount(-1); n > 0 {
			t.Errorf("%s: %d calls failed: %s", l.Namespace, n, l.Failures())
		}
		c.exact(l)
	}
}

// endAll ends every load of loads.
func endAll(loads []*harness.Load) {
	for _, l := range loads {
		l.End()
	}
}

// testKill: docker kill (SIGKILL) of node 2 under load; the other nodes
// keep answering; started again, it rejoins. The strict namespace loses
// nothing node 2 decided in the store; the periodic one at most what node
// 2 acknowledged in its last sync period and tick.
func testKill(t *testing.T, c *cluster) {
	defer c.on(t)()
	victim := c.nodes[1]
	p, s := c.loads("kill")
	loads := both(p, s)
	defer endAll(loads)
	// The first ticks include connecting to the store: the bound below
	// uses the ticks of the last seconds before the kill only.
	time.Sleep(time.Second)
	warm := c.syncState(victim, periodic)
	time.Sleep(3 * time.Second)
	last := c.syncState(victim, periodic)
	var fallbacks *fallbackWatch
	if s != nil {
		fallbacks = c.watchFallbacks(victim, strict)
	}
	killAt := time.Now()
	c.docker("kill", c.container(victim.service))
	killed := time.Now()
	time.Sleep(2 * time.Second)
	for _, l := range loads {
		if n := l.FailedCount(1); n > 0 {
			t.Errorf("%s: %d calls to the nodes still up failed: %s", l.Namespace, n, l.Failures())
		}
	}
	restarted := time.Now()
	c.mustCompose(time.Minute, "start", victim.service)
	c.waitHealthy(victim.service, 2*time.Minute)
	waitUntil(t, "the restarted node acknowledges hits", time.Minute, func() bool {
		return p.AcksBetween(1, restarted, time.Now().Add(time.Hour)) >= 50
	})
	rejoined := time.Since(restarted)
	endAll(loads)

	// The periodic namespace: what node 2 counted after its last
	// successful push began is lost: at most what it acknowledged since
	// that push began, at most its slowest tick before the end of that push
	// (read just before the kill; a later push only shrinks the loss).
	rate := syncRate[c.profile]
	d := last.ticks.since(warm.ticks).max(max(10*rate, time.Second))
	from := last.lastSuccess.Add(-d)
	if limit := max(rate, d) + d + 500*time.Millisecond; killAt.Sub(from) > limit {
		t.Errorf("node 2's last successful push began %v before the kill; want at most a sync period and a tick (%v, slowest tick %v)", killAt.Sub(from), limit, d)
	}
	bound := p.AcksBetween(1, from, killed)
	acked := p.Total()
	stored, took := c.converge(p, time.Minute)
	lost := acked - stored
	unknown := p.FailedBefore(1, time.Now())
	if lost > bound {
		t.Errorf("%s: lost %d of %d hits: more than node 2 acknowledged since its last successful push began, %v before the kill (%d)", periodic, lost, acked, killAt.Sub(from), bound)
	}
	if -lost > unknown {
		t.Errorf("%s: the store holds %d hits more than were acknowledged; only %d calls had an unknown outcome", periodic, -lost, unknown)
	}
	t.Logf("%s: acknowledged %d, stored %d, lost %d (bound %d: node 2's acks in the %v before the kill; slowest tick %v); converged %.2f s after the load; restarted node answering after %.1f s; failed calls: %s",
		periodic, acked, stored, lost, bound, killAt.Sub(from).Round(time.Millisecond), d, took.Seconds(), rejoined.Seconds(), p.Failures())

	// The strict namespace loses nothing node 2 decided in the store. A
	// call whose store call failed or timed out (a loaded host) answered
	// from local counts and left its hit to the next tick: at most those
	// it counted, plus its acks after that count was last read.
	if s != nil {
		f, read := fallbacks.wait()
		c.exactLosing(s, f+s.AcksBetween(1, read, killed))
	}
}

// testPartition: node 1 cut from the store network for 10 s under load
// answers every call from its own counts, its /healthz reports the store
// down; after the heal the store holds the exact count.
func testPartition(t *testing.T, c *cluster) {
	defer c.on(t)()
	cut := c.nodes[0]
	id := c.container(cut.service)
	p, s := c.loads("partition")
	defer p.End()
	defer s.End()
	time.Sleep(2 * time.Second)
	c.docker("network", "disconnect", c.network("store"), id)
	cutAt := time.Now()
	// The store is probed every 2 s.
	waitUntil(t, "node 1's /healthz reports the store down", 8*time.Second, func() bool {
		code, body, err := c.httpGet(cut, "/healthz")
		return err == nil && code == http.StatusOK && strings.Contains(body, `"status":"degraded"`)
	})
	time.Sleep(time.Until(cutAt.Add(10 * time.Second)))
	during := p.AcksBetween(0, cutAt, time.Now()) + s.AcksBetween(0, cutAt, time.Now())
	c.docker("network", "connect", "--alias", cut.service, c.network("store"), id)
	healed := time.Now()
	waitUntil(t, "node 1's /healthz reports the store up again", 30*time.Second, func() bool {
		code, body, err := c.httpGet(cut, "/healthz")
		return err == nil && code == http.StatusOK && strings.Contains(body, `"status":"ok"`)
	})
	upAgain := time.Since(healed)
	time.Sleep(time.Second)
	p.End()
	s.End()
	for _, l := range []*harness.Load{p, s} {
		if n := l.FailedCount(-1); n > 0 {
			t.Errorf("%s: %d calls failed: %s", l.Namespace, n, l.Failures())
		}
	}
	if during < 100 {
		t.Errorf("node 1 acknowledged only %d hits while cut off", during)
	}
	t.Logf("node 1 answered %d calls while cut off (slowest call %v strict, %v periodic); store up in its /healthz %.1f s after the heal",
		during, s.Slowest().Round(time.Millisecond), p.Slowest().Round(time.Millisecond), upAgain.Seconds())
	c.exact(p)
	c.exact(s)
}

// testStoreRestart: docker-compose restart of the store under load; the
// nodes answer throughout and the store ends with the exact count.
func testStoreRestart(t *testing.T, c *cluster) {
	defer c.on(t)()
	p, s := c.loads("storerestart")
	defer p.End()
	defer s.End()
	time.Sleep(2 * time.Second)
	began := time.Now()
	c.mustCompose(time.Minute, "restart", "-t", "10", c.profile)
	c.waitHealthy(c.profile, time.Minute)
	t.Logf("store restarted and healthy in %.1f s", time.Since(began).Seconds())
	time.Sleep(2 * time.Second)
	p.End()
	s.End()
	for _, l := range []*harness.Load{p, s} {
		if n := l.FailedCount(-1); n > 0 {
			t.Errorf("%s: %d calls failed: %s", l.Namespace, n, l.Failures())
		}
	}
	t.Logf("slowest call %v strict, %v periodic", s.Slowest().Round(time.Millisecond), p.Slowest().Round(time.Millisecond))
	c.exact(p)
	c.exact(s)
}

// testRolling: each node in turn gets SIGTERM (as docker stop sends it),
// answers 503 on /readyz at once, exits 0 after its final push and is
// started again, under load: no acknowledged hit is lost.
func testRolling(t *testing.T, c *cluster) {
	defer c.on(t)()
	p, s := c.loads("rolling")
	defer p.End()
	defer s.End()
	time.Sleep(2 * time.Second)
	for _, n := range c.nodes {
		id := c.container(n.service)
		began := time.Now()
		c.docker("kill", "--signal", "TERM", id)
		waitUntil(t, fmt.Sprintf("node %d's /readyz answers 503", n.index), time.Second, func() bool {
			code, _, _ := c.httpGet(n, "/readyz")
			return code == http.StatusServiceUnavailable
		})
		code, err := run(time.Minute, nil, "docker", "wait", id)
		if err != nil {
			t.Fatal(err)
		}
		if code != "0" {
			t.Errorf("node %d exited with status %s after SIGTERM: want 0 (its final push done)", n.index, code)
		}
		stopped := time.Since(began)
		c.mustCompose(time.Minute, "start", n.service)
		c.waitHealthy(n.service, time.Minute)
		t.Logf("node %d: stopped in %.1f s (drain_delay 2 s), healthy again %.1f s after the SIGTERM", n.index, stopped.Seconds(), time.Since(began).Seconds())
	}
	time.Sleep(time.Second)
	p.End()
	s.End()
	c.exact(p)
	c.exact(s)
}

// histogram is a Prometheus histogram's cumulative bucket counts by upper
// bound.
type histogram map[float64]float64

func (h histogram) since(old histogram) histogram {
	d := histogram{}
	for le, n := range h {
		d[le] = n - old[le]
	}
	return d
}

// max is the upper bound of the smallest bucket holding every
// observation, or deadline when that is +Inf.
func (h histogram) max(deadline time.Duration) time.Duration {
	bounds := make([]float64, 0, len(h))
	for le := range h {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	total := h[math.Inf(1)]
	for _, le := range bounds {
		if h[le] >= total {
			if math.IsInf(le, 1) {
				return deadline
			}
			return time.Duration(le * float64(time.Second))
		}
	}
	return deadline
}

// syncState is one reading of a node's sync metrics for a namespace.
type syncState struct {
	ticks       histogram
	lastSuccess time.Time // end of the last fully successful tick
}

// syncState reads n's tick durations and last success for namespace from
// its /metrics (the containers share this host's clock).
func (c *cluster) syncState(n *node, namespace string) syncState {
	c.t.Helper()
	code, text, err := c.httpGet(n, "/metrics")
	if err != nil || code != http.StatusOK {
		c.t.Fatalf("node %d /metrics: %d %v", n.index, code, err)
	}
	st := syncState{ticks: histogram{}}
	label := `namespace="` + namespace + `"`
	for line := range strings.Lines(text) {
		if !strings.Contains(line, label) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			c.t.Fatalf("node %d: cannot parse %q", n.index, line)
		}
		if rest, ok := strings.CutPrefix(line, "limiterd_sync_duration_seconds_bucket{"); ok {
			_, le, _ := strings.Cut(rest, `le="`)
			le, _, _ = strings.Cut(le, `"`)
			bound, err := strconv.ParseFloat(le, 64)
			if err != nil {
				c.t.Fatalf("node %d: cannot parse %q", n.index, line)
			}
			st.ticks[bound] = v
		}
		if strings.HasPrefix(line, "limiterd_sync_last_success_timestamp_seconds{") {
			st.lastSuccess = time.Unix(0, int64(v*1e9))
		}
	}
	if len(st.ticks) == 0 || st.lastSuccess.IsZero() {
		c.t.Fatalf("node %d: no successful sync of %s yet", n.index, namespace)
	}
	return st
}
