package envoyfront

import (
	"strconv"
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/limiterd/limiterd/internal/reqmetrics"
)

func observed(t *testing.T, s *testServer) {
	t.Helper()
	s.srv.ObserveDecisions(reqmetrics.New(s.reg, reqmetrics.Config{Front: "envoy", Configured: func(n string) bool { return n == "envoy" }}))
}

func TestObserveDecisions(t *testing.T) {
	s := newTestServer(t, Config{}, map[string]string{"api.yaml": perMinute})
	observed(t, s)
	for range 11 {
		s.call(t, "api", 1, desc("client", "c1"), desc("nosuch", "x"))
	}
	s.call(t, "nosuch", 1, desc("client", "c1"))
	for _, c := range []struct {
		decision string
		want     float64
	}{{"allowed", 10}, {"denied", 1}} {
		labels := map[string]string{"front": "envoy", "limiter_namespace": "envoy", "kind": "sliding_window", "decision": c.decision}
		if got := s.counter(t, "limiterd_decisions_total", labels); got != c.want {
			t.Errorf("limiterd_decisions_total%v = %v, want %v", labels, got, c.want)
		}
	}
	// The front's own rule metrics still count hits.
	if got := s.counter(t, "limiterd_envoy_rule_over_limit_total", map[string]string{"domain": "api", "descriptor": "client"}); got != 1 {
		t.Errorf("over_limit = %v, want 1", got)
	}
	if got := s.counter(t, "limiterd_envoy_rule_within_limit_total", map[string]string{"domain": "api", "descriptor": "client"}); got != 8 {
		t.Errorf("within_limit = %v, want 8 (2 more are near it)", got)
	}
}

// TestObserveDecisionsBounded: 10^5 distinct descriptor values and 10^3
// unknown domains add no series.
func TestObserveDecisionsBounded(t *testing.T) {
	s := newTestServer(t, Config{}, map[string]string{"api.yaml": perMinute})
	observed(t, s)
	s.call(t, "api", 1, desc("client", "warm"))
	s.call(t, "api", 11, desc("client", "warm"))
	s.call(t, "nosuch", 1, desc("client", "warm"))
	before := seriesOf(t, s)
	for b := range 100 {
		ds := make([]*ratelimitv3.RateLimitDescriptor, 1000)
		for i := range ds {
			ds[i] = desc("client", strconv.Itoa(b)+"-"+strconv.Itoa(i))
		}
		s.call(t, "api", 1, ds...)
	}
	for i := range 1000 {
		s.call(t, "domain-"+strconv.Itoa(i), 1, desc("client", "c"))
	}
	if after := seriesOf(t, s); after != before {
		t.Errorf("series: %d before the flood, %d after", before, after)
	}
	if got := s.counter(t, "limiterd_decisions_total", map[string]string{"limiter_namespace": "envoy", "decision": "allowed", "kind": "sliding_window"}); got != 100_001 {
		t.Errorf("allowed = %v, want 100001", got)
	}
}

func seriesOf(t *testing.T, s *testServer) int {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}
