package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestLocalBucketsReclaimedAfterAllow: in a local namespace a bucket an
// Allow used is reclaimed once back at rest, as one taken directly is:
// there is no store its consumption waits for, so a table of short-lived
// keys does not fill up to its key cap.
func TestLocalBucketsReclaimedAfterAllow(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	for _, rate := range []float64{-1, 0.1} {
		ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Minute}, Shared: rate >= 0}, nil)
		if err != nil {
			t.Fatal(err)
		}
		req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 2, RefillTime: time.Hour}}}}
		if d, err := ns.AllowAt(at, req, nil); err != nil || !d.Allowed {
			t.Fatalf("sync_rate %v: %+v, %v", rate, d, err)
		}
		removed := ns.Buckets().Reclaim(at.Add(2 * time.Hour))
		// Periodic: the take waits for the tick that sends it.
		want := map[float64]int{-1: 1, 0.1: 0}[rate]
		if removed != want {
			t.Errorf("sync_rate %v: Reclaim two hours later removed %d buckets, want %d", rate, removed, want)
		}
	}
}

// TestBucketsReclaimFollowsTheMode: a namespace changed between local and
// periodic keeps its buckets, and Reclaim follows its new mode: a
// periodic namespace's used bucket waits for its tick, a local one's not.
func TestBucketsReclaimFollowsTheMode(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	cfg := func(rate float64) []node.Config {
		return []node.Config{{Name: "api", WindowSizes: []time.Duration{time.Minute}, Shared: rate >= 0}}
	}
	n, err := node.New(cfg(-1), nil)
	if err != nil {
		t.Fatal(err)
	}
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 2, RefillTime: time.Hour}}}}
	for i, rate := range []float64{0.1, -1} {
		c, err := n.Prepare(cfg(rate))
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Commit(c); err != nil {
			t.Fatal(err)
		}
		ns, _ := n.Namespace("api")
		t0 := at.Add(time.Duration(i) * 10 * time.Hour)
		if d, err := ns.AllowAt(t0, req, nil); err != nil || !d.Allowed {
			t.Fatalf("sync_rate %v: %+v, %v", rate, d, err)
		}
		want := map[float64]int{-1: 1, 0.1: 0}[rate]
		if got := ns.Buckets().Reclaim(t0.Add(2 * time.Hour)); got != want {
			t.Errorf("after a change to sync_rate %v: Reclaim removed %d buckets, want %d", rate, got, want)
		}
	}
}
