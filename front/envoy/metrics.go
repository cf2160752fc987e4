package envoyfront

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limiterd/limiterd/internal/reqmetrics"
	"github.com/limiterd/limiterd/service"
)

// MaxDetailedSeries caps the series a detailed_metric rule adds: past it,
// further values are counted in the rule's own (configured path) series.
const MaxDetailedSeries = 100

// metrics are the front's Prometheus metrics. Rule series are labelled by
// domain and configured descriptor path, never by a request's values
// (except under detailed_metric, capped), so their number is bounded by the
// rules.
type metrics struct {
	hits, over, near, within, shadow *prometheus.CounterVec
	unknownDomain                    prometheus.Counter
	unmatched                        *prometheus.CounterVec
	reloads                          *prometheus.CounterVec
	loaded                           prometheus.Gauge
}

// ObserveDecisions counts every descriptor decided under a limit in m as
// well, as the other fronts count theirs: the service reports each of its
// Allow calls, one per such descriptor, to m, as one decision of kind
// sliding_window in the front's namespace: allowed when within its limit
// (near it included), denied when over it (shadow mode included, though
// answered OK). Descriptors that match no rule, or an unlimited one,
// decide nothing. Make m with front "envoy" (reqmetrics.New(reg,
// reqmetrics.Config{Front: "envoy", Configured: ...})); the calls
// themselves and their latency are the gRPC server's, which serves this
// service (grpcfront.UnaryMetrics).
func (s *Server) ObserveDecisions(m *reqmetrics.Metrics) {
	s.svc.Store(s.svc.Load().Observe(service.FrontEnvoy, m))
}

func newMetrics(reg prometheus.Registerer) *metrics {
	rule := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_envoy_rule_" + name, Help: help}, []string{"domain", "descriptor"})
	}
	m := &metrics{
		hits:          rule("hits_total", "Hits (sums of hits_addend) on a descriptor rule."),
		over:          rule("over_limit_total", "Hits on a descriptor rule that were over its limit (shadow mode included)."),
		near:          rule("near_limit_total", "Hits on a descriptor rule admitted above NearLimitRatio of its limit."),
		within:        rule("within_limit_total", "Hits on a descriptor rule admitted within its limit."),
		shadow:        rule("shadow_mode_total", "Hits over the limit of a shadow_mode rule, answered OK."),
		unknownDomain: prometheus.NewCounter(prometheus.CounterOpts{Name: "limiterd_envoy_unknown_domain_total", Help: "Requests for a domain no rules file defines (answered OK)."}),
		unmatched: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_envoy_unmatched_descriptors_total",
			Help: "Request descriptors that matched no rule of their domain (answered OK)."}, []string{"domain"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_envoy_rules_reloads_total",
			Help: "Loads of the rules directory, by result (ok or error; an error keeps the previous rules)."}, []string{"result"}),
		loaded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "limiterd_envoy_rules_last_reload_ok", Help: "1 when the last load of the rules directory succeeded."}),
	}
	if reg != nil {
		reg.MustRegister(m.hits, m.over, m.near, m.within, m.shadow, m.unknownDomain, m.unmatched, m.reloads, m.loaded)
	}
	return m
}

// ruleMetrics are one series of each rule counter.
type ruleMetrics struct {
	hits, over, near, within, shadow prometheus.Counter
}

func (m *metrics) forRule(domain, path string) *ruleMetrics {
	return &ruleMetrics{
		hits:   m.hits.WithLabelValues(domain, path),
		over:   m.over.WithLabelValues(domain, path),
		near:   m.near.WithLabelValues(domain, path),
		within: m.within.WithLabelValues(domain, path),
		shadow: m.shadow.WithLabelValues(domain, path),
	}
}

// detailed holds the series of detailed_metric rules by their detailed
// path, at most MaxDetailedSeries per rule (by domain and configured path,
// so reloads do not raise the cap).
type detailed struct {
	mu     sync.Mutex
	series map[entry]map[string]*ruleMetrics
}

// get returns the series of r for the detailed path; r's own series once
// r has MaxDetailedSeries.
func (d *detailed) get(m *metrics, r *rule, path string) *ruleMetrics {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.series == nil {
		d.series = map[entry]map[string]*ruleMetrics{}
	}
	id := entry{r.domain, r.path}
	byPath := d.series[id]
	if rm, ok := byPath[path]; ok {
		return rm
	}
	if len(byPath) >= MaxDetailedSeries {
		return r.metrics
	}
	if byPath == nil {
		byPath = map[string]*ruleMetrics{}
		d.series[id] = byPath
	}
	rm := m.forRule(r.domain, path)
	byPath[path] = rm
	return rm
}

// install resolves every rule's series.
func (m *metrics) install(rs *rules) {
	var walk func(n *rulesNode)
	walk = func(n *rulesNode) {
		if n.limit != nil {
			n.limit.metrics = m.forRule(n.limit.domain, n.limit.path)
		}
		for _, c := range n.children {
			walk(c)
		}
		for _, c := range n.wildcards {
			walk(c)
		}
	}
	for _, root := range rs.domains {
		walk(root)
	}
}
