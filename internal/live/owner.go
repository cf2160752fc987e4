// Package live owns the running configuration of a limiterd node: one
// table of what runs per namespace (the node's namespace and its syncer)
// and the stores they use, changed in one way, Apply, by the start, a
// reload of the config file, SIGHUP and the admin API alike.
//
// Apply takes a whole new config, validated, and moves the node to its
// namespaces and stores without failing a call:
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
package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/internal/config"
	"github.com/limiterd/limiterd/internal/storetrace"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
	"go.opentelemetry.io/otel/trace"
)

// liveSyncer is a running namespace syncer.
type liveSyncer struct {
	s     *clustersync.Syncer
	mode  clustersync.Mode
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

// Options are what an Owner needs beside the config it applies.
type Options struct {
	Log     *slog.Logger
	Node    *node.Node
	Service *service.Service
	// Incarnation is this process's, Versions its row versions.
	Incarnation string
	Versions    *clustersync.Versions
	// Getenv reads store secrets of a config that did not come through
	// config.Load.
	Getenv func(string) string
	// Tracer, when set, traces every store round trip.
	Tracer trace.TracerProvider
	// Metrics are the sync loops' metrics (NewSyncMetrics).
	Metrics *SyncMetrics
	// Load reads the config file again for Reload; nil without one.
	Load func() (config.Config, error)
	// Authorizer, when authorization is on, is the one every front
	// consults: each Apply replaces its credentials with those of the
	// config's auth section (its tokens read again), at the switch. A
	// config that turns authorization on or off is refused: the fronts
	// are wired for one or the other at start.
	Authorizer *auth.Authorizer
	// Open opens a store; config.OpenStore when nil.
	Open func(ctx context.Context, name string, sc config.StoreConfig, getenv func(string) string, log *slog.Logger) (clustersync.Store, error)
}

// Owner owns the running configuration: what runs per namespace and the
// stores. Its methods are safe for concurrent use.
type Owner struct {
	opts Options
	// guards refuse changes another part cannot follow (Envoy's
	// namespace); see Guard.
	guards []func(*node.Change) error
	// bg is the context of the sync loops, loops their goroutines.
	bg     context.Context
	stopBG context.CancelFunc
	loops  gosync.WaitGroup
	// finalPushFailed is set when a syncer's last push failed.
	finalPushFailed atomic.Bool
	health          storeHealth

	// mu serialises changes and guards what they change.
	mu      gosync.Mutex
	cfg     config.Config
	applied bool
	syncers map[string]*liveSyncer
}

// New returns an Owner of nothing yet: Apply gives it its first config.
func New(o Options) *Owner {
	if o.Open == nil {
		o.Open = config.OpenStore
	}
	if o.Getenv == nil {
		o.Getenv = func(string) string { return "" }
	}
	ow := &Owner{opts: o, syncers: map[string]*liveSyncer{}}
	ow.bg, ow.stopBG = context.WithCancel(context.Background())
	return ow
}

// Guard adds a check every change must pass before anything changes.
func (o *Owner) Guard(g func(*node.Change) error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.guards = append(o.guards, g)
}

// Config is the running config.
func (o *Owner) Config() config.Config {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.cfg
}

// FinalPushFailed reports whether a namespace's last push failed since
// the start: counts not yet stored were lost.
func (o *Owner) FinalPushFailed() bool { return o.finalPushFailed.Load() }

// Stop ends the sync loops, each with its final push, and waits for them.
// No change starts a loop after it.
func (o *Owner) Stop() {
	o.mu.Lock()
	o.stopBG()
	o.mu.Unlock()
	o.loops.Wait()
}

// rerouteTimeout bounds the wait for the calls still running on replaced
// namespaces: longer than any call (a synchronous call is bounded by the
// store call timeout).
const rerouteTimeout = 30 * time.Second

// Apply makes cfg's namespaces, stores and credentials (its auth section:
// tokens and identities) the running ones. It returns a one-line summary
// of what changed. On error nothing changed. Changes to other sections
// (listeners, TLS, ...) wait for a restart; the summary says so.
func (o *Owner) Apply(ctx context.Context, cfg config.Config) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.applyLocked(ctx, cfg)
}

// NotFoundError is a change naming a namespace that is not configured.
type NotFoundError struct{ Name string }

func (e *NotFoundError) Error() string { return fmt.Sprintf("namespace %q is not configured", e.Name) }

// Put adds the namespace nc, or replaces the one of its name; nothing else
// moves.
func (o *Owner) Put(ctx context.Context, nc config.NamespaceConfig) (string, error) {
	return o.update(ctx, func(cfg *config.Config) error {
		if i := slices.IndexFunc(cfg.Namespaces, func(n config.NamespaceConfig) bool { return n.Name == nc.Name }); i >= 0 {
			cfg.Namespaces[i] = nc
		} else {
			cfg.Namespaces = append(cfg.Namespaces, nc)
		}
		return nil
	})
}

// Delete removes the namespace called name; nothing else moves.
func (o *Owner) Delete(ctx context.Context, name string) (string, error) {
	return o.update(ctx, func(cfg *config.Config) error {
		i := slices.IndexFunc(cfg.Namespaces, func(n config.NamespaceConfig) bool { return n.Name == name })
		if i < 0 {
			return &NotFoundError{Name: name}
		}
		cfg.Namespaces = slices.Delete(cfg.Namespaces, i, i+1)
		return nil
	})
}

// update applies the running config as edit changes it, validated.
func (o *Owner) update(ctx context.Context, edit func(*config.Config) error) (string, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	cfg := o.cfg
	cfg.Namespaces = slices.Clone(cfg.Namespaces)
	if err := edit(&cfg); err != nil {
		return "", err
	}
	if err := cfg.Validate(); err != nil {
		return "", err
	}
	return o.applyLocked(ctx, cfg)
}

func (o *Owner) applyLocked(ctx context.Context, cfg config.Config) (string, error) {
	running := o.cfg

	// Which stores stay: a name whose type and options are the same.
	opts := map[string]any{}
	for name, sc := range cfg.Stores {
		var err error
		if opts[name], err = config.StoreOptions(sc, o.opts.Getenv); err != nil {
			return "", fmt.Errorf("store %q: %w", name, err)
		}
	}
	var renew []string
	for _, nc := range cfg.Namespaces {
		ls := o.syncers[nc.Name]
		if ls == nil {
			continue // a local namespace: a change of mode changes its node config
		}
		if ls.mode != cfg.NamespaceMode(nc.Name) || !reflect.DeepEqual(opts[nc.Store], ls.store.opts) ||
			!reflect.DeepEqual(cfg.NamespaceSyncerConfig(nc.Name), ls.cfg) {
			renew = append(renew, nc.Name)
		}
	}
	creds, err := o.credentials(cfg)
	if err != nil {
		return "", err
	}
	change, err := o.opts.Node.Prepare(cfg.NodeConfigs(), renew...)
	if err != nil {
		return "", err
	}
	for _, g := range o.guards {
		if err := g(change); err != nil {
			return "", err
		}
	}

	// Syncers of the added and replaced namespaces, on stores kept open
	// or opened now.
	opened := map[string]*openStore{}
	fail := func(err error) (string, error) {
		for _, st := range opened {
			_ = st.st.Close()
		}
		return "", err
	}
	storeFor := func(name string) (*openStore, error) {
		for _, ls := range o.syncers {
			if ls.store.name == name && reflect.DeepEqual(ls.store.opts, opts[name]) {
				return ls.store, nil
			}
		}
		if st := opened[name]; st != nil {
			return st, nil
		}
		st, err := o.opts.Open(ctx, name, cfg.Stores[name], o.opts.Getenv, o.opts.Log)
		if err != nil {
			return nil, fmt.Errorf("store %q: %w", name, err)
		}
		os := &openStore{name: name, st: st, opts: opts[name]}
		opened[name] = os
		return os, nil
	}
	created := map[string]*liveSyncer{}
	fresh := slices.Clone(change.Added)
	for _, r := range change.Replaced {
		fresh = append(fresh, r.New)
	}
	for _, ns := range fresh {
		nc := ns.Config()
		mode := cfg.NamespaceMode(nc.Name)
		if _, local := mode.(clustersync.Local); local {
			continue
		}
		sc := cfg.NamespaceSyncerConfig(nc.Name)
		st, err := storeFor(sc.StoreName)
		if err != nil {
			return fail(err)
		}
		traced := sc // sc stays comparable (a func never is)
		if o.opts.Tracer != nil {
			traced.Trace = storetrace.Hook(o.opts.Tracer, sc.StoreName)
		}
		var m clustersync.Metrics // a nil *SyncMetrics is not a nil Metrics
		if o.opts.Metrics != nil {
			m = o.opts.Metrics
		}
		s, err := clustersync.NewSyncer(ns, mode, st.st, o.opts.Incarnation, o.opts.Versions, traced, o.opts.Log, m)
		if err != nil {
			return fail(err)
		}
		created[nc.Name] = &liveSyncer{s: s, mode: mode, store: st, cfg: sc}
	}

	// Switch.
	next := map[string]*liveSyncer{}
	for _, ns := range change.Kept {
		if ls := o.syncers[ns.Name()]; ls != nil {
			next[ns.Name()] = ls
		}
	}
	maps.Copy(next, created)
	var all []*clustersync.Syncer
	for _, ls := range next {
		all = append(all, ls.s)
	}
	if err := o.opts.Node.Commit(change); err != nil {
		return fail(err) // d.mu serialises changes: not expected
	}
	if creds != nil {
		// From the next call on, every front authenticates and
		// authorizes with the new credentials; a principal of the old
		// ones whose token or certificate is gone is refused.
		o.opts.Authorizer.Replace(creds)
	}
	rctx, cancel := context.WithTimeout(ctx, rerouteTimeout)
	err = service.Reroute(rctx, o.opts.Service, all...)
	cancel()
	if err != nil {
		o.opts.Log.Warn("copying the counts of replaced namespaces while calls still run on them; their last hits may be missed", "err", err)
	}

	// Retire the old namespaces: their last pushes, at once, then their
	// counts.
	var retired []*liveSyncer
	for _, r := range change.Replaced {
		retired = append(retired, o.syncers[r.Old.Name()])
	}
	for _, ns := range change.Removed {
		retired = append(retired, o.syncers[ns.Name()])
		if o.opts.Metrics != nil {
			o.opts.Metrics.forget(ns.Name())
		}
	}
	o.stopSyncers(retired)
	for _, r := range change.Replaced {
		old, nw := o.syncers[r.Old.Name()], created[r.New.Name()]
		sameStore := old != nil && nw != nil && old.store == nw.store
		if refused := r.CopyWindows(r.New.Now(), sameStore); refused > 0 {
			o.opts.Log.Warn("keys not copied to the changed namespace: its key cap is reached", "namespace", r.New.Name(), "keys", refused)
		}
	}
	for _, ls := range created {
		o.startSyncer(ls)
	}

	// Close the stores nobody uses any more.
	inUse := map[*openStore]bool{}
	for _, ls := range next {
		inUse[ls.store] = true
	}
	for _, ls := range o.syncers {
		if !inUse[ls.store] {
			inUse[ls.store] = true // close once
			if err := ls.store.st.Close(); err != nil {
				o.opts.Log.Warn("closing store", "store", ls.store.name, "err", err)
			}
		}
	}
	o.syncers = next
	if !o.applied { // the start: the whole config runs
		o.cfg, o.applied = cfg, true
	}
	o.cfg.Namespaces, o.cfg.Stores, o.cfg.Sync, o.cfg.ShutdownTimeout, o.cfg.Auth = cfg.Namespaces, cfg.Stores, cfg.Sync, cfg.ShutdownTimeout, cfg.Auth
	out := summarize(change, running, cfg)
	if creds != nil {
		tokens, identities := creds.Credentials()
		out += fmt.Sprintf("; credentials: %d tokens, %d identities", tokens, identities)
	}
	return out, nil
}

// errAuthToggle refuses a config that turns authorization on or off.
var errAuthToggle = &config.Error{Field: "auth", Reason: "turning authorization on or off takes a restart; the running config stays"}

// credentials returns the credentials of cfg's auth section for the
// running Authorizer, nil when authorization is off or they are the
// running ones already (a change through the admin API keeps the running
// config's section). Tokens are read from their files and the
// environment unless config.Load read them.
func (o *Owner) credentials(cfg config.Config) (*auth.Authorizer, error) {
	if (o.opts.Authorizer == nil) != (cfg.Auth == nil) {
		return nil, errAuthToggle
	}
	if o.opts.Authorizer == nil {
		return nil, nil
	}
	creds, err := cfg.Authorizer(o.opts.Getenv)
	if err != nil || o.opts.Authorizer.Same(creds) {
		return nil, err // an admin change: the running config's credentials
	}
	return creds, nil
}

// summarize says what a change did, and what of cfg waits for a restart.
func summarize(c *node.Change, running, cfg config.Config) string {
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
	a.Namespaces, a.Stores, a.Sync, a.ShutdownTimeout, a.Auth = nil, nil, config.SyncConfig{}, 0, nil
	b.Namespaces, b.Stores, b.Sync, b.ShutdownTimeout, b.Auth = nil, nil, config.SyncConfig{}, 0, nil
	if !reflect.DeepEqual(a, b) {
		out += "; changes outside namespaces, stores and sync take effect at restart"
	}
	return out
}

// startSyncer runs ls's sync loop until stopSyncers or Stop. The caller
// holds o.mu.
func (o *Owner) startSyncer(ls *liveSyncer) {
	if o.bg.Err() != nil {
		return // stopping: the loops are waited for already
	}
	ctx, cancel := context.WithCancel(o.bg)
	ls.stop, ls.done, ls.started = cancel, make(chan struct{}), time.Now()
	o.loops.Go(func() {
		defer close(ls.done)
		if err := ls.s.Run(ctx); err != nil {
			o.finalPushFailed.Store(true) // the syncer logged it
		}
	})
}

// stopSyncers stops the loops of lss (nil ones skipped) and waits for
// their final pushes, made at the same time.
func (o *Owner) stopSyncers(lss []*liveSyncer) {
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

// Namespace returns the running config's entry of the namespace called
// name.
func (o *Owner) Namespace(name string) (config.NamespaceConfig, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i := slices.IndexFunc(o.cfg.Namespaces, func(n config.NamespaceConfig) bool { return n.Name == name })
	if i < 0 {
		return config.NamespaceConfig{}, false
	}
	return o.cfg.Namespaces[i], true
}

// Syncer returns the running syncer of namespace name, or nil (a local
// namespace, or none of that name).
func (o *Owner) Syncer(name string) *clustersync.Syncer {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ls := o.syncers[name]; ls != nil {
		return ls.s
	}
	return nil
}

// SyncerState is a running syncer and when its loop started (the age of a
// sync never done).
type SyncerState struct {
	Syncer  *clustersync.Syncer
	Started time.Time
}

// Syncers returns every running syncer by namespace.
func (o *Owner) Syncers() map[string]SyncerState {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make(map[string]SyncerState, len(o.syncers))
	for name, ls := range o.syncers {
		out[name] = SyncerState{Syncer: ls.s, Started: ls.started}
	}
	return out
}

// openStores returns the stores the running syncers use, each once.
func (o *Owner) openStores() []*openStore {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*openStore
	for _, ls := range o.syncers {
		if !slices.Contains(out, ls.store) {
			out = append(out, ls.store)
		}
	}
	return out
}

// storeCloseTimeout bounds closing the stores at exit. A store cut off by
// the network does not answer a polite goodbye (PostgreSQL's pool waits up
// to 15 s per connection for one), and the process's exit closes the
// connections all the same.
const storeCloseTimeout = 2 * time.Second

// CloseStores closes every store, waiting at most a few seconds for them.
func (o *Owner) CloseStores() { o.closeStoresWithin(storeCloseTimeout) }

// closeStoresWithin closes every store, waiting at most timeout for them.
func (o *Owner) closeStoresWithin(timeout time.Duration) {
	done := make(chan struct{})
	go func() { // the stores of the syncers, each once
		defer close(done)
		for _, st := range o.openStores() {
			if err := st.st.Close(); err != nil {
				o.opts.Log.Warn("closing store", "store", st.name, "err", err)
			}
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		o.opts.Log.Warn("stores not closed in time; leaving their connections to the exit", "timeout", timeout)
	}
}

// ErrNoReload is Reload's error when limiterd runs without a config file.
var ErrNoReload = errors.New("limiterd runs on its default config (no --config file): nothing to reload")

// Reload reads the config file again and applies it: its namespaces,
// stores, sync settings and credentials (token files read again) replace
// the running ones, changes made through the admin API included. A file with errors changes nothing; the errors
// say why.
func (o *Owner) Reload(ctx context.Context) (string, error) {
	if o.opts.Load == nil {
		return "", ErrNoReload
	}
	cfg, err := o.opts.Load()
	if err != nil {
		return "", err
	}
	WarnReadableByAll(o.opts.Log, &cfg)
	return o.Apply(ctx, cfg)
}

// WarnReadableByAll logs a warning for each secret file of cfg that every
// user of the host may read (config.Config.ReadableByAll says why it is
// not refused).
func WarnReadableByAll(log *slog.Logger, cfg *config.Config) {
	for _, f := range cfg.ReadableByAll() {
		log.Warn("a secret file is readable by every user of the host: make it 0600 (or 0640 for a group)", "file", f)
	}
}
