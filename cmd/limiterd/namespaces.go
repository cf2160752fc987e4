package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/limiterd/limiterd/internal/storetrace"
	"github.com/limiterd/limiterd/node"
	clustersync "github.com/limiterd/limiterd/sync"
)

// The namespaces change while the daemon serves: at start (from none), on
// a reload of the config file and through the admin API. apply takes a
// whole new config, validated, and moves the node to its namespaces and
// stores without failing a call:
//
//  1. it opens the stores the new namespaces need (a store whose options
//     are the same stays open) and builds the namespaces and syncers the
//     change adds or replaces; any error here changes nothing;
//  2. the node and the service switch to them at once (node.Commit,
//     Service.Reroute); calls that started before finish on the old ones;
//  3. each replaced or removed namespace's syncer stops, pushing what it
//     counted to its store; a replaced namespace's counts are copied to
//     its successor (node.Replacement.CopyWindows), which pushes them to
//     its own store;
//  4. the new syncers start, and stores nobody uses any more close.
//
// Until step 3 ends, a replaced namespace's decisions see only the hits
// counted since the change (microseconds for a local namespace; up to a
// final push for a syncing one).

// liveSyncer is a running namespace syncer.
type liveSyncer struct {
	s     *clustersync.Syncer
	store *openStore
	cfg   clustersync.Config
	stop  context.CancelFunc
	done  chan struct{}
	// started is when the loop started, the age of a sync never done.
	started time.Time
}

// openStore is a store the daemon opened, with the options it was opened
// with, to tell whether a new config changes it.
type openStore struct {
	name string
	st   clustersync.Store
	opts any
}

// rerouteTimeout bounds the wait for the calls still running on replaced
// namespaces: longer than any call (a synchronous call is bounded by the
// store call timeout).
const rerouteTimeout = 30 * time.Second

// apply makes cfg's namespaces and stores the daemon's. It returns a
// one-line summary of what changed. On error nothing changed. Changes to
// other sections (listeners, TLS, auth, ...) wait for a restart; the
// summary says so.
func (d *daemon) apply(ctx context.Context, cfg Config) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.applyLocked(ctx, cfg)
}

// update applies the running config as edit changes it, validated: the
// admin API's changes, one at a time.
func (d *daemon) update(ctx context.Context, edit func(*Config) error) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cfg := d.cfg
	cfg.Namespaces = slices.Clone(cfg.Namespaces)
	if err := edit(&cfg); err != nil {
		return "", err
	}
	if err := cfg.Validate(); err != nil {
		return "", err
	}
	return d.applyLocked(ctx, cfg)
}

func (d *daemon) applyLocked(ctx context.Context, cfg Config) (string, error) {
	running := d.cfg

	// Which stores stay: a name whose type and options are the same.
	opts := map[string]any{}
	for name, sc := range cfg.Stores {
		sc, err := resolveStoreSecrets(sc, d.getenv)
		if err == nil {
			opts[name], err = decodeStoreOptions(sc)
		}
		if err != nil {
			return "", fmt.Errorf("store %q: %w", name, err)
		}
	}
	var renew []string
	for _, nc := range cfg.NodeConfigs() {
		ls := d.syncers[nc.Name]
		if ls == nil {
			continue
		}
		if !reflect.DeepEqual(opts[nc.Store], ls.store.opts) || !reflect.DeepEqual(cfg.NamespaceSyncerConfig(nc.Name), ls.cfg) {
			renew = append(renew, nc.Name)
		}
	}
	change, err := d.node.Prepare(cfg.NodeConfigs(), renew...)
	if err != nil {
		return "", err
	}
	if err := d.envoyKeeps(change); err != nil {
		return "", err
	}

	// Syncers of the added and replaced namespaces, on stores kept open
	// or opened now.
	opened := map[string]*openStore{}
	fail := func(err error) (string, error) {
		for _, o := range opened {
			_ = o.st.Close()
		}
		return "", err
	}
	storeFor := func(name string) (*openStore, error) {
		for _, ls := range d.syncers {
			if ls.store.name == name && reflect.DeepEqual(ls.store.opts, opts[name]) {
				return ls.store, nil
			}
		}
		if o := opened[name]; o != nil {
			return o, nil
		}
		st, err := openStoreConfig(ctx, name, cfg.Stores[name], d.getenv, d.log)
		if err != nil {
			return nil, fmt.Errorf("store %q: %w", name, err)
		}
		o := &openStore{name: name, st: st, opts: opts[name]}
		opened[name] = o
		return o, nil
	}
	created := map[string]*liveSyncer{}
	fresh := slices.Clone(change.Added)
	for _, r := range change.Replaced {
		fresh = append(fresh, r.New)
	}
	for _, ns := range fresh {
		nc := ns.Config()
		if nc.Mode() == node.LocalOnly {
			continue
		}
		o, err := storeFor(nc.Store)
		if err != nil {
			return fail(err)
		}
		sc := cfg.NamespaceSyncerConfig(nc.Name)
		traced := sc // sc stays comparable (a func never is)
		if d.cfg.Tracing.Endpoint != "" {
			traced.Trace = storetrace.Hook(d.tracer, nc.Store)
		}
		s, err := clustersync.NewSyncer(ns, o.st, d.inc, d.versions, traced, d.log, d.syncMetrics)
		if err != nil {
			return fail(err)
		}
		created[nc.Name] = &liveSyncer{s: s, store: o, cfg: sc}
	}

	// Switch.
	next := map[string]*liveSyncer{}
	for _, ns := range change.Kept {
		if ls := d.syncers[ns.Name()]; ls != nil {
			next[ns.Name()] = ls
		}
	}
	maps.Copy(next, created)
	var all []*clustersync.Syncer
	for _, ls := range next {
		all = append(all, ls.s)
	}
	if err := d.node.Commit(change); err != nil {
		return fail(err) // d.mu serialises changes: not expected
	}
	rctx, cancel := context.WithTimeout(ctx, rerouteTimeout)
	err = d.svc.Reroute(rctx, all...)
	cancel()
	if err != nil {
		d.log.Warn("copying the counts of replaced namespaces while calls still run on them; their last hits may be missed", "err", err)
	}

	// Retire the old namespaces: their last pushes, at once, then their
	// counts.
	var retired []*liveSyncer
	for _, r := range change.Replaced {
		retired = append(retired, d.syncers[r.Old.Name()])
	}
	for _, ns := range change.Removed {
		retired = append(retired, d.syncers[ns.Name()])
		d.syncMetrics.forget(ns.Name())
	}
	d.stopSyncers(retired)
	now := d.node.Clock().Now()
	for _, r := range change.Replaced {
		old, nw := d.syncers[r.Old.Name()], created[r.New.Name()]
		sameStore := old != nil && nw != nil && old.store == nw.store
		if refused := r.CopyWindows(now, sameStore); refused > 0 {
			d.log.Warn("keys not copied to the changed namespace: its key cap is reached", "namespace", r.New.Name(), "keys", refused)
		}
	}
	for _, ls := range created {
		d.startSyncer(ls)
	}

	// Close the stores nobody uses any more.
	inUse := map[*openStore]bool{}
	for _, ls := range next {
		inUse[ls.store] = true
	}
	for _, ls := range d.syncers {
		if !inUse[ls.store] {
			inUse[ls.store] = true // close once
			if err := ls.store.st.Close(); err != nil {
				d.log.Warn("closing store", "store", ls.store.name, "err", err)
			}
		}
	}
	d.syncers = next
	d.cfg.Namespaces, d.cfg.Stores, d.cfg.Sync, d.cfg.ShutdownTimeout = cfg.Namespaces, cfg.Stores, cfg.Sync, cfg.ShutdownTimeout
	return summarize(change, running, cfg), nil
}

// envoyKeeps refuses a change that removes the namespace Envoy's rate
// limit service counts in, or changes its window sizes: its rules were
// checked against them when they loaded.
func (d *daemon) envoyKeeps(c *node.Change) error {
	if d.envoy == nil {
		return nil
	}
	name := d.envoy.Namespace()
	for _, ns := range c.Removed {
		if ns.Name() == name {
			return &ConfigError{Field: "namespaces", Reason: fmt.Sprintf("namespace %q serves Envoy's rate limit service (envoy.namespace): it stays while limiterd runs", name)}
		}
	}
	for _, r := range c.Replaced {
		if r.Old.Name() == name && !slices.Equal(r.Old.Sizes(), r.New.Sizes()) {
			return &ConfigError{Field: "namespaces", Reason: fmt.Sprintf("namespace %q serves Envoy's rate limit service (envoy.namespace): its window sizes stay while limiterd runs", name)}
		}
	}
	return nil
}

// summarize says what a change did, and what of cfg waits for a restart.
func summarize(c *node.Change, running, cfg Config) string {
	names := func(nss []*node.Namespace) string {
		var s []string
		for _, ns := range nss {
			s = append(s, ns.Name())
		}
		return strings.Join(s, " ")
	}
	var changed []string
	for _, r := range c.Replaced {
		changed = append(changed, r.New.Name())
	}
	out := fmt.Sprintf("added [%s] changed [%s] removed [%s] unchanged [%s]",
		names(c.Added), strings.Join(changed, " "), names(c.Removed), names(c.Kept))
	a, b := running, cfg
	a.Namespaces, a.Stores, a.Sync, a.ShutdownTimeout = nil, nil, SyncConfig{}, 0
	b.Namespaces, b.Stores, b.Sync, b.ShutdownTimeout = nil, nil, SyncConfig{}, 0
	if !reflect.DeepEqual(a, b) {
		out += "; changes outside namespaces, stores and sync take effect at restart"
	}
	return out
}

// startSyncer runs ls's sync loop until stopSyncers or the daemon's end.
// The caller holds d.mu.
func (d *daemon) startSyncer(ls *liveSyncer) {
	if d.bg.Err() != nil {
		return // stopping: the loops are waited for already
	}
	ctx, cancel := context.WithCancel(d.bg)
	ls.stop, ls.done, ls.started = cancel, make(chan struct{}), time.Now()
	d.loops.Go(func() {
		defer close(ls.done)
		if err := ls.s.Run(ctx); err != nil {
			d.finalPushFailed.Store(true) // the syncer logged it
		}
	})
}

// stopSyncers stops the loops of lss (nil ones skipped) and waits for
// their final pushes, made at the same time.
func (d *daemon) stopSyncers(lss []*liveSyncer) {
	for _, ls := range lss {
		if ls != nil && ls.stop != nil {
			ls.stop()
		}
	}
	for _, ls := range lss {
		if ls != nil && ls.stop != nil {
			<-ls.done
		}
	}
}

// syncer returns the running syncer of namespace name, or nil.
func (d *daemon) syncer(name string) *clustersync.Syncer {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ls := d.syncers[name]; ls != nil {
		return ls.s
	}
	return nil
}

// liveSyncers returns every running syncer by namespace.
func (d *daemon) liveSyncers() map[string]*liveSyncer {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.syncers)
}

// openStores returns the stores the running syncers use, each once.
func (d *daemon) openStores() []*openStore {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*openStore
	for _, ls := range d.syncers {
		if !slices.Contains(out, ls.store) {
			out = append(out, ls.store)
		}
	}
	return out
}

// errNoReload is reload's error when limiterd runs without a config file.
var errNoReload = errors.New("limiterd runs on its default config (no --config file): nothing to reload")
