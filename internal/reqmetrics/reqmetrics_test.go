package reqmetrics

import (
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/limiterd/limiterd/internal/reqmetrics/metricstest"
	"github.com/limiterd/limiterd/service"
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
	m.Decision("", service.SlidingWindow, true)
	m.Decision("default", service.SlidingWindow, false)
	m.Decided(service.Observed{Namespace: "api", Kind: service.TokenKind, Allowed: true})
	m.Decision("nosuch", service.ConcurrencyKind, true)
	m.Decided(service.Observed{Namespace: "nosuch2", Kind: service.ConcurrencyKind})
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
	allow := func(ns, key string, kind service.Kind) {
		m.Decided(service.Observed{Namespace: ns, Kind: kind, Allowed: len(key)%2 == 0})
		m.Method("limiter.v1.RateLimiter/Allow").Observe(time.Microsecond, "OK")
	}
	for _, ns := range []string{"default", "api", "unknown"} {
		allow(ns, "k", service.SlidingWindow)
		allow(ns, "kk", service.SlidingWindow)
		allow(ns, "k", service.TokenKind)
	}
	m.Method("/no.such.Service/M").Observe(time.Microsecond, "OK")
	before := metricstest.Series(t, reg)
	for i := range 100_000 {
		allow("api", "key-"+strconv.Itoa(i), service.SlidingWindow)
	}
	for i := range 1_000 {
		ns := "ns-" + strconv.Itoa(i)
		allow(ns, "k", service.SlidingWindow)
		allow(ns, "kk", service.TokenKind)
		m.Method("/no.such.Service/M"+strconv.Itoa(i)).Observe(time.Microsecond, "OK")
	}
	if after := metricstest.Series(t, reg); after != before {
		t.Errorf("series: %d before the flood, %d after", before, after)
	}
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("other", "sliding_window", "denied")); got != 1001 {
		t.Errorf("other's denied sliding windows = %v, want 1001", got)
	}

	none := New(prometheus.NewRegistry(), Config{Front: "test"})
	none.Decision("default", service.SlidingWindow, true)
	if got := testutil.ToFloat64(none.decisions.WithLabelValues("other", "sliding_window", "allowed")); got != 1 {
		t.Errorf("nil Configured: other = %v, want 1", got)
	}
}

// TestKindLabels: every kind the service names has its label; a kind
// past them counts as mixed.
func TestKindLabels(t *testing.T) {
	m := New(nil, Config{Front: "test", Configured: configured("api")})
	for k, want := range map[service.Kind]string{service.SlidingWindow: "sliding_window", service.TokenKind: "token_bucket",
		service.LeakyKind: "leaky_bucket", service.FixedKind: "fixed_bucket", service.ConcurrencyKind: "concurrency", service.MixedKind: "mixed"} {
		if got := KindLabel(k); got != want {
			t.Errorf("KindLabel(%v) = %q, want %q", k, got, want)
		}
	}
	m.Decided(service.Observed{Namespace: "api", Kind: service.MixedKind + 1, Allowed: true})
	if got := testutil.ToFloat64(m.decisions.WithLabelValues("api", "mixed", "allowed")); got != 1 {
		t.Errorf("an unknown kind: mixed = %v, want 1", got)
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
	o := service.Observed{Front: service.FrontGRPC, Namespace: "api", Kind: service.SlidingWindow, Allowed: true}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			md.Observe(time.Microsecond, "OK")
			m.Decided(o)
		}
	})
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
