package resp

import "github.com/prometheus/client_golang/prometheus"

type counter = prometheus.Counter

// metrics are the front's Prometheus metrics; the command label takes
// only the table's names (and "unknown"), so their series are bounded.
type metrics struct {
	unknown, refused, protocolErrors prometheus.Counter
	conns                            prometheus.Gauge
}

// newMetrics makes the metrics, gives every command of cmds its series,
// and registers them with reg (none when reg is nil).
func newMetrics(reg prometheus.Registerer, cmds map[string]*command) *metrics {
	commands := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_resp_commands_total",
		Help: "Redis protocol commands run, by command and result (ok, or error for an error reply)."}, []string{"command", "result"})
	m := &metrics{
		unknown: commands.WithLabelValues("unknown", "error"),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "limiterd_resp_connections_refused_total",
			Help: "Redis protocol connections refused: at max clients, or while shutting down."}),
		protocolErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "limiterd_resp_protocol_errors_total",
			Help: "Redis protocol connections closed for a command over the size cap or that could not be framed."}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "limiterd_resp_connections",
			Help: "Redis protocol connections open."}),
	}
	for _, c := range cmds {
		c.ok = commands.WithLabelValues(c.name, "ok")
		c.failed = commands.WithLabelValues(c.name, "error")
	}
	if reg != nil {
		reg.MustRegister(commands, m.refused, m.protocolErrors, m.conns)
	}
	return m
}
