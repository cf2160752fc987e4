//go:build integration && accuracy

package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/internal/accuracy"
)

// TestAccuracyGrid measures, cell by cell, how closely three in-process
// nodes round-robin on one store hold a limit, judged call by call
// against an exact oracle (internal/accuracy): windows of 1 s, 10 s and
// 60 s × limits of 2, 10 and 100 × kinds (sliding window, token, leaky
// and fixed bucket, each holding L per window) × sync_rate 0.01, 0.1 and
// 1 s with escalate: auto, each next to the cell's floor: the synchronous
// mode (sync_rate 0) on the same workload. The load is Zipf 1.1 over
// 10,000 keys at the rate that offers the most called key ten times its
// limit (a few keys at two to ten times theirs), after one window of
// warm-up. Each row has a targets column: at most 0.01 % of calls wrongly
// admitted, at most twice the floor's wrongly refused (or 0.01 %), and a
// share decided without a store round trip within one point of its best
// (all calls but those admitted into a key's last whole call of room).
// It is a measurement: a missed target fails the test only with
// LIMITERD_ACCURACY_STRICT=1. The whole grid takes hours (the 60 s
// windows most); the knobs select a part:
//
//	LIMITERD_ACCURACY_GRID_WINDOWS=1s,10s LIMITERD_ACCURACY_GRID_RATES=0.1,1 \
//	LIMITERD_ACCURACY_STORES=redis LIMITERD_ACCURACY_OUT=/tmp/grid.md \
//	go test -tags 'integration accuracy' -run TestAccuracyGrid -v -timeout 0 ./integration/
//
// LIMITERD_ACCURACY_STORES (default "redis,postgres"),
// LIMITERD_ACCURACY_GRID_WINDOWS (default "1s,10s,60s"),
// LIMITERD_ACCURACY_GRID_LIMITS (default "2,10,100"),
// LIMITERD_ACCURACY_GRID_RATES, the periodic sync_rates (default
// "0.01,0.1,1"), LIMITERD_ACCURACY_GRID_KINDS (default
// "window,token,leaky,fixed"), LIMITERD_ACCURACY_GRID_DURATION, the
// judged time of each run (default two windows, at least 5 s),
// LIMITERD_ACCURACY_GRID_KEYS (default 10000), LIMITERD_ACCURACY_GRID_TOP,
// the most called key's load in limits (default 10),
// LIMITERD_ACCURACY_GRID_WARMUP, the warm-up in windows (default 1; a
// key's first call on a node is decided in the node only from the third
// window on, sync/learn.go), and LIMITERD_ACCURACY_OUT, a file for the
// Markdown table.
func TestAccuracyGrid(t *testing.T) {
	stores := gridList(t, "LIMITERD_ACCURACY_STORES", "redis,postgres", func(s string) (string, error) { return s, nil })
	windows := gridList(t, "LIMITERD_ACCURACY_GRID_WINDOWS", "1s,10s,60s", time.ParseDuration)
	limits := gridList(t, "LIMITERD_ACCURACY_GRID_LIMITS", "2,10,100", parseFloat)
	rates := gridList(t, "LIMITERD_ACCURACY_GRID_RATES", "0.01,0.1,1", parseFloat)
	kinds := gridList(t, "LIMITERD_ACCURACY_GRID_KINDS", "window,token,leaky,fixed", accuracy.KindOf)
	keys := gridList(t, "LIMITERD_ACCURACY_GRID_KEYS", "10000", strconv.Atoi)[0]
	top := gridList(t, "LIMITERD_ACCURACY_GRID_TOP", "10", parseFloat)[0]
	warmup := gridList(t, "LIMITERD_ACCURACY_GRID_WARMUP", "1", parseFloat)[0]
	var duration time.Duration
	if v := os.Getenv("LIMITERD_ACCURACY_GRID_DURATION"); v != "" {
		duration = gridList(t, "LIMITERD_ACCURACY_GRID_DURATION", "", time.ParseDuration)[0]
	}
	strict := os.Getenv("LIMITERD_ACCURACY_STRICT") == "1"
	for _, s := range rates {
		if s <= 0 {
			t.Fatalf("LIMITERD_ACCURACY_GRID_RATES: %v: the periodic sync_rates are > 0 (the synchronous floor is always run)", s)
		}
	}
	table := append([]string(nil), accuracy.GridHeader...)
	defer func() {
		text := strings.Join(table, "\n") + "\n"
		t.Logf("three nodes, Zipf 1.1 over %d keys, the most called at %v× its limit; escalate auto:\n%s", keys, top, text)
		if path := os.Getenv("LIMITERD_ACCURACY_OUT"); path != "" {
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Error(err)
			}
		}
	}()
	for _, store := range stores {
		as := accuracyStoreNamed(t, "LIMITERD_ACCURACY_STORES", store)
		t.Run(store, func(t *testing.T) {
			open := as.open(t)
			for _, w := range windows {
				for _, l := range limits {
					for _, k := range kinds {
						c := accuracy.Cell{Window: w, Limit: l, Kind: k, Keys: keys, ZipfS: 1.1, TopLoad: top,
							Warmup: time.Duration(warmup * float64(w)), Duration: duration}
						if c.Duration == 0 {
							c.Duration = max(2*w, 5*time.Second)
						}
						var floor accuracy.Result
						for _, s := range append([]float64{0}, rates...) {
							r := c.Run(s)
							r.Namespace, r.NewStore = harness.UniqueName("grid"), open
							ctx, cancel := context.WithTimeout(context.Background(), r.Warmup+r.Duration+time.Minute)
							res, err := accuracy.Measure(ctx, r)
							cancel()
							name := fmt.Sprintf("%s %s L=%v %s sync_rate %v", store, w, l, accuracy.KindName(k), s)
							if err != nil {
								// One cell's failure is reported; the grid goes on.
								t.Errorf("%s: %v", name, err)
								table = append(table, accuracy.GridRow(store, r, res, floor, nil, "error: "+err.Error()))
								continue
							}
							t.Logf("%s: %s", name, res.Summary(r))
							var misses []string
							if s == 0 {
								floor = res
							} else if misses = accuracy.DefaultTargets.Misses(res, floor); len(misses) > 0 && strict {
								t.Errorf("%s: missed %s", name, strings.Join(misses, "; "))
							}
							table = append(table, accuracy.GridRow(store, r, res, floor, misses, ""))
						}
					}
				}
			}
		})
	}
}

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

// gridList reads the comma-separated list of env (def when unset).
func gridList[T any](t *testing.T, env, def string, parse func(string) (T, error)) []T {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		v = def
	}
	var out []T
	for _, f := range strings.Split(v, ",") {
		x, err := parse(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		out = append(out, x)
	}
	return out
}
