package reqmetrics

import (
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/internal/reqmetrics/metricstest"
)

func configured(names ...string) func(string) bool {
	return func(n string) bool {
		for _, c := range names {
			if n == c {
				return true
			}
		}
		return false
	}
}

func TestDecisionLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, Config{Front: "test", Methods: []string{"A"}, Configured: configured("default", "api")})
	m.Decision("", SlidingWindow, true)
	m.Decision("default", SlidingWindow, false)
	m.DecisionBytes([]byte("api"), TokenBucket, true)
	m.Decision("nosuch", Concurrency, true)
	m.DecisionBytes([]byte("nosuch2"), Concurrency, false)
	m.Method("A").Observe(time.Millisecond, "OK")
	m.Method("A").Observe(time.Millisecond, "OK")
	m.Method("B").Observe(time.Millisecond, "NotFound")
	for _, c := range []struct {
		ns, kind, decision string
		want               float64
	}{
		{"default", "sliding_window", "allowed", 1},
		{"default", "sliding_window", "denied", 1},
		{"api", "token_bucket", "allowed", 1},
		{"api", "token_bucket", "denied", 0},
		{"other", "concurrency", "allowed", 1},
		{"other", "concurrency", "denied", 1},
	} {
		got := testutil.ToFloat64(m.decisions.WithLabelValues(c.ns, c.kind, c.decision))
		if got != c.want {
			t.Errorf("decisions{%s,%s,%s} = %v, want %v", c.ns, c.kind, c.decision, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("A", "OK")); got != 2 {
		t.Errorf("requests{A,OK} = %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("other", "NotFound")); got != 1 {
		t.Errorf("requests{other,NotFound} = %v, want 1", got)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "namespace" {
					t.Errorf("%s has a namespace label", mf.GetName())
				}
			}
		}
	}
}

// TestBounded: distinct keys and unknown namespace names, as many as a
// caller likes, add no series once every method, code, kind and decision
// has been seen; a nil Configured puts every namespace in "other".
func TestBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, Config{Front: "test", Methods: LimiterMethods(), Configured: configured("default", "api")})
	allow := func(ns, key string, kind Kind) {
		req := &limiterv1.AllowRequest{Namespace: ns, Key: key, Limits: []*limiterv1.Limit{{}}}
		if kind == TokenBucket {
			req.Limits[0].Kind = &limiterv1.Limit_Token{Token: &limiterv1.TokenBucket{Max: 1}}
		}
		m.LimiterDecisions(req, &limiterv1.AllowResponse{Allowed: len(key)%2 == 0})
		m.Method("limiter.v1.RateLimiter/Allow").Observe(time.Microsecond, "OK")
	}
	for _, ns := range []string{"default", "api", "unknown"} {
		allow(ns, "k", SlidingWindow)
		allow(ns, "kk", SlidingWindow)
		allow(ns, "k", TokenBucket)
	}
	m.Method("/no.such.Service/M").Observe(time.Microsecond, "OK")
	before := metricstest.Series(t, reg)
	for i := range 100_000 {
		allow("api", "key-"+strconv.Itoa(i), SlidingWindow)
	}
	for i := range 1_000 {
		ns := "ns-" + strconv.Itoa(i)
		allow(ns, "k", SlidingWindow)
		allow(ns, "kk", TokenBucket)
		m.Method("/no.such.Service/M"+strconv.Itoa(i)).Observe(time.Microsecond, "OK")
	}
	if after := metricstest.Series(t, reg); after != before {
		t.Errorf("series: %d before the flood, %d after", before, after)
	}
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("other", "sliding_window", "denied")); got != 1001 {
		t.Errorf("other's denied sliding windows = %v, want 1001", got)
	}

	none := New(prometheus.NewRegistry(), Config{Front: "test"})
	none.Decision("default", SlidingWindow, true)
	if got := testutil.ToFloat64(none.decisions.WithLabelValues("other", "sliding_window", "allowed")); got != 1 {
		t.Errorf("nil Configured: other = %v, want 1", got)
	}
}

func TestLimiterDecisionsBatches(t *testing.T) {
	m := New(nil, Config{Front: "test", Configured: configured("default", "api")})
	fixed := &limiterv1.Limit{Kind: &limiterv1.Limit_Fixed{Fixed: &limiterv1.FixedBucket{Limit: 1}}}
	leaky := &limiterv1.Limit{Kind: &limiterv1.Limit_Leaky{Leaky: &limiterv1.LeakyBucket{Size: 1}}}
	m.LimiterDecisions(&limiterv1.AllowBatchRequest{Items: []*limiterv1.AllowRequest{
		{Namespace: "api", Limits: []*limiterv1.Limit{fixed}},
		{Namespace: "api", Limits: []*limiterv1.Limit{fixed, leaky}},
		{Namespace: "api", Limits: []*limiterv1.Limit{leaky}}, // failed: no decision
	}}, &limiterv1.AllowBatchResponse{Results: []*limiterv1.AllowResult{
		{Response: &limiterv1.AllowResponse{Allowed: true}},
		{Response: &limiterv1.AllowResponse{Allowed: false}},
		{},
	}})
	m.LimiterDecisions(&limiterv1.AcquireBatchRequest{Items: []*limiterv1.AcquireRequest{{}, {}}},
		&limiterv1.AcquireBatchResponse{Results: []*limiterv1.AcquireResult{
			{Response: &limiterv1.AcquireResponse{Acquired: true}}, {Response: &limiterv1.AcquireResponse{}},
		}})
	m.LimiterDecisions(&limiterv1.AllowRequest{}, nil) // failed call
	m.LimiterDecisions(&limiterv1.IncrementRequest{}, &limiterv1.IncrementResponse{})
	for _, c := range []struct {
		ns, kind, decision string
		want               float64
	}{
		{"api", "fixed_bucket", "allowed", 1},
		{"api", "mixed", "denied", 1},
		{"api", "leaky_bucket", "allowed", 0},
		{"api", "leaky_bucket", "denied", 0},
		{"default", "concurrency", "allowed", 1},
		{"default", "concurrency", "denied", 1},
		{"default", "sliding_window", "denied", 0},
	} {
		if got := testutil.ToFloat64(m.decisions.WithLabelValues(c.ns, c.kind, c.decision)); got != c.want {
			t.Errorf("decisions{%s,%s,%s} = %v, want %v", c.ns, c.kind, c.decision, got, c.want)
		}
	}
}

func TestBuildInfo(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := RegisterBuildInfo(reg); err != nil {
		t.Fatal(err)
	}
	if err := RegisterBuildInfo(reg); err == nil {
		t.Error("second RegisterBuildInfo on one registry: no error")
	}
	bi := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}}}
	reg = prometheus.NewRegistry()
	reg.MustRegister(buildInfo(bi, true))
	const want = `# HELP limiterd_build_info 1, labelled with the version, Go version and VCS revision limiterd was built from.
# TYPE limiterd_build_info gauge
limiterd_build_info{goversion="go1.99",revision="abc123",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, stringsReader(want), "limiterd_build_info"); err != nil {
		t.Error(err)
	}
	reg = prometheus.NewRegistry()
	reg.MustRegister(buildInfo(nil, false))
	if err := testutil.GatherAndCompare(reg, stringsReader(`# HELP limiterd_build_info 1, labelled with the version, Go version and VCS revision limiterd was built from.
# TYPE limiterd_build_info gauge
limiterd_build_info{goversion="unknown",revision="unknown",version="unknown"} 1
`), "limiterd_build_info"); err != nil {
		t.Error(err)
	}
}

func BenchmarkObserve(b *testing.B) {
	m := New(prometheus.NewRegistry(), Config{Front: "test", Methods: LimiterMethods(), Configured: configured("default", "api")})
	md := m.Method("limiter.v1.RateLimiter/Allow")
	ns := []byte("api")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			md.Observe(time.Microsecond, "OK")
			m.DecisionBytes(ns, SlidingWindow, true)
		}
	})
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
