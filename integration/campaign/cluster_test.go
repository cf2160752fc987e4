//go:build integration

package campaign

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
)

// The cluster's settings, which the model's bounds are stated in.
const (
	syncRate    = 100 * time.Millisecond
	tickTimeout = 500 * time.Millisecond
	callTimeout = 300 * time.Millisecond
	retryPeriod = 200 * time.Millisecond
	// maxSkew is the clock offset the docs tolerate
	// (docs/modes-and-accuracy.md, Clocks).
	maxSkew = 50 * time.Millisecond
	maxSlow = 100 * time.Millisecond
)

// store is one store kind under test.
type store struct {
	name string
	// yaml is the store's mapping in limiterd's config, reaching the
	// server at addr (a proxy's).
	yaml func(addr string) string
	addr string
	// stop and start make a real outage; nil: the proxies drop every
	// connection instead (Cassandra, whose restart takes too long).
	stop, start func()
	atomic      bool
}

func openRedis(t *testing.T) *store {
	r := harness.StartRedis(t)
	prefix := harness.UniqueName("campaign")
	return &store{
		name: "redis", addr: r.Addr(), stop: r.Stop, start: r.Start, atomic: true,
		yaml: func(addr string) string {
			return fmt.Sprintf(`{type: redis, addrs: ["%s"], key_prefix: "%s"}`, addr, prefix)
		},
	}
}

func openPostgres(t *testing.T) *store {
	p := harness.StartPostgres(t)
	u, err := url.Parse(p.DSN())
	if err != nil {
		t.Fatal(err)
	}
	return &store{
		name: "postgres", addr: u.Host, stop: p.Stop, start: p.Start, atomic: true,
		yaml: func(addr string) string {
			v := *u
			v.Host = addr
			return fmt.Sprintf(`{type: postgres, dsn: "%s"}`, v.String())
		},
	}
}

func openCassandra(t *testing.T) *store {
	c := harness.SharedCassandra(t)
	keyspace := harness.UniqueName("campaign")
	return &store{
		name: "cassandra", addr: fmt.Sprintf("%s:%d", c.Host(), c.Port()),
		yaml: func(addr string) string {
			host, port, _ := strings.Cut(addr, ":")
			// The port applies to the hosts the driver discovers too, so
			// that every connection goes through addr.
			return fmt.Sprintf(`{type: cassandra, hosts: ["%s"], port: %s, keyspace: "%s"}`, host, port, keyspace)
		},
	}
}

// namespaces of the load, by mode. "count-*" hold the Increments judged
// for lost hits, in one-hour windows.
var namespaces = map[string]Mode{
	"local": Local, "periodic": Periodic, "synchronous": Synchronous,
	"count-periodic": Periodic, "count-synchronous": Synchronous,
	"synchronous-alone": Synchronous,
}

// served is those of names whose mode st serves: a synchronous
// namespace needs a store that decides atomically.
func (st *store) served(names ...string) []string {
	var out []string
	for _, ns := range names {
		if st.atomic || namespaces[ns] != Synchronous {
			out = append(out, ns)
		}
	}
	return out
}

func nodeConfig(st *store, addr string) string {
	lines := map[string]string{
		"local":             `{name: local, window_sizes: ["2s"], sync_rate: -1}`,
		"periodic":          fmt.Sprintf(`{name: periodic, window_sizes: ["2s"], sync_rate: %g, store: main}`, syncRate.Seconds()),
		"synchronous":       `{name: synchronous, window_sizes: ["2s"], sync_rate: 0, store: main}`,
		"count-periodic":    fmt.Sprintf(`{name: count-periodic, window_sizes: ["1h"], sync_rate: %g, store: main}`, syncRate.Seconds()),
		"count-synchronous": `{name: count-synchronous, window_sizes: ["1h"], sync_rate: 0, store: main}`,
		"synchronous-alone": `{name: synchronous-alone, window_sizes: ["2s"], sync_rate: 0, store: main, on_store_down: local}`,
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sync:\n  tick_timeout: %s\n  call_timeout: %s\n  retry_period: %s\nstores:\n  main: %s\nnamespaces:\n",
		tickTimeout, callTimeout, retryPeriod, st.yaml(addr))
	for _, ns := range st.served("local", "periodic", "synchronous", "count-periodic", "count-synchronous", "synchronous-alone") {
		fmt.Fprintf(&b, "  - %s\n", lines[ns])
	}
	return b.String()
}

// cluster is three limiterd nodes, each reaching the store through a
// proxy of its own, each with a clock offset file.
type cluster struct {
	t      *testing.T
	st     *store
	nodes  []*harness.Limiterd
	links  []*harness.Proxy
	clocks []string

	mu     sync.Mutex
	tick   time.Duration // the longest sync tick seen
	down   bool          // the store is out (Cassandra: every proxy drops)
	cut    map[int]bool  // a node cut from the store
	slowed map[int]time.Duration
}

// startCluster starts n nodes of bin on st.
func startCluster(t *testing.T, st *store, bin string, n int) *cluster {
	c := &cluster{t: t, st: st, cut: map[int]bool{}, slowed: map[int]time.Duration{}}
	dir := t.TempDir()
	for i := range n {
		link := harness.StartProxy(t, st.addr)
		clock := filepath.Join(dir, fmt.Sprintf("clock-%d", i))
		if err := os.WriteFile(clock, []byte("0s"), 0o644); err != nil {
			t.Fatal(err)
		}
		node := harness.StartLimiterdWith(t, fmt.Sprintf("node-%d", i), nodeConfig(st, link.Addr()), harness.Options{
			Bin: bin, Env: []string{"LIMITERD_TEST_CLOCK_OFFSET_FILE=" + clock}})
		c.nodes, c.links, c.clocks = append(c.nodes, node), append(c.links, link), append(c.clocks, clock)
	}
	return c
}

func (c *cluster) noteTick(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tick = max(c.tick, d)
}

// link sets node i's proxy to what the faults in force ask.
func (c *cluster) link(i int) {
	p := c.links[i]
	p.Slow(c.slowed[i])
	switch {
	case c.down && c.st.stop == nil:
		p.Drop()
	case c.cut[i]:
		p.Heal()
		p.Cut()
	default:
		p.Heal()
	}
}

// scrape reads node i's /metrics: its longest sync tick of the periodic
// namespaces (noted) and each namespace's last successful sync.
func (c *cluster) scrape(i int, h *History) map[string]time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	text, err := c.nodes[i].Metrics(ctx)
	if err != nil {
		return nil
	}
	c.noteTick(longestTick(text, "periodic", "count-periodic"))
	out := map[string]time.Duration{}
	for ns, t := range lastSyncs(text) {
		out[ns] = h.Since(t)
	}
	return out
}

// apply begins (on) or ends (!on) fault f.
func (c *cluster) apply(f Fault, on bool) {
	switch f.Kind {
	case Kill, Term:
		n := c.nodes[f.Node]
		switch {
		case on && f.Kind == Kill:
			n.Kill()
		case on:
			n.Stop()
		default:
			n.Start()
		}
	case StoreDown:
		if c.st.stop != nil {
			if on {
				c.st.stop()
			} else {
				c.st.start()
			}
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		c.down = on
		for i := range c.links {
			c.link(i)
		}
	case Cut:
		c.mu.Lock()
		defer c.mu.Unlock()
		c.cut[f.Node] = on
		c.link(f.Node)
	case Slow:
		c.mu.Lock()
		defer c.mu.Unlock()
		c.slowed[f.Node] = 0
		if on {
			c.slowed[f.Node] = f.Delay
		}
		c.link(f.Node)
	case Skew:
		d := time.Duration(0)
		if on {
			d = f.Offset
		}
		if err := os.WriteFile(c.clocks[f.Node], []byte(d.String()), 0o644); err != nil {
			c.t.Error(err)
		}
		// The node reads the file every 10 ms.
		time.Sleep(20 * time.Millisecond)
	}
}

// nemesis applies the schedule's faults at their offsets from start,
// recording each as applied, and returns when every fault is undone.
func (c *cluster) nemesis(s Schedule, h *History, start time.Time) {
	var wg sync.WaitGroup
	for _, f := range s.Faults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Until(start.Add(f.At)))
			var last map[string]time.Duration
			if f.Kind == Kill || f.Kind == Term {
				last = c.scrape(f.Node, h)
			}
			began := h.Since(time.Now())
			c.apply(f, true)
			time.Sleep(time.Until(start.Add(f.End())))
			c.apply(f, false)
			h.AddFault(Applied{Fault: f, Began: began, Ended: h.Since(time.Now()), LastSync: last})
		}()
	}
	wg.Wait()
}
