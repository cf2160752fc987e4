package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	gosync "sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"

	"github.com/limiterd/limiterd/auth"
	envoyfront "github.com/limiterd/limiterd/front/envoy"
	"github.com/limiterd/limiterd/internal/certreload"
	"github.com/limiterd/limiterd/internal/config"
	"github.com/limiterd/limiterd/internal/connlimit"
	"github.com/limiterd/limiterd/internal/live"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
	clustersync "github.com/limiterd/limiterd/sync"
)

// daemon is one running limiterd: everything wired in one place.
type daemon struct {
	log  *slog.Logger
	node *node.Node
	svc  *service.Service
	// authz authorizes every call when the config has an auth section
	// (auth.go).
	authz *auth.Authorizer
	reg   *prometheus.Registry
	inc   string
	// envoy serves Envoy's rate limit service on the gRPC listener, when
	// configured.
	envoy *envoyfront.Server
	// tls is every listener's certificate when TLS is configured (tls.go).
	tls *certreload.Reloader
	// cfg is the config the daemon started with: its listeners and
	// other sections that change only at a restart. The running
	// namespaces and stores are owner's.
	cfg   config.Config
	owner *live.Owner
	// configPath is the config file, watched for changes; "" without one.
	configPath string

	// tracer traces calls and store round trips (a no-op one unless
	// tracing is configured); stopTracing flushes it at exit.
	tracer      trace.TracerProvider
	stopTracing func(context.Context) error

	// bg is the context of the background loops, loops their goroutines.
	bg     context.Context
	stopBG context.CancelFunc
	loops  gosync.WaitGroup
	// ready is what /readyz and gRPC health say: serving, until a stop
	// begins.
	ready atomic.Bool
	// capRefusals counts the connections closed at the per-address cap,
	// by listener (limits.go).
	capsOnce    gosync.Once
	capRefusals *prometheus.CounterVec
}

// A listener is one server on its own address: a front, or the operators'
// HTTP endpoints.
type listener struct {
	name string
	lis  net.Listener
	// serve serves on lis until shutdown; its error is why it stopped.
	serve func(net.Listener) error
	// shutdown stops serving: at once when ctx ends.
	shutdown func(ctx context.Context)
	// operator listeners stop after the final pushes, so that their
	// metrics and health cover the shutdown.
	operator bool
	// drain, when set on an operator listener, stops the calls of the
	// front it also serves (the JSON API) with the fronts: before the
	// final pushes, at once when ctx ends.
	drain func(ctx context.Context)
	// unready, when set, makes the listener's own health checks say
	// "not serving" while it still serves (the drain delay).
	unready func()
}

// listenerOpeners open the listeners of a daemon, each defined in a file of
// its own (listen_*.go, http.go). An opener returns nil when the config
// turns its listener off.
// The JSON API is served on the HTTP listener (listen_http_api.go).
var listenerOpeners = []func(*daemon) (*listener, error){listenGRPC, listenHTTP, listenRESP, listenAdmin}

// defaultStopTimeout bounds the graceful stop of the fronts when the
// config sets no stop_timeout: calls still running after it are cut off.
const defaultStopTimeout = 5 * time.Second

// errFinalPush is serve's error when a namespace's last push failed.
var errFinalPush = errors.New("final push failed: counts not yet stored are lost")

func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	return serveWith(ctx, cfg, log, os.Getenv, "", nil)
}

// serveWith serves cfg, reading store secrets with getenv and, when load
// is set, reloading the config with it on SIGHUP and when the file at
// path changes.
func serveWith(ctx context.Context, cfg config.Config, log *slog.Logger, getenv func(string) string, path string, load func() (config.Config, error)) error {
	d, err := newDaemon(ctx, cfg, log, getenv, load)
	if err != nil {
		return err
	}
	d.configPath = path
	defer d.owner.CloseStores()
	defer d.stopLoops()

	_, caps := d.connections()
	log.Info("connection caps", "per_listener", caps.Total, "per_address", caps.PerAddress, "descriptor_limit", connlimit.DescriptorLimit())
	var ls []*listener
	for _, open := range listenerOpeners {
		l, err := open(d)
		if err != nil {
			for _, l := range ls {
				l.lis.Close()
			}
			return err
		}
		if l != nil {
			ls = append(ls, l)
		}
	}

	// Background work besides the sync loops: reclaim, Envoy's rules,
	// reloads.
	d.loops.Go(func() { d.node.Run(d.bg) })
	if d.envoy != nil {
		d.loops.Go(func() { d.envoy.Watch(d.bg, cfg.Envoy.Poll()) })
	}
	if load != nil {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		d.loops.Go(func() {
			defer signal.Stop(hup)
			d.owner.Watch(d.bg, path, hup)
		})
	}
	d.loops.Go(func() { d.owner.Probe(d.bg) })

	errc := make(chan error, len(ls))
	attrs := []any{"node", cfg.NodeName, "incarnation", d.inc, "namespaces", len(d.node.Namespaces())}
	for _, l := range ls {
		go func() {
			err := l.serve(l.lis)
			if err == nil {
				return // shut down
			}
			if l.operator { // no reason to stop serving the fronts
				log.Error("server stopped", "server", l.name, "err", err)
				return
			}
			errc <- fmt.Errorf("%s server stopped: %w", l.name, err)
		}()
		attrs = append(attrs, l.name, l.lis.Addr().String())
	}
	d.ready.Store(true)
	log.Info("limiterd serving", attrs...)

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	// Readiness drops first; the fronts serve on for the drain delay, so
	// that load balancers stop sending calls before the listeners close.
	drain := time.Duration(cfg.DrainDelay)
	log.Info("shutting down", "drain_delay", drain)
	d.ready.Store(false)
	for _, l := range ls {
		if l.unready != nil {
			l.unready()
		}
	}
	if err == nil && drain > 0 {
		t := time.NewTimer(drain)
		select {
		case <-t.C:
		case err = <-errc:
			t.Stop()
		}
	}
	stop := func(operator bool, timeout time.Duration) {
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		var stopping gosync.WaitGroup
		for _, l := range ls {
			switch {
			case l.operator == operator:
				stopping.Go(func() { l.shutdown(sctx) })
			case !operator && l.drain != nil:
				stopping.Go(func() { l.drain(sctx) })
			}
		}
		stopping.Wait()
	}
	stopTimeout := defaultStopTimeout
	if cfg.StopTimeout > 0 {
		stopTimeout = time.Duration(cfg.StopTimeout)
	}
	stop(false, stopTimeout)
	// Every call has returned: the final pushes see every hit.
	d.stopLoops()
	stop(true, time.Second)
	if err == nil && d.owner.FinalPushFailed() {
		err = errFinalPush
	}
	tctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if terr := d.stopTracing(tctx); terr != nil {
		log.Warn("flushing traces", "err", terr)
	}
	return err
}

// stopLoops ends the background loops, the sync loops with their final
// pushes, and waits for them.
func (d *daemon) stopLoops() {
	d.stopBG()
	d.loops.Wait()
	d.owner.Stop()
}

func newDaemon(ctx context.Context, cfg config.Config, log *slog.Logger, getenv func(string) string, load func() (config.Config, error)) (*daemon, error) {
	n, err := node.New(nil, newClock(getenv))
	if err != nil {
		return nil, err
	}
	certs, err := openTLS(cfg.TLS, cfg.Auth != nil, log)
	if err != nil {
		return nil, err
	}
	d := &daemon{cfg: cfg, log: log, node: n, reg: prometheus.NewRegistry(), inc: clustersync.NewIncarnation(cfg.NodeName), tls: certs}
	live.WarnReadableByAll(log, &cfg)
	d.bg, d.stopBG = context.WithCancel(context.WithoutCancel(ctx))
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.reg.MustRegister(namespaceCollector{d})
	if err := d.openTelemetry(ctx); err != nil {
		return nil, err
	}
	if d.svc, err = service.New(n); err != nil {
		return nil, err
	}
	// The authorizer every front consults; the owner replaces its
	// credentials at each reload.
	creds, err := cfg.Authorizer(getenv)
	if err != nil {
		return nil, err
	}
	if creds != nil {
		d.authz = new(auth.Authorizer)
		d.authz.Replace(creds)
		d.svc = d.svc.WithAuthorizer(d.authz)
		log.Info("authorization on", "tokens", len(cfg.Auth.Tokens), "identities", len(cfg.Auth.Identities))
	}
	opts := live.Options{Log: log, Node: n, Service: d.svc, Incarnation: d.inc, Versions: clustersync.NewVersions(time.Now),
		Getenv: getenv, Metrics: live.NewSyncMetrics(d.reg), Load: load, Authorizer: d.authz}
	if cfg.Tracing.Endpoint != "" {
		opts.Tracer = d.tracer
	}
	d.owner = live.New(opts)
	fail := func(err error) (*daemon, error) {
		d.stopLoops()
		d.owner.CloseStores()
		return nil, err
	}
	if _, err := d.owner.Apply(ctx, cfg); err != nil {
		return fail(err)
	}
	if d.envoy, err = openEnvoy(d); err != nil {
		return fail(err)
	}
	return d, nil
}
