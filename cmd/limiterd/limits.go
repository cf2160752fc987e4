package main

import (
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/limiterd/limiterd/internal/config"
	"github.com/limiterd/limiterd/internal/connlimit"
)

// connections is the connections section with its defaults, the caps
// derived from the descriptor limit included.
func (d *daemon) connections() (config.ConnectionsConfig, connlimit.Limits) {
	c := d.cfg.Connections.WithDefaults()
	l := connlimit.Defaults(connlimit.DescriptorLimit(), d.listenerCount())
	if c.Max > 0 {
		l.Total = c.Max
		l.PerAddress = max(c.Max/2, 1)
	}
	if c.MaxPerAddress > 0 {
		l.PerAddress = c.MaxPerAddress
	}
	return c, l
}

// listenerCount is how many listeners the config opens, among which the
// default caps share the descriptors.
func (d *daemon) listenerCount() int {
	n := 1 // gRPC
	on := func(addr string) bool { return addr != "" && addr != "off" }
	if on(d.cfg.HTTPAddr) {
		n++
	}
	if on(d.cfg.RESPAddr) {
		n++
	}
	if a, err := config.AdminAddr(d.cfg.AdminAddr); err == nil && a != "" {
		n++
	}
	return n
}

// limitListener is the listener called name held to the connection
// caps.
func (d *daemon) limitListener(name string, lis net.Listener) net.Listener {
	_, l := d.connections()
	d.capsOnce.Do(func() {
		d.capRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "limiterd_connections_refused_total",
			Help: "Connections closed as soon as accepted: their client address held connections.max_per_address of the listener already."}, []string{"listener"})
		d.reg.MustRegister(d.capRefusals)
	})
	return connlimit.Listen(lis, l, d.capRefusals.WithLabelValues(name).Inc)
}

// duration is a config duration as a time.Duration.
func duration(v config.Duration) time.Duration { return time.Duration(v) }
