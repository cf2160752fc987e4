//go:build integration && accuracy

package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
)

// TestBucketAccuracy measures how well three limiterd nodes on one Redis
// hold a token bucket (capacity 100, refilled at 100 per second): paced
// takes round-robin over the nodes at 1×, 2× and 10× its rate, for each
// sync_rate, next to the ideal (capacity + refills) and the design's bound
// ideal + R·(N−1)/N·(2·s + d), with d taken as 20 ms. It takes about a
// minute:
//
//	go test -tags 'integration accuracy' -run TestBucketAccuracy -v ./integration/
//
// LIMITERD_ACCURACY_OUT names a file to append the Markdown table to.
func TestBucketAccuracy(t *testing.T) {
	r := harness.SharedRedis(t)
	const d = 20 * time.Millisecond
	table := []string{
		"| sync_rate s | load | offered R (calls/s) | admitted ÷ ideal | bound ÷ ideal | within bound |",
		"|---|---|---|---|---|---|",
	}
	for _, s := range []float64{0, 0.01, 0.1, 1} {
		nodes := harness.Cluster(t, 3, clusterConfig(redisStore(r.Addr(), harness.UniqueName("bacc")), s))
		for _, load := range []float64{1, 2, 10} {
			run := runBucketLoad(t, nodes, fmt.Sprintf("k-%v-%v", s, load), load, 4*time.Second)
			bound := run.bound(3, s, d)
			if s == 0 {
				bound = run.ideal()
			}
			ok := float64(run.admitted) <= bound*1.01 // the ideal's own timing slack
			table = append(table, fmt.Sprintf("| %v | %v× | %.0f | %.3f | %.3f | %v |",
				s, load, run.offered, float64(run.admitted)/run.ideal(), bound/run.ideal(), ok))
			if !ok {
				t.Errorf("s=%v load %v×: admitted %d above the bound %.0f", s, load, run.admitted, bound)
			}
		}
		for _, n := range nodes {
			n.Stop()
		}
	}
	out := strings.Join(table, "\n") + "\n"
	t.Log("\n" + out)
	if path := os.Getenv("LIMITERD_ACCURACY_OUT"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.WriteString(out); err != nil {
			t.Fatal(err)
		}
	}
}
