//go:build integration && accuracy

package integration

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/internal/accuracy"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestEscalationOracle judges every decision of three in-process nodes
// against an exact oracle (one sliding window per key fed with every
// admitted hit in decision-time order): wrongly admitted and wrongly
// refused calls as a share of all, and the share of calls decided by the
// store (escalated), with and without escalation, on each store:
//
//   - one key, 1 s windows, L = 100, at 1×, 2× and 10× the limit, with
//     sync_rate 0.1 (and 0, the synchronous baseline: exact, so what it
//     refuses "wrongly" are concurrent calls the store took in another
//     order than their at);
//
//   - a Zipf workload (exponent 1.1) over 100,000 keys, 6,000 calls/s,
//     10 s windows (LIMITERD_ACCURACY_ZIPF_WINDOW) and the largest limit
//     the top 1 % of keys exceed twice (L = 2 for 10 s), judged after
//     three windows of warm-up; with escalation always and only for keys
//     new in a node's first window (Config.EscalateNewKeys).
//
//     go test -tags 'integration accuracy' -run TestEscalationOracle -v ./integration/
//
// LIMITERD_ACCURACY_STORES picks the stores (default "redis,postgres"),
// LIMITERD_ACCURACY_WORKLOADS the rows (default "onekey,zipf"),
// LIMITERD_ACCURACY_ZIPF_DURATION the Zipf rows' judged time (default 30s),
// LIMITERD_ACCURACY_ZIPF_ESCALATE their modes (default "never,auto,newkeys"),
// LIMITERD_ACCURACY_ZIPF_WARMUP their warm-up (default three windows:
// nodes that have run a while, which know the others' keys)
// and LIMITERD_ACCURACY_OUT a file for the Markdown tables.
func TestEscalationOracle(t *testing.T) {
	stores := []string{"redis", "postgres"}
	if v := os.Getenv("LIMITERD_ACCURACY_STORES"); v != "" {
		stores = strings.Split(v, ",")
	}
	workloads := "onekey,zipf"
	if v := os.Getenv("LIMITERD_ACCURACY_WORKLOADS"); v != "" {
		workloads = v
	}
	zipfModes := "never,auto,newkeys"
	if v := os.Getenv("LIMITERD_ACCURACY_ZIPF_ESCALATE"); v != "" {
		zipfModes = v
	}
	var zipfWarmup time.Duration
	zipfDur, zipfWindow := 30*time.Second, 10*time.Second
	for name, d := range map[string]*time.Duration{"LIMITERD_ACCURACY_ZIPF_DURATION": &zipfDur, "LIMITERD_ACCURACY_ZIPF_WINDOW": &zipfWindow, "LIMITERD_ACCURACY_ZIPF_WARMUP": &zipfWarmup} {
		if v := os.Getenv(name); v != "" {
			var err error
			if *d, err = time.ParseDuration(v); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	if zipfWarmup == 0 {
		// A node decides keys it does not hold in itself once its change
		// reads cover the previous window (sync/learn.go): two windows.
		zipfWarmup = 3 * zipfWindow
	}
	table := []string{
		"| store | workload | sync_rate s | escalate | calls/s | mean ÷ L | worst ÷ L | wrongly admitted | wrongly refused | escalated | admitted into the last call of room | decided without a store round trip |",
		"|---|---|---|---|---|---|---|---|---|---|---|---|",
	}
	row := func(store, workload string, r accuracy.Run, res accuracy.Result) {
		esc := "never"
		switch {
		case r.SyncRate == 0:
			esc = "– (synchronous)"
		case r.Escalate && r.Sync.EscalateNewKeys > 0:
			esc = fmt.Sprintf("auto, new keys to the store in the first %s only", r.Sync.EscalateNewKeys)
		case r.Escalate:
			esc = "auto"
		}
		local := fmt.Sprintf("%.2f %%", 100*res.Local())
		if r.SyncRate == 0 {
			local = "0 %"
		}
		table = append(table, fmt.Sprintf("| %s | %s | %v | %s | %.0f | %.3f | %.2f | %d (%.4f %%) | %d (%.4f %%) | %.2f %% | %.2f %% | %s |",
			store, workload, r.SyncRate, esc, res.Offered, res.Mean/r.Limit, res.Worst/r.Limit,
			res.WronglyAdmitted, 100*float64(res.WronglyAdmitted)/float64(res.Calls),
			res.WronglyRefused, 100*float64(res.WronglyRefused)/float64(res.Calls),
			100*float64(res.Escalated)/float64(res.Calls), 100*float64(res.AtLimit)/float64(res.Calls), local))
	}
	for _, store := range stores {
		as := accuracyStoreNamed(t, "LIMITERD_ACCURACY_STORES", store)
		t.Run(store, func(t *testing.T) {
			open := as.open(t)
			measure := func(r accuracy.Run) accuracy.Result {
				t.Helper()
				r.Namespace, r.NewStore = harness.UniqueName("oracle"), open
				r.Sync.TickTimeout = time.Second
				ctx, cancel := context.WithTimeout(context.Background(), r.Warmup+r.Duration+time.Minute)
				defer cancel()
				res, err := accuracy.Measure(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("sync_rate %v, escalate %v, keys %d: %s", r.SyncRate, r.Escalate, r.Keys, res.Summary(r))
				return res
			}
			for _, load := range []float64{1, 2, 10} {
				if !strings.Contains(workloads, "onekey") {
					break
				}
				for _, m := range []struct {
					s   float64
					esc bool
				}{{0, false}, {0.1, false}, {0.1, true}} {
					r := accuracy.Run{Nodes: 3, SyncRate: m.s, Escalate: m.esc, Window: time.Second, Limit: 100,
						Rate: 100 * load, Keys: 1, Duration: 8 * time.Second, Workers: 16}
					row(store, fmt.Sprintf("one key, %v×", load), r, measure(r))
				}
			}
			for _, m := range []struct {
				mode    string
				esc     bool
				newKeys time.Duration
			}{{"never", false, 0}, {"auto", true, 0}, {"newkeys", true, zipfWindow}} {
				if !strings.Contains(workloads, "zipf") {
					break
				}
				if !slices.Contains(strings.Split(zipfModes, ","), m.mode) {
					continue
				}
				esc := m.esc
				r := accuracy.Run{Nodes: 3, SyncRate: 0.1, Escalate: esc, Window: zipfWindow, Limit: 1,
					Rate: 6000, Keys: 100_000, ZipfS: 1.1, Warmup: zipfWarmup, Duration: zipfDur, Workers: 32,
					Sync: clustersync.Config{EscalateNewKeys: m.newKeys}}
				// The largest whole limit that the top 1 % of keys exceed
				// at least twice.
				r.Limit = math.Floor(r.TopShareOffered() / 2)
				if top := r.TopShareOffered(); top < 2 {
					t.Fatalf("the top 1 %% of keys run at %.2f× their limit, want at least 2×", top)
				}
				res := measure(r)
				row(store, fmt.Sprintf("Zipf 1.1, 100,000 keys, %s windows, L = %v, top 1 %% ≥ %.1f×", r.Window, r.Limit, r.TopShareOffered()), r, res)
				if esc {
					t.Logf("warm-up: %d calls, %.2f %% escalated", res.WarmupCalls, 100*float64(res.WarmupEscalated)/float64(res.WarmupCalls))
				}
			}
		})
	}
	text := strings.Join(table, "\n") + "\n"
	t.Logf("\n%s", text)
	if path := os.Getenv("LIMITERD_ACCURACY_OUT"); path != "" {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
