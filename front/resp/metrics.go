package resp

import (
	"bytes"
	"strconv"
	"sync/atomic"
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
	conns                            prometheus.Gauge
	// req are the request metrics every front records (front="resp"):
	// the latency of each RL.* command and the decisions of those that
	// decide, by namespace and kind. Calls by result are counted above,
	// per pipeline, and the connection and server commands are not timed,
	// so a command pays only its clock reads and one histogram
	// observation.
	req *reqmetrics.Metrics
	// svc is the server's service, which tells the configured
	// namespaces: kept by the first decision recorded, as the metrics are
	// made before the server.
	svc atomic.Pointer[service.Service]
}

// newMetrics makes the metrics, gives every command of cmds its series,
// and registers them with reg (none when reg is nil). Every RL.*
// command's run is wrapped to record its latency and, for the commands
// that decide, the decision.
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
	var names []string
	for name, c := range cmds {
		if c.group == groupLimiter {
			names = append(names, name)
		}
	}
	m.req = reqmetrics.New(reg, reqmetrics.Config{Front: "resp", Methods: names, Configured: m.configured})
	for _, c := range cmds {
		c.ok = commands.WithLabelValues(c.name, "ok")
		c.failed = commands.WithLabelValues(c.name, "error")
		if c.group == groupLimiter {
			c.run = m.observe(c.run, m.req.Method(c.name), decider(c.name))
		}
	}
	if reg != nil {
		reg.MustRegister(commands, m.refused, m.protocolErrors, m.conns)
	}
	return m
}

// configured reports whether the service serves the namespace name.
func (m *metrics) configured(name string) bool {
	svc := m.svc.Load()
	if svc == nil {
		return false
	}
	_, err := svc.Node().Namespace(name)
	return err == nil
}

// observe wraps a command's run to record its latency and, when decide
// is set and the command answered without an error, its decision.
func (m *metrics) observe(run func(*Server, *call), md *reqmetrics.Method, decide decideFunc) func(*Server, *call) {
	return func(s *Server, x *call) {
		start := time.Now()
		from, errs := len(x.w.b), x.w.errors
		run(s, x)
		if decide != nil && x.w.errors == errs {
			if k, allowed, ok := decide(x.args, x.w.b[from:]); ok {
				if m.svc.Load() == nil {
					m.svc.Store(s.svc)
				}
				m.req.DecisionBytes(nsArg(x.args), k, allowed)
			}
		}
		md.Latency(time.Since(start))
	}
}

// decideFunc reads a command's decision from its arguments and its reply
// (ok false: the reply holds none).
type decideFunc func(args [][]byte, reply []byte) (k reqmetrics.Kind, allowed, ok bool)

// decider returns the decideFunc of a command that decides (nil for the
// others: they read or count, and decide nothing).
func decider(name string) decideFunc {
	first := func(k reqmetrics.Kind) decideFunc {
		return func(_ [][]byte, reply []byte) (reqmetrics.Kind, bool, bool) {
			allowed, ok := firstBool(reply)
			return k, allowed, ok
		}
	}
	switch name {
	case "rl.allow":
		return first(reqmetrics.SlidingWindow)
	case "rl.leaky":
		return first(reqmetrics.LeakyBucket)
	case "rl.fixed":
		return first(reqmetrics.FixedBucket)
	case "rl.acquire":
		return first(reqmetrics.Concurrency)
	case "rl.reduce", "rl.preduce":
		return tokenDecision
	}
	return nil
}

// firstBool reads the value of a map reply's first pair (allowed or
// acquired): a RESP3 boolean or a RESP2 integer. The reply is the map's
// header, the key's bulk header, the key, then the value.
func firstBool(reply []byte) (v, ok bool) {
	for range 3 {
		i := bytes.IndexByte(reply, '\n')
		if i < 0 {
			return false, false
		}
		reply = reply[i+1:]
	}
	switch {
	case bytes.HasPrefix(reply, []byte("#t\r\n")), bytes.HasPrefix(reply, []byte(":1\r\n")):
		return true, true
	case bytes.HasPrefix(reply, []byte("#f\r\n")), bytes.HasPrefix(reply, []byte(":0\r\n")):
		return false, true
	}
	return false, false
}

// tokenDecision reads RL.REDUCE's decision: its reply is the tokens held
// before the take, which was admitted when they were enough (Smyte's
// meaning).
func tokenDecision(args [][]byte, reply []byte) (reqmetrics.Kind, bool, bool) {
	if len(reply) < 4 || reply[0] != ':' {
		return reqmetrics.TokenBucket, false, false
	}
	before, err := strconv.ParseInt(string(bytes.TrimSuffix(reply[1:], []byte("\r\n"))), 10, 64)
	if err != nil {
		return reqmetrics.TokenBucket, false, false
	}
	// The options as tokenCmd reads them: STRICT alone, every other
	// keyword with its value (which may read TAKE: a namespace's name).
	take := int64(1)
	for i := 4; i < len(args); i += 2 {
		if eqFold(args[i], "STRICT") {
			i--
			continue
		}
		if eqFold(args[i], "TAKE") && i+1 < len(args) {
			if take, err = strconv.ParseInt(string(args[i+1]), 10, 64); err != nil {
				return reqmetrics.TokenBucket, false, false
			}
		}
	}
	return reqmetrics.TokenBucket, before >= take, true
}

// nsArg is an RL.* command's NS value (nil: none, the default). The
// options follow the key and positional numbers, none of which can read
// NS, so the first NS found is the keyword.
func nsArg(args [][]byte) []byte {
	for i := 2; i+1 < len(args); i++ {
		if eqFold(args[i], "NS") {
			return args[i+1]
		}
	}
	return nil
}
