package resp

import (
	"bufio"
	"io"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetrics: commands are counted by name and result, once their
// pipeline is answered; refused connections and protocol errors too.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := New(newService(t, nil), Config{MaxClients: 1, MaxCommandSize: 1024}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(ln)
	defer s.Shutdown(t.Context())
	c := dial(t, ln.Addr().String())
	r := bufio.NewReader(c)
	io.WriteString(c, "RL.REDUCE k 2 60\r\nRL.REDUCE k 2 60\r\nRL.REDUCE k x 60\r\nNOSUCH\r\nPING\r\n")
	for range 5 {
		readLine(t, c, r)
	}
	waitConns(t, s, 1)
	refused := dial(t, ln.Addr().String()) // over MaxClients
	readLine(t, refused, bufio.NewReader(refused))
	io.WriteString(c, "*2\r\n$4\r\nECHO\r\n$5000\r\n")
	readLine(t, c, r)
	waitConns(t, s, 0)
	for name, want := range map[string]float64{
		"limiterd_resp_connections": 0, "limiterd_resp_connections_refused_total": 1, "limiterd_resp_protocol_errors_total": 1,
	} {
		if got := metricValue(t, reg, name, nil); got != want {
			t.Errorf("%s = %v; want %v", name, got, want)
		}
	}
	for _, c := range []struct {
		cmd, result string
		want        float64
	}{{"ping", "ok", 1}, {"rl.reduce", "ok", 2}, {"rl.reduce", "error", 1}, {"unknown", "error", 1}, {"echo", "ok", 0}} {
		if got := metricValue(t, reg, "limiterd_resp_commands_total", map[string]string{"command": c.cmd, "result": c.result}); got != c.want {
			t.Errorf("%s %s: %v; want %v", c.cmd, c.result, got, c.want)
		}
	}
}

// metricValue reads the counter or gauge name with the labels want (nil:
// the only series); 0 when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if want[l.GetName()] != l.GetValue() {
					continue series
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
