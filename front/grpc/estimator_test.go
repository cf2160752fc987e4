package grpcfront

import (
	"flag"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
)

// evictFull floods the evicting namespace with 10^6 keys instead of the
// smoke run's 10^5.
var evictFull = flag.Bool("evict.full", false, "flood the evicting namespace with 10^6 random keys")

// TestEstimatorNamespace: Increment, SlidingWindow and Allow on an
// estimator namespace answer as on an exact one; a negative value is
// INVALID_ARGUMENT and a bucket limit FAILED_PRECONDITION.
func TestEstimatorNamespace(t *testing.T) {
	clock := fakeclock.New(minute.Add(250 * time.Millisecond))
	s := newTestServer(t, clock, node.Config{Name: "flows", WindowSizes: []time.Duration{time.Second, time.Minute}, Estimator: &node.EstimatorConfig{Hashes: 4, Slots: 65536}})
	for range 3 {
		if _, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Namespace: "flows", Key: "origin-1", Value: f64(2)}); err != nil {
			t.Fatal(err)
		}
	}
	checkRates(t, "flows/origin-1", s.must(t, "flows", "origin-1"), rate{time.Second, 6}, rate{time.Minute, 6})
	lim := []*limiterv1.Limit{{WindowSize: dur(time.Minute), Limit: 8}}
	for i, want := range []bool{true, true, false} {
		resp, err := s.client.Allow(bg, &limiterv1.AllowRequest{Namespace: "flows", Key: "origin-1", Limits: lim})
		if err != nil || resp.GetAllowed() != want {
			t.Fatalf("Allow %d = %v, %v; want allowed %v", i, resp.GetAllowed(), err, want)
		}
	}
	_, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Namespace: "flows", Key: "origin-1", Value: f64(-1)})
	checkStatus(t, err, codes.InvalidArgument, "value", "must not be negative", `"flows"`)
	_, err = s.client.Allow(bg, &limiterv1.AllowRequest{Namespace: "flows", Key: "origin-1", Limits: []*limiterv1.Limit{tokenLimit(5, time.Second, false)}})
	checkStatus(t, err, codes.FailedPrecondition, "limits[0].token", "estimator namespace")
}

// must is rates without a time.
func (s *testServer) must(tb testing.TB, namespace, key string) []*limiterv1.WindowRate {
	tb.Helper()
	resp, err := s.client.SlidingWindow(bg, &limiterv1.SlidingWindowRequest{Namespace: namespace, Key: key})
	if err != nil {
		tb.Fatalf("SlidingWindow(%q, %q): %v", namespace, key, err)
	}
	return resp.GetRates()
}

// TestEvictFlood: with on_full: evict and max_keys 10,000, a flood of
// random keys (10^5; 10^6 with -evict.full) through the API leaves a key
// over its limit refused, a steady key's count exact, and serves new
// legitimate keys.
func TestEvictFlood(t *testing.T) {
	flood := 100_000
	if *evictFull {
		flood = 1_000_000
	}
	const batch = 1000
	clock := fakeclock.New(minute.Add(250 * time.Millisecond))
	s := newTestServer(t, clock, node.Config{Name: "edge", WindowSizes: []time.Duration{time.Second, time.Minute}, MaxKeys: 10_000, OnFull: node.OnFullEvict})
	ns, _ := s.node.Namespace("edge")
	lim := []*limiterv1.Limit{{WindowSize: dur(time.Minute), Limit: 5}}
	allowAbuser := func() bool {
		resp, err := s.client.Allow(bg, &limiterv1.AllowRequest{Namespace: "edge", Key: "abuser", Limits: lim})
		if err != nil {
			t.Fatalf("Allow(abuser): %v", err)
		}
		return resp.GetAllowed()
	}
	for range 5 {
		if !allowAbuser() {
			t.Fatal("abuser refused under its limit")
		}
	}
	if allowAbuser() {
		t.Fatal("abuser admitted over its limit")
	}
	r := rand.New(rand.NewPCG(3, 5))
	steady, legit := 0, 0
	items := make([]*limiterv1.IncrementRequest, batch)
	for sent := 0; sent < flood; sent += batch {
		for i := range items {
			items[i] = &limiterv1.IncrementRequest{Namespace: "edge", Key: "flood-" + strconv.FormatUint(r.Uint64(), 36)}
		}
		resp, err := s.client.IncrementBatch(bg, &limiterv1.IncrementBatchRequest{Items: items})
		if err != nil {
			t.Fatal(err)
		}
		for i, res := range resp.GetResults() {
			if res.GetError() != nil {
				t.Fatalf("flood item %d: %v", i, res.GetError())
			}
		}
		if _, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Namespace: "edge", Key: "steady"}); err != nil {
			t.Fatalf("steady key: %v", err)
		}
		steady++
		if sent%(10*batch) == 0 {
			legit++
			key := "user-" + strconv.Itoa(legit)
			if _, err := s.client.Increment(bg, &limiterv1.IncrementRequest{Namespace: "edge", Key: key}); err != nil {
				t.Fatalf("new legitimate key %s: %v", key, err)
			}
		}
	}
	if allowAbuser() {
		t.Error("abuser admitted over its limit after the flood (evicted?)")
	}
	checkRates(t, "steady", s.must(t, "edge", "steady"), rate{time.Second, float64(steady)}, rate{time.Minute, float64(steady)})
	if got := ns.Stats().ActiveKeys; got != 10_000 {
		t.Errorf("ActiveKeys = %d, want 10000", got)
	}
	if got, want := ns.Stats().EvictedKeys, int64(flood+legit+1-10_000); got < want {
		t.Errorf("EvictedKeys = %d, want at least %d", got, want)
	}
	if got := ns.Stats().RefusedKeys; got != 0 {
		t.Errorf("RefusedKeys = %d, want 0", got)
	}
	t.Logf("%d flood keys, %d steady hits, %d new keys served; %d evicted", flood, steady, legit, ns.Stats().EvictedKeys)
}
