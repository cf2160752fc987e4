package live

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	clustersync "github.com/limiterd/limiterd/sync"
)

// SyncMetrics are the sync loops' Prometheus metrics, labelled by
// namespace (limiter_namespace): clustersync.Metrics on a registry.
type SyncMetrics struct {
	duration    *prometheus.HistogramVec
	rowsPushed  *prometheus.CounterVec
	rowsFetched *prometheus.CounterVec
	pushErrors  *prometheus.CounterVec
	fetchErrors *prometheus.CounterVec
	pending     *prometheus.GaugeVec
	lastSuccess *prometheus.GaugeVec
	fallback    *prometheus.CounterVec
	escalated   *prometheus.CounterVec
}

var _ clustersync.Metrics = (*SyncMetrics)(nil)

// NewSyncMetrics creates the metrics and registers them with reg.
func NewSyncMetrics(reg prometheus.Registerer) *SyncMetrics {
	// Not "namespace": Kubernetes' label of that name would rename it
	// exported_namespace in every scrape.
	ns := []string{"limiter_namespace"}
	m := &SyncMetrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "limiterd_sync_duration_seconds", Help: "Duration of one sync tick (push and fetch).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, ns),
		rowsPushed:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_sync_rows_pushed_total", Help: "Window rows pushed to the store."}, ns),
		rowsFetched: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_sync_rows_fetched_total", Help: "Window rows fetched from the store."}, ns),
		pushErrors:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_sync_push_errors_total", Help: "Failed pushes (retried by a later tick)."}, ns),
		fetchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_sync_fetch_errors_total", Help: "Failed fetches."}, ns),
		pending:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "limiterd_sync_dirty_rows", Help: "Rows changed since their last successful push, as of the last tick."}, ns),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "limiterd_sync_last_success_timestamp_seconds", Help: "Unix time of the last fully successful sync; seconds since = time() - this."}, ns),
		fallback:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_sync_local_fallbacks_total", Help: "Synchronous calls answered from local counts because the store failed or timed out."}, ns),
		escalated:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_sync_escalated_total", Help: "Periodic Allow calls decided by the store because they came near a limit or their key was new to the node."}, ns),
	}
	reg.MustRegister(m.duration, m.rowsPushed, m.rowsFetched, m.pushErrors, m.fetchErrors, m.pending, m.lastSuccess, m.fallback, m.escalated)
	return m
}

// forget drops the series of a namespace removed at run time.
func (m *SyncMetrics) forget(ns string) {
	for _, v := range []interface{ DeleteLabelValues(...string) bool }{m.duration, m.rowsPushed, m.rowsFetched, m.pushErrors, m.fetchErrors, m.pending, m.lastSuccess, m.fallback, m.escalated} {
		v.DeleteLabelValues(ns)
	}
}

func (m *SyncMetrics) Tick(ns string, d time.Duration, pushFailed, fetchFailed bool) {
	if pushFailed {
		m.pushErrors.WithLabelValues(ns).Inc()
	}
	if fetchFailed {
		m.fetchErrors.WithLabelValues(ns).Inc()
	}
	m.duration.WithLabelValues(ns).Observe(d.Seconds())
}

func (m *SyncMetrics) Synced(ns string, at time.Time) {
	m.lastSuccess.WithLabelValues(ns).Set(float64(at.UnixNano()) / 1e9)
}

func (m *SyncMetrics) Dirty(ns string, rows int) { m.pending.WithLabelValues(ns).Set(float64(rows)) }
func (m *SyncMetrics) Pushed(ns string, rows int) {
	m.rowsPushed.WithLabelValues(ns).Add(float64(rows))
}
func (m *SyncMetrics) Fetched(ns string, rows int) {
	m.rowsFetched.WithLabelValues(ns).Add(float64(rows))
}
func (m *SyncMetrics) Fallback(ns string)  { m.fallback.WithLabelValues(ns).Inc() }
func (m *SyncMetrics) Escalated(ns string) { m.escalated.WithLabelValues(ns).Inc() }
