package resp

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limiterd/limiterd/internal/reqmetrics"
	"github.com/limiterd/limiterd/service"
)

type counter = prometheus.Counter

// metrics are the front's Prometheus metrics; the command label takes
// only the table's names (and "unknown"), so their series are bounded.
type metrics struct {
	unknown, refused, protocolErrors prometheus.Counter
	authTimeouts                     prometheus.Counter
	conns                            prometheus.Gauge
	// req are the request metrics every front records (front="resp"):
	// the latency of each RL.* command and, reported by the service, the
	// decisions by namespace and kind. Calls by result are counted above,
	// per pipeline, and the connection and server commands are not timed,
	// so a command pays only its clock reads and one histogram
	// observation.
	req *reqmetrics.Metrics
}

// newMetrics makes the metrics, gives every command of cmds its series,
// and registers them with reg (none when reg is nil). Every RL.*
// command's run is wrapped to record its latency; svc tells which
// namespaces are configured.
func newMetrics(reg prometheus.Registerer, cmds map[string]*command, svc *service.Service) *metrics {
	commands := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_resp_commands_total",
		Help: "Redis protocol commands run, by command and result (ok, or error for an error reply)."}, []string{"command", "result"})
	m := &metrics{
		unknown: commands.WithLabelValues("unknown", "error"),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "limiterd_resp_connections_refused_total",
			Help: "Redis protocol connections refused: at max clients, or while shutting down."}),
		protocolErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "limiterd_resp_protocol_errors_total",
			Help: "Redis protocol connections closed for a command over the size cap or that could not be framed."}),
		authTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Name: "limiterd_resp_auth_timeouts_total",
			Help: "Redis protocol connections closed for not authenticating within the authentication deadline."}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{Name: "limiterd_resp_connections",
			Help: "Redis protocol connections open."}),
	}
	var names []string
	for name, c := range cmds {
		if c.group == groupLimiter {
			names = append(names, name)
		}
	}
	configured := func(name string) bool { _, err := svc.Namespace(name); return err == nil }
	m.req = reqmetrics.New(reg, reqmetrics.Config{Front: "resp", Methods: names, Configured: configured})
	for _, c := range cmds {
		c.ok = commands.WithLabelValues(c.name, "ok")
		c.failed = commands.WithLabelValues(c.name, "error")
		if c.group == groupLimiter {
			c.run = observe(c.run, m.req.Method(c.name))
		}
	}
	if reg != nil {
		reg.MustRegister(commands, m.refused, m.protocolErrors, m.authTimeouts, m.conns)
	}
	return m
}

// observe wraps a command's run to record its latency.
func observe(run func(*Server, *call), md *reqmetrics.Method) func(*Server, *call) {
	return func(s *Server, x *call) {
		// Offsets from the server's start read the monotonic clock
		// alone: one clock read each, where time.Now takes two.
		start := time.Since(s.started)
		run(s, x)
		md.Latency(time.Since(s.started) - start)
	}
}
