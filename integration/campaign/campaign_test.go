//go:build integration

package campaign

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/internal/mutant"
)

// runDuration is one schedule's length.
const runDuration = 20 * time.Second

func params() Params {
	return Params{Nodes: 3, Duration: runDuration, MaxSkew: maxSkew, MaxSlow: maxSlow}
}

// faultBinary is limiterd built with the clock hook (and, for a mutant,
// an overlay).
func faultBinary(t *testing.T, flags ...string) string {
	return harness.BuildLimiterdWith(t, append([]string{"-tags", "faultclock"}, flags...)...)
}

// result is one run's outcome.
type result struct {
	report  Report
	history *History
	path    string // the history file
}

// run runs schedule s against a fresh cluster of bin on st under the
// mixed load, then undoes every fault, reads the counts and judges the
// history. The history goes to a file in dir.
func run(t *testing.T, st *store, bin string, s Schedule, dir string) result {
	t.Helper()
	c := startCluster(t, st, bin, params().Nodes)
	prefix := fmt.Sprintf("%s-%d", harness.UniqueName("run"), s.Seed)
	start := time.Now()
	h := NewHistory(start)
	l := startLoad(c, h, prefix, s.Seed)
	c.nemesis(s, h, start)
	time.Sleep(time.Until(start.Add(runDuration)))
	l.end()
	for i := range c.nodes {
		c.scrape(i, h)
	}
	m := model(st, start)
	m.Tick = min(c.tick, tickTimeout)
	if c.tick == 0 {
		m.Tick = tickTimeout
	}
	h.Tick = m.Tick
	finals, disagree := l.finals(m.D(), m.tail()+15*time.Second)
	rp := Judge(m, h, finals)
	for _, d := range disagree {
		rp.violate(Violation{Guarantee: "the nodes agree on every count once every fault is undone", What: d})
	}
	path := filepath.Join(dir, fmt.Sprintf("history-%s-%d.jsonl", st.name, s.Seed))
	if err := h.Write(path, s); err != nil {
		t.Error(err)
	}
	for i, n := range c.nodes {
		n.Stop()
		if len(rp.Violations) > 0 {
			// The nodes' logs beside the history, for the post-mortem.
			if data, err := os.ReadFile(n.LogPath()); err == nil {
				os.WriteFile(strings.TrimSuffix(path, ".jsonl")+fmt.Sprintf("-node-%d.log", i), data, 0o644)
			}
		}
	}
	return result{report: rp, history: h, path: path}
}

// smokeSeed is the first seed from base whose schedule takes the store
// down for at least 1.5 s beside its other faults: the smoke then injects
// every fault the planted bugs need.
func smokeSeed(base uint64) Schedule {
	for seed := base; ; seed++ {
		s := Generate(seed, params())
		for _, f := range s.Faults {
			if f.Kind == StoreDown && f.For >= 1500*time.Millisecond && s.MaxOverlap() >= 3 {
				return s
			}
		}
	}
}

var stores = []struct {
	name string
	open func(t *testing.T) *store
}{
	{"redis", openRedis},
	{"postgres", openPostgres},
	{"cassandra", openCassandra},
}

func historyDir(t *testing.T) string {
	if d := os.Getenv("LIMITERD_CAMPAIGN_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestCampaignSmoke runs one 20 s schedule of at least three overlapping
// faults on each store and judges it: no violation, the faults applied at
// the schedule's offsets. About 35 s per store.
func TestCampaignSmoke(t *testing.T) {
	bin := faultBinary(t)
	for i, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			st := s.open(t)
			sched := smokeSeed(uint64(100 * (i + 1)))
			t.Logf("schedule %s", sched)
			res := run(t, st, bin, sched, historyDir(t))
			checkApplied(t, sched, res.history)
			t.Logf("judged %d calls, %d windows (%d near a fault, %d admissions beyond the limit there); longest tick %v",
				res.report.Judged, res.report.Windows, res.report.Faulted, res.report.Fallback, res.history.Tick)
			for _, v := range res.report.Violations {
				t.Errorf("seed %d: %s", sched.Seed, v)
			}
			if res.report.Judged < 1000 {
				t.Errorf("only %d calls judged", res.report.Judged)
			}
		})
	}
}

// checkApplied: the nemesis applied each of the schedule's faults at its
// offset (within 300 ms), so that a seed replays its schedule.
func checkApplied(t *testing.T, s Schedule, h *History) {
	t.Helper()
	if len(h.Faults) != len(s.Faults) {
		t.Fatalf("%d faults applied, schedule has %d", len(h.Faults), len(s.Faults))
	}
	for _, a := range h.Faults {
		if d := a.Began - a.Fault.At; d < 0 || d > 300*time.Millisecond {
			t.Errorf("%s began at %v", a.Fault, a.Began)
		}
	}
}

// TestCampaignCatchesMutants: the smoke's schedule on Redis finds each
// planted bug, built apart with -overlay, as a violation of the guarantee
// it breaks.
func TestCampaignCatchesMutants(t *testing.T) {
	if testing.Short() {
		t.Skip("builds two mutants")
	}
	mutants := []struct {
		name, file, old, new, guarantee string
	}{
		{
			name: "failed push not retried", file: "sync/syncer.go",
			old: "{ tk.stored(lo, hi, node.Uncertain) }", new: "{ tk.stored(lo, hi, 1<<62) }",
			guarantee: "no acknowledged hit lost (periodic)",
		},
		{
			// The store is given an expiry one background tick
			// (retry_period) before the one the holder is told.
			name: "lease freed a tick before its expiry", file: "sync/leasesync.go",
			old: "ID: t.StoreID, Limit: limit, Expiry: exp})", new: "ID: t.StoreID, Limit: limit, Expiry: exp - int64(s.cfg.RetryPeriod)})",
			guarantee: "leases held at once (synchronous)",
		},
	}
	st := openRedis(t)
	sched := smokeSeed(100)
	for _, m := range mutants {
		t.Run(m.name, func(t *testing.T) {
			bin := faultBinary(t, "-overlay", mutant.Overlay(t, filepath.Join("..", "..", m.file), m.old, m.new))
			res := run(t, st, bin, sched, historyDir(t))
			for _, v := range res.report.Violations {
				if strings.HasPrefix(v.Guarantee, m.guarantee) {
					t.Logf("caught: %s", v)
					return
				}
			}
			t.Errorf("the campaign did not catch the mutant (%d violations: %v)", len(res.report.Violations), res.report.Violations)
		})
	}
}
