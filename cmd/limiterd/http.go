package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	httpfront "github.com/limiterd/limiterd/front/http"
)

// listenHTTP opens the operators' endpoints on cfg.HTTPAddr, unless it is
// "off" (or empty).
func listenHTTP(d *daemon) (*listener, error) {
	if d.cfg.HTTPAddr == "" || d.cfg.HTTPAddr == "off" {
		return nil, nil
	}
	lis, err := net.Listen("tcp", d.cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("http listen: %w", err)
	}
	mux := d.httpHandler()
	api, m, err := d.mountHTTPAPI(mux)
	if err != nil {
		lis.Close()
		return nil, err
	}
	var srv *http.Server
	l := d.httpListener("http", lis, mux, func(s *http.Server) { srv = s })
	l.drain = api.Shutdown
	if d.tls == nil {
		// The JSON API's common Allow calls are answered without
		// net/http's server, at a fraction of its cost; every other
		// request as before. With TLS, net/http serves all (HTTP/2).
		fast := api.Listen(l.lis, m, httpfront.ServerTimeouts(srv))
		l.lis = fast
		shutdown := l.shutdown
		l.shutdown = func(ctx context.Context) {
			shutdown(ctx)
			fast.Shutdown(ctx)
		}
	}
	return l, nil
}

// httpListener serves h on lis (with TLS when configured) as the listener
// called name, one of the operator's.
func (d *daemon) httpListener(name string, lis net.Listener, h http.Handler, opts ...func(*http.Server)) *listener {
	cc, _ := d.connections()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ErrorLog: d.httpErrorLog(name),
		ReadTimeout: duration(cc.ReadTimeout), WriteTimeout: duration(cc.WriteTimeout), IdleTimeout: duration(cc.IdleTimeout)}
	for _, o := range opts {
		o(srv)
	}
	return &listener{
		name: name,
		lis:  d.tlsListener(d.limitListener(name, lis), "h2", "http/1.1"),
		serve: func(l net.Listener) error {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
		shutdown: func(ctx context.Context) { _ = srv.Shutdown(ctx) },
		operator: true,
	}
}

// httpHandler serves /metrics, /healthz and /readyz; Go's profiles are
// on the admin listener (admin.go). /readyz means
// "serving" (and serving some namespace) and never depends on a store, or one store outage would take
// every restarted node out of its load balancer; store health is in
// /healthz and the metrics.
func (d *daemon) httpHandler() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case !d.ready.Load():
			http.Error(w, "stopping", http.StatusServiceUnavailable)
		case len(d.node.Namespaces()) == 0:
			// Every call would be NOT_FOUND: load balancers send calls
			// to the nodes that serve some.
			http.Error(w, "serving no namespace", http.StatusServiceUnavailable)
		default:
			w.Write([]byte("ok\n"))
		}
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		type nsHealth struct {
			Namespace   string `json:"namespace"`
			Store       string `json:"store"`
			Healthy     bool   `json:"healthy"`
			LastSuccess string `json:"last_success,omitempty"`
			LastError   string `json:"last_error,omitempty"`
		}
		type stHealth struct {
			Store     string `json:"store"`
			Up        bool   `json:"up"`
			Since     string `json:"since"`
			Checked   string `json:"checked"`
			LastError string `json:"last_error,omitempty"`
		}
		out := struct {
			Status      string     `json:"status"`
			Node        string     `json:"node"`
			Incarnation string     `json:"incarnation"`
			Stores      []stHealth `json:"stores"`
			Namespaces  []nsHealth `json:"namespaces"`
		}{Status: "ok", Node: d.cfg.NodeName, Incarnation: d.inc, Stores: []stHealth{}, Namespaces: []nsHealth{}}
		for _, s := range d.owner.Stores() {
			out.Stores = append(out.Stores, stHealth{Store: s.Name, Up: s.Up, LastError: s.Err,
				Since: s.Since.UTC().Format(time.RFC3339Nano), Checked: s.Checked.UTC().Format(time.RFC3339Nano)})
			if !s.Up {
				out.Status = "degraded"
			}
		}
		for name, ls := range d.owner.Syncers() {
			last, err := ls.Syncer.Status()
			h := nsHealth{Namespace: name, Store: ls.Syncer.StoreName(), Healthy: err == nil}
			if !last.IsZero() {
				h.LastSuccess = last.UTC().Format(time.RFC3339Nano)
			}
			if err != nil {
				h.LastError = err.Error()
				out.Status = "degraded"
			}
			out.Namespaces = append(out.Namespaces, h)
		}
		sort.Slice(out.Namespaces, func(i, j int) bool { return out.Namespaces[i].Namespace < out.Namespaces[j].Namespace })
		w.Header().Set("Content-Type", "application/json")
		// 200 even when degraded: the node still serves from local
		// counts, and a liveness probe must not restart every node of a
		// cluster because their store is down.
		json.NewEncoder(w).Encode(out)
	})
	return mux
}

// namespaceCollector exposes the engine's counters and the sync age of
// every namespace the node serves at the time of the scrape, so that
// namespaces added or removed at run time come and go with their series.
type namespaceCollector struct{ d *daemon }

var (
	nsLabel         = []string{"limiter_namespace"} // see live.NewSyncMetrics
	descActiveKeys  = prometheus.NewDesc("limiterd_active_keys", "Keys held in memory.", nsLabel, nil)
	descRefused     = prometheus.NewDesc("limiterd_keys_refused_total", "New keys refused at the namespace's key cap.", nsLabel, nil)
	descEvicted     = prometheus.NewDesc("limiterd_evicted_keys_total", "Idle keys evicted for new ones at the namespace's key cap (on_full: evict).", nsLabel, nil)
	descBuckets     = prometheus.NewDesc("limiterd_active_buckets", "Token, leaky and fixed buckets held in memory.", nsLabel, nil)
	descBucketsRef  = prometheus.NewDesc("limiterd_buckets_refused_total", "New buckets refused at the namespace's key cap.", nsLabel, nil)
	descDropped     = prometheus.NewDesc("limiterd_windows_dropped_total", "Windows reclaimed before their counts could be pushed (long store outage).", nsLabel, nil)
	descStoreUp     = prometheus.NewDesc("limiterd_store_up", "1 when the store answered its last probe (every 2 s), else 0.", []string{"store"}, nil)
	descSinceSynced = prometheus.NewDesc("limiterd_sync_seconds_since_success", "Seconds since the namespace's last fully successful sync (since its syncer started if none yet).", nsLabel, nil)
)

func (namespaceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descActiveKeys, descRefused, descEvicted, descBuckets, descBucketsRef, descDropped, descSinceSynced, descStoreUp} {
		ch <- d
	}
}

func (c namespaceCollector) Collect(ch chan<- prometheus.Metric) {
	for _, ns := range c.d.node.Namespaces() {
		name, st := ns.Name(), ns.Stats()
		ch <- prometheus.MustNewConstMetric(descActiveKeys, prometheus.GaugeValue, float64(st.ActiveKeys), name)
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(st.RefusedKeys), name)
		ch <- prometheus.MustNewConstMetric(descEvicted, prometheus.CounterValue, float64(st.EvictedKeys), name)
		ch <- prometheus.MustNewConstMetric(descBuckets, prometheus.GaugeValue, float64(st.ActiveBuckets), name)
		ch <- prometheus.MustNewConstMetric(descBucketsRef, prometheus.CounterValue, float64(st.RefusedBuckets), name)
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(st.DroppedWindows), name)
	}
	for _, s := range c.d.owner.Stores() {
		up := 0.0
		if s.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descStoreUp, prometheus.GaugeValue, up, s.Name)
	}
	for name, ls := range c.d.owner.Syncers() {
		last, _ := ls.Syncer.Status()
		if last.IsZero() {
			last = ls.Started
		}
		ch <- prometheus.MustNewConstMetric(descSinceSynced, prometheus.GaugeValue, time.Since(last).Seconds(), name)
	}
}
