package reqmetrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/service"

	"github.com/prometheus/client_golang/prometheus"
)

// Other is the label value of a method not in Config.Methods and of a
// namespace Config.Configured does not know.
const Other = "other"

// DefaultNamespace is the namespace an empty name means.
const DefaultNamespace = "default"

// numKinds bounds the kinds a decision is counted under: service.Kind's.
const numKinds = int(service.MixedKind) + 1

// kindLabels are the kind label's values, by service.Kind.
var kindLabels = [numKinds]string{
	service.SlidingWindow: "sliding_window", service.TokenKind: "token_bucket", service.LeakyKind: "leaky_bucket",
	service.FixedKind: "fixed_bucket", service.ConcurrencyKind: "concurrency", service.MixedKind: "mixed",
}

// KindLabel is the kind label's value of k.
func KindLabel(k service.Kind) string {
	if int(k) >= numKinds {
		return Other
	}
	return kindLabels[k]
}

// Config configures a front's Metrics.
type Config struct {
	// Front is the value of the constant label front: "grpc", "http",
	// "resp" or "envoy".
	Front string
	// Methods are the method (or command) names that get their own
	// series; any other is counted as Other.
	Methods []string
	// Configured reports whether a namespace name is configured: only
	// those get their own limiter_namespace value, every other name is
	// counted as Other. It is called concurrently, from the calls being
	// recorded, and must be fast. Nil counts every namespace as Other.
	Configured func(name string) bool
	// Buckets are the latency histogram's upper bounds in seconds
	// (nil: DefaultBuckets).
	Buckets []float64
}

// DefaultBuckets span a call answered from memory (tens of µs, most of it
// the transport) to one held up by a store or a leaky bucket's wait.
var DefaultBuckets = []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// Metrics are one front's request metrics. They are safe for concurrent
// use; recording a call or a decision of a method, code and namespace
// already seen takes no lock and does not allocate.
type Metrics struct {
	configured func(string) bool
	requests   *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	decisions  *prometheus.CounterVec

	methods map[string]*Method // read only after New
	other   *Method

	mu  sync.Mutex                           // serializes adding to ns
	ns  atomic.Pointer[map[string]*nsSeries] // copied on write
	oth *nsSeries
}

// New makes a front's metrics and registers them with reg (none when reg
// is nil). It panics, as prometheus.MustRegister does, when reg already
// holds the same front's families.
func New(reg prometheus.Registerer, cfg Config) *Metrics {
	buckets := cfg.Buckets
	if buckets == nil {
		buckets = DefaultBuckets
	}
	front := prometheus.Labels{"front": cfg.Front}
	m := &Metrics{
		configured: cfg.Configured,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_requests_total", ConstLabels: front,
			Help: "Calls served, by front, method and result code (the front's own: gRPC code, HTTP status, ok or error)."},
			[]string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "limiterd_request_duration_seconds", ConstLabels: front,
			Help: "Time to serve a call, by front and method.", Buckets: buckets}, []string{"method"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_decisions_total", ConstLabels: front,
			Help: "Limit decisions, by front, namespace (other: not configured), limiter kind and decision (allowed, denied, or dry_run_denied: a dry run the limits refused, admitted); each item of a batch counts."},
			[]string{"limiter_namespace", "kind", "decision"}),
		methods: make(map[string]*Method, len(cfg.Methods)),
	}
	for _, name := range cfg.Methods {
		m.methods[name] = m.newMethod(name)
	}
	m.other = m.newMethod(Other)
	m.oth = m.newNS(Other)
	m.ns.Store(&map[string]*nsSeries{})
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.decisions)
	}
	return m
}

// Method is one method's series.
type Method struct {
	m        *Metrics
	name     string
	duration prometheus.Observer
	mu       sync.Mutex                                    // serializes adding to codes
	codes    atomic.Pointer[map[string]prometheus.Counter] // copied on write
}

func (m *Metrics) newMethod(name string) *Method {
	md := &Method{m: m, name: name, duration: m.duration.WithLabelValues(name)}
	md.codes.Store(&map[string]prometheus.Counter{})
	return md
}

// Method returns the series of the method name: Other's when name is not
// one of Config.Methods.
func (m *Metrics) Method(name string) *Method {
	if md := m.methods[name]; md != nil {
		return md
	}
	return m.other
}

// Observe records one call of the method that took d and ended with
// code, which must come from a fixed set (a front's result codes).
func (md *Method) Observe(d time.Duration, code string) {
	md.duration.Observe(d.Seconds())
	c := (*md.codes.Load())[code]
	if c == nil {
		c = md.addCode(code)
	}
	c.Inc()
}

// Latency records only the latency of one call, for a front that counts
// its calls by result in metrics of its own: the histogram's count still
// counts the call.
func (md *Method) Latency(d time.Duration) { md.duration.Observe(d.Seconds()) }

func (md *Method) addCode(code string) prometheus.Counter {
	md.mu.Lock()
	defer md.mu.Unlock()
	cur := *md.codes.Load()
	if c := cur[code]; c != nil {
		return c
	}
	c := md.m.requests.WithLabelValues(md.name, code)
	next := make(map[string]prometheus.Counter, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[code] = c
	md.codes.Store(&next)
	return c
}

// The decision label's values, by their index in nsSeries.
const (
	denied = iota
	allowed
	dryRunDenied
	numDecisions
)

var decisionLabels = [numDecisions]string{denied: "denied", allowed: "allowed", dryRunDenied: "dry_run_denied"}

// nsSeries are one namespace label value's decision series.
type nsSeries [numKinds][numDecisions]prometheus.Counter // [kind][decision]

func (m *Metrics) newNS(label string) *nsSeries {
	var s nsSeries
	for k := range numKinds {
		for d := range numDecisions {
			s[k][d] = m.decisions.WithLabelValues(label, kindLabels[k], decisionLabels[d])
		}
	}
	return &s
}

// Decided records a decision the service reports: Metrics is the
// service.Observer of its front. A dry run that the limits refused is
// counted as dry_run_denied (it was admitted); one they admitted as
// allowed.
func (m *Metrics) Decided(o service.Observed) {
	d := denied
	switch {
	case o.DryRun && !o.Allowed:
		d = dryRunDenied
	case o.Allowed:
		d = allowed
	}
	m.series(o.Namespace).inc(o.Kind, d)
}

// Decision records one decision of kind k in the namespace name ("" is
// DefaultNamespace).
func (m *Metrics) Decision(name string, k service.Kind, ok bool) {
	d := denied
	if ok {
		d = allowed
	}
	m.series(name).inc(k, d)
}

// series returns the decision series of the namespace name ("" is
// DefaultNamespace).
func (m *Metrics) series(name string) *nsSeries {
	if name == "" {
		name = DefaultNamespace
	}
	s := (*m.ns.Load())[name]
	if s == nil {
		s = m.lookupNS(name)
	}
	return s
}

func (s *nsSeries) inc(k service.Kind, d int) {
	if int(k) >= numKinds {
		k = service.MixedKind
	}
	s[k][d].Inc()
}

// lookupNS returns the series of a name not yet cached: its own when it
// is configured (cached, so the cache holds configured names only),
// Other's otherwise (not cached, so unknown names cannot grow it).
func (m *Metrics) lookupNS(name string) *nsSeries {
	if m.configured == nil || !m.configured(name) {
		return m.oth
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := *m.ns.Load()
	if s := cur[name]; s != nil {
		return s
	}
	s := m.newNS(name)
	next := make(map[string]*nsSeries, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	next[name] = s
	m.ns.Store(&next)
	return s
}
