package sync

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the sync loop's Prometheus metrics, labelled by namespace.
type Metrics struct {
	Duration     *prometheus.HistogramVec
	RowsPushed   *prometheus.CounterVec
	RowsFetched  *prometheus.CounterVec
	PushErrors   *prometheus.CounterVec
	FetchErrors  *prometheus.CounterVec
	Pending      *prometheus.GaugeVec
	LastSuccess  *prometheus.GaugeVec
	SyncFallback *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	ns := []string{"namespace"}
	m := &Metrics{
		Duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "limiterd_sync_duration_seconds", Help: "Duration of one sync tick (push and fetch).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, ns),
		RowsPushed:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_sync_rows_pushed_total", Help: "Window rows pushed to the store."}, ns),
		RowsFetched:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_sync_rows_fetched_total", Help: "Window rows fetched from the store."}, ns),
		PushErrors:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_sync_push_errors_total", Help: "Failed pushes (retried by a later tick)."}, ns),
		FetchErrors:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_sync_fetch_errors_total", Help: "Failed fetches."}, ns),
		Pending:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "limiterd_sync_dirty_rows", Help: "Rows changed since their last successful push, as of the last tick."}, ns),
		LastSuccess:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "limiterd_sync_last_success_timestamp_seconds", Help: "Unix time of the last fully successful sync; seconds since = time() - this."}, ns),
		SyncFallback: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_sync_local_fallbacks_total", Help: "Synchronous calls answered from local counts because the store failed or timed out."}, ns),
	}
	if reg != nil {
		reg.MustRegister(m.Duration, m.RowsPushed, m.RowsFetched, m.PushErrors, m.FetchErrors, m.Pending, m.LastSuccess, m.SyncFallback)
	}
	return m
}
