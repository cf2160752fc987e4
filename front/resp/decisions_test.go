package resp

import (
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limiterd/limiterd/internal/reqmetrics/metricstest"
)

// TestRequestMetrics: every RL.* command's latency, and the decisions of the commands that decide, by namespace and kind, read from
// RESP2 and RESP3 replies alike.
func TestRequestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(newService(t, nil), Config{}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, resp3 := range []bool{false, true} {
		sess := &session{resp3: resp3}
		for _, line := range []string{
			"RL.ALLOW k 3600000 1 NS api", "RL.ALLOW k 3600000 1 NS api",
			"RL.REDUCE t 1 3600", "RL.REDUCE t 1 3600",
			"RL.PREDUCE p 5 3600000 TAKE 3 STRICT", "RL.PREDUCE p 5 3600000 TAKE 3 STRICT",
			"RL.LEAKY l 1 3600000", "RL.LEAKY l 1 3600000",
			"RL.FIXED f 1 3600000 TAKE 1", "RL.FIXED f 1 3600000 TAKE 1",
			"RL.ACQUIRE j 1 60000 NS api", "RL.ACQUIRE j 1 60000 NS api",
			"RL.ALLOW k 3600000 1 NS nosuch", "RL.GET g 1 3600", "RL.INCR i", "PING",
		} {
			if resp3 { // other keys: every first call is admitted again
				line = replaceKey(line)
			}
			s.do(sess, line)
		}
	}
	for _, w := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"front": "resp", "limiter_namespace": "api", "kind": "sliding_window", "decision": "allowed"}, 2},
		{map[string]string{"limiter_namespace": "api", "kind": "sliding_window", "decision": "denied"}, 2},
		{map[string]string{"limiter_namespace": "default", "kind": "token_bucket", "decision": "allowed"}, 4},
		{map[string]string{"limiter_namespace": "default", "kind": "token_bucket", "decision": "denied"}, 4},
		{map[string]string{"limiter_namespace": "default", "kind": "leaky_bucket", "decision": "allowed"}, 2},
		{map[string]string{"limiter_namespace": "default", "kind": "leaky_bucket", "decision": "denied"}, 2},
		{map[string]string{"limiter_namespace": "default", "kind": "fixed_bucket", "decision": "allowed"}, 2},
		{map[string]string{"limiter_namespace": "default", "kind": "fixed_bucket", "decision": "denied"}, 2},
		{map[string]string{"limiter_namespace": "api", "kind": "concurrency", "decision": "allowed"}, 2},
		{map[string]string{"limiter_namespace": "api", "kind": "concurrency", "decision": "denied"}, 2},
		{map[string]string{"limiter_namespace": "other"}, 0},
	} {
		if got := metricstest.Sum(t, reg, "limiterd_decisions_total", w.labels); got != w.want {
			t.Errorf("limiterd_decisions_total%v = %v, want %v", w.labels, got, w.want)
		}
	}
	for _, w := range []struct {
		method string
		want   float64
	}{{"rl.allow", 6}, {"rl.get", 2}, {"rl.acquire", 4}, {"ping", 0}} {
		labels := map[string]string{"front": "resp", "method": w.method}
		if got := metricstest.Sum(t, reg, "limiterd_request_duration_seconds", labels); got != w.want {
			t.Errorf("limiterd_request_duration_seconds_count%v = %v, want %v", labels, got, w.want)
		}
	}
}

// replaceKey suffixes a command line's key (its second word) with "3".
func replaceKey(line string) string {
	f := splitFields(line)
	if len(f) > 1 {
		f[1] += "3"
	}
	out := f[0]
	for _, w := range f[1:] {
		out += " " + w
	}
	return out
}

// TestRequestMetricsBounded: 10^5 distinct keys and 10^3 unknown
// namespace names add no series.
func TestRequestMetricsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(newService(t, nil), Config{}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	sess := &session{}
	s.do(sess, "RL.ALLOW warm 3600000 1 NS api")
	s.do(sess, "RL.ALLOW warm 3600000 1 NS api")
	s.do(sess, "RL.ALLOW warm 3600000 1 NS nosuch")
	before := metricstest.Series(t, reg)
	for i := range 100_000 {
		s.do(sess, "RL.ALLOW k"+strconv.Itoa(i)+" 3600000 1 NS api")
	}
	for i := range 1_000 {
		s.do(sess, "RL.ALLOW k 3600000 1 NS ns-"+strconv.Itoa(i))
	}
	if after := metricstest.Series(t, reg); after != before {
		t.Errorf("series: %d before the flood, %d after", before, after)
	}
	if got := metricstest.Sum(t, reg, "limiterd_decisions_total", map[string]string{"limiter_namespace": "api", "decision": "allowed"}); got != 100_001 {
		t.Errorf("api's allowed = %v, want 100001", got)
	}
}
