package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	gosync "sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/limiterd/limiterd/auth"
	envoyfront "github.com/limiterd/limiterd/front/envoy"
	"github.com/limiterd/limiterd/internal/certreload"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
	clustersync "github.com/limiterd/limiterd/sync"
)

// daemon is one running limiterd: everything wired in one place.
type daemon struct {
	cfg  Config
	log  *slog.Logger
	node *node.Node
	svc  *service.Service
	// authz authorizes every call when the config has an auth section
	// (auth.go).
	authz   *auth.Authorizer
	stores  map[string]clustersync.Store
	syncers map[string]*clustersync.Syncer
	reg     *prometheus.Registry
	inc     string
	// envoy serves Envoy's rate limit service on the gRPC listener, when
	// configured.
	envoy *envoyfront.Server
	// tls is every listener's certificate when TLS is configured (tls.go).
	tls *certreload.Reloader
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
}

// listenerOpeners open the listeners of a daemon, each defined in a file of
// its own (listen_*.go, http.go). An opener returns nil when the config
// turns its listener off.
// The JSON API is served on the HTTP listener (listen_http_api.go).
var listenerOpeners = []func(*daemon) (*listener, error){listenGRPC, listenHTTP, listenRESP, listenAdmin}

// shutdownTimeout bounds the graceful stop of the fronts: calls still
// running after it are cut off.
const shutdownTimeout = 5 * time.Second

func serve(ctx context.Context, cfg Config, log *slog.Logger) error {
	d, err := newDaemon(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer d.closeStores()

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

	// Background work: reclaim and one sync loop per syncing namespace.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	var wg gosync.WaitGroup
	wg.Go(func() { d.node.Run(bg) })
	if d.envoy != nil {
		wg.Go(func() { d.envoy.Watch(bg, cfg.Envoy.envoyPoll()) })
	}
	for name, s := range d.syncers {
		wg.Go(func() {
			if err := s.Run(bg); err != nil {
				log.Error("final push failed", "namespace", name, "err", err)
			}
		})
	}

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
	log.Info("limiterd serving", attrs...)

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	log.Info("shutting down")
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
	stop(false, shutdownTimeout)
	// Every call has returned: the final pushes see every hit.
	stopBG()
	wg.Wait()
	stop(true, time.Second)
	return err
}

func newDaemon(ctx context.Context, cfg Config, log *slog.Logger) (*daemon, error) {
	n, err := node.New(cfg.NodeConfigs(), node.SystemClock{})
	if err != nil {
		return nil, err
	}
	certs, err := openTLS(cfg.TLS, log)
	if err != nil {
		return nil, err
	}
	d := &daemon{
		cfg: cfg, log: log, node: n, reg: prometheus.NewRegistry(),
		stores: map[string]clustersync.Store{}, syncers: map[string]*clustersync.Syncer{},
		inc: clustersync.NewIncarnation(cfg.NodeName), tls: certs,
	}
	d.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.registerNodeMetrics()
	metrics := newSyncMetrics(d.reg)
	versions := clustersync.NewVersions(time.Now)
	var syncers []*clustersync.Syncer
	for _, ns := range n.Namespaces() {
		nc := ns.Config()
		if nc.Mode() == node.LocalOnly {
			continue
		}
		st, ok := d.stores[nc.Store]
		if !ok {
			if st, err = openStore(ctx, nc.Store, cfg.Stores[nc.Store], log); err != nil {
				d.closeStores()
				return nil, fmt.Errorf("store %q: %w", nc.Store, err)
			}
			d.stores[nc.Store] = st
		}
		s, err := clustersync.NewSyncer(ns, st, d.inc, versions, cfg.NamespaceSyncerConfig(nc.Name), log, metrics)
		if err != nil {
			d.closeStores()
			return nil, err
		}
		d.syncers[nc.Name] = s
		syncers = append(syncers, s)
		d.registerSyncMetrics(nc.Name, s)
	}
	if d.svc, err = service.New(n, syncers...); err != nil {
		d.closeStores()
		return nil, err
	}
	if d.authz, err = authorizer(cfg); err != nil {
		d.closeStores()
		return nil, err
	}
	if d.authz != nil {
		d.svc = d.svc.WithAuthorizer(d.authz)
		log.Info("authorization on", "tokens", len(cfg.Auth.Tokens), "identities", len(cfg.Auth.Identities))
	}
	if d.envoy, err = openEnvoy(d); err != nil {
		d.closeStores()
		return nil, err
	}
	return d, nil
}

// storeCloseTimeout bounds closing the stores at exit. A store cut off by
// the network does not answer a polite goodbye (PostgreSQL's pool waits up
// to 15 s per connection for one), and the process's exit closes the
// connections all the same.
const storeCloseTimeout = 2 * time.Second

func (d *daemon) closeStores() { d.closeStoresWithin(storeCloseTimeout) }

// closeStoresWithin closes every store, waiting at most timeout for them.
func (d *daemon) closeStoresWithin(timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for name, s := range d.stores {
			if err := s.Close(); err != nil {
				d.log.Warn("closing store", "store", name, "err", err)
			}
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		d.log.Warn("stores not closed in time; leaving their connections to the exit", "timeout", timeout)
	}
}
