package sync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	gosync "sync"
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/node"
)

// Config tunes a Syncer. The zero value of each field means its default.
type Config struct {
	// TickTimeout bounds one tick (push and fetch). Default:
	// max(10 × sync_rate, 1 s).
	TickTimeout time.Duration
	// CallTimeout bounds the store call of a synchronous (sync_rate = 0)
	// Increment or Allow; past it the call answers from local counts and
	// the key is pushed later by the background tick. Default 250 ms.
	CallTimeout time.Duration
	// RetryPeriod is the background tick period of a synchronous
	// namespace, which pushes what timed-out calls left dirty. Default 1 s.
	RetryPeriod time.Duration
	// ShutdownTimeout bounds the last push when Run's context ends.
	// Default 5 s.
	ShutdownTimeout time.Duration
	// BatchSize is the most rows per store call. Default 5000.
	BatchSize int
	// NoJitter starts the first tick at once instead of after a random
	// part of the period (spreading the ticks of many nodes).
	NoJitter bool
	// NoEscalate keeps every Allow of a periodic namespace local
	// (escalate: never); by default an Allow asks the store near a
	// limit (escalate: auto; see escalate.go) when the store can decide
	// (Decide), and is decided locally when it cannot.
	NoEscalate bool
	// OnStoreDown is what a synchronous namespace's Acquire does when its
	// store cannot be reached: StoreDownRefuse (the default when empty)
	// or StoreDownLocal.
	OnStoreDown StoreDownPolicy
	// EscalateSafety multiplies the hits the other nodes are expected to
	// count while this node cannot see them, which sets how near a limit
	// a periodic Allow escalates. Default 2.
	EscalateSafety float64
	// EscalateNewKeys bounds when a periodic Allow on a key whose others'
	// totals this node never fetched goes to the store whatever its
	// margin. By default (0) always: the node cannot know whether other
	// nodes hold such a key at its limit (after a restart every key is
	// such a key). A positive duration does it only that long after the
	// Syncer is created, and later decides such a key from the node's own
	// hits (fetching it at once in the background): one round trip less
	// per key new to the node, for workloads with a long tail of keys, at
	// the price of admitting a few hits on keys that other nodes hold at
	// their limit but this node has not seen (likely only with limits of
	// a few hits per window). Negative: never.
	EscalateNewKeys time.Duration
	// StoreName names the store in messages.
	StoreName string
	// Trace, when set, is told of each store call made on a request's
	// path (synchronous calls, escalations, leases, buckets), to trace
	// it; the background ticks are not traced.
	Trace StoreTrace
}

// StoreTrace starts the trace of one store call, op naming it
// ("AllowGroup", "PushFetch", ...) and items counting the rows or calls
// it carries. It returns the context to call the store with and the function
// to call with the call's error.
type StoreTrace func(ctx context.Context, op string, items int) (context.Context, func(error))

// trace starts a request path's store call's trace (Config.Trace).
func (s *Syncer) trace(ctx context.Context, op string, items int) (context.Context, func(error)) {
	if s.cfg.Trace == nil {
		return ctx, untraced
	}
	return s.cfg.Trace(ctx, op, items)
}

func untraced(error) {}

func (c Config) withDefaults(m Mode) Config {
	if c.TickTimeout <= 0 {
		var p time.Duration
		if m, ok := m.(Periodic); ok {
			p = m.Period
		}
		c.TickTimeout = max(10*p, time.Second)
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 250 * time.Millisecond
	}
	if c.RetryPeriod <= 0 {
		c.RetryPeriod = time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 5 * time.Second
	}
	if c.BatchSize <= 0 {
		c.BatchSize = 5000
	}
	if !(c.EscalateSafety > 0) {
		c.EscalateSafety = 2
	}
	return c
}

// Syncer converges one namespace with a store. For a periodic namespace
// Run ticks at its sync_rate; for a synchronous one it ticks at
// RetryPeriod and IncrementAt/RateAt/AllowAt write through.
//
// A tick pushes every window changed since its last successful push (as an
// absolute, versioned total of this incarnation) and fetches the other
// incarnations' totals for the interest set; from a ChangeReader store,
// after the first tick, only those of the windows written since the last
// tick and of the keys new to the node (changetick.go). When the store is
// a PushFetcher (and no ChangeReader) the push reads back the others'
// totals of the windows it writes, and only the rest of the interest set
// is fetched. Ticks never overlap; a failed push leaves the rows dirty and
// the next tick pushes them again.
type Syncer struct {
	ns    *node.Namespace
	mode  Mode
	sync  bool      // mode is Synchronous
	calls modeCalls // the mode's: *periodic or *synchronous
	// background, when set, runs beside the ticks of Run (a periodic
	// namespace's fetch of keys new to the node).
	background func(ctx context.Context)
	store      Store
	inc        string
	versions   *Versions
	cfg        Config
	period     time.Duration
	ttlPad     time.Duration // 2 × sync_rate
	log        *slog.Logger
	m          Metrics
	name       string

	// downUntil (Unix ns, 0: none) is set when a synchronous store call
	// fails: until then synchronous calls answer from local counts at
	// once (see direct.go).
	downUntil atomic.Int64

	// Escalation of a periodic namespace (see escalate.go): lastTick the
	// ticks' duration in ns (the last one's, or more after a longer one), fresh
	// the keys new to the node, fetched at once in the background.
	escalate bool
	lastTick atomic.Int64
	// can is what the store declares it can do beside Store, taken once
	// here so that no call asks the store's type again (abilities.go).
	can abilities
	// fetchedAt (Unix ns, wall clock) is when the last successful tick
	// started: the others' totals are at least as recent.
	fetchedAt atomic.Int64
	fresh     chan string
	// With a ChangeReader, an escalating namespace learns the others'
	// totals of keys it does not hold (learn.go).
	learn learning

	statusMu    gosync.Mutex
	lastSuccess time.Time
	lastErr     error

	tickMu gosync.Mutex // one tick at a time
	// tick is the exchange with the store in progress (node.Tick).
	tick   node.Tick
	rows   []Row
	keys   []WindowKey
	others []int64
	match  []int     // per tick.Push: its index in tick.Read, or -1
	idx    []int     // per key of a Fetch batch: its index in tick.Read
	btick  node.Tick // of the buckets
	ltick  node.LeaseTick
	ch     changeTick // with a ChangeReader store (changetick.go)
}

// NewSyncer returns a Syncer for ns in mode m (periodic or synchronous)
// writing as incarnation inc with versions from v. log and m may be nil.
func NewSyncer(ns *node.Namespace, mode Mode, store Store, inc string, v *Versions, cfg Config, log *slog.Logger, m Metrics) (*Syncer, error) {
	nc := ns.Config()
	cfg = cfg.withDefaults(mode)
	period, err := period(mode, cfg.RetryPeriod)
	if err != nil {
		return nil, fmt.Errorf("sync: namespace %q: %w", nc.Name, err)
	}
	if !nc.Shared {
		return nil, fmt.Errorf("sync: namespace %q does not keep its changes for a sync", nc.Name)
	}
	if store == nil {
		return nil, fmt.Errorf("sync: namespace %q has no store", nc.Name)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if m == nil {
		m = NopMetrics{}
	}
	_, sync := mode.(Synchronous)
	s := &Syncer{
		ns: ns, mode: mode, sync: sync, store: store, inc: inc, versions: v, cfg: cfg, period: period,
		log: log.With("namespace", nc.Name), m: m, name: nc.Name,
	}
	if s.can, err = abilitiesOf(store); err != nil {
		return nil, fmt.Errorf("sync: namespace %q: %w", nc.Name, err)
	}
	if need := Needs(mode, false); !s.can.declared.Has(need) {
		return nil, fmt.Errorf("sync: namespace %q: store %q cannot serve a synchronous namespace: it has no %s", nc.Name, cfg.StoreName, need&^s.can.declared)
	}
	if sync {
		s.calls = &synchronous{shared: shared{s}, groups: newGroups(), prevReads: newPrevReads()}
	} else {
		s.ttlPad = 2 * period
		pd := &periodic{shared: shared{s}}
		// Escalation asks the store to decide; a config refuses it
		// explicitly asked of a store that cannot (Needs).
		if !cfg.NoEscalate && s.can.declared.Has(Decide) {
			s.escalate = true
			switch {
			case cfg.EscalateNewKeys == 0:
				pd.newKeysUntil = math.MaxInt64
			case cfg.EscalateNewKeys > 0:
				pd.newKeysUntil = ns.Now().Add(cfg.EscalateNewKeys).UnixNano()
			}
			s.fresh = make(chan string, freshQueue)
			s.background = pd.fetchFresh
		}
		s.calls = pd
	}
	s.ch.cr = s.can.cr
	if s.escalate && s.ch.cr != nil {
		s.learn.on = true
		s.learn.skew = period + time.Second
		s.learn.sizes = slices.Sorted(slices.Values(ns.Sizes()))
	}
	switch {
	case s.ch.cr != nil:
		ns.OnNewKey(ticker{s}.newKey)
	case s.fresh != nil:
		ns.OnNewKey(func(key string) { enqueueFresh(s.fresh, key) })
	}
	return s, nil
}

// modeCalls are a syncing mode's calls and what of its own state the
// tick and a reset tend.
type modeCalls interface {
	Calls
	// tick runs at the start of every tick.
	tick(now time.Time)
	// forget drops what the mode keeps of key, which a reset changed.
	forget(key string)
}

// Calls returns the namespace's calls in its mode, periodic or
// synchronous.
func (s *Syncer) Calls() Calls { return s.calls }

// Namespace returns the synced namespace.
func (s *Syncer) Namespace() *node.Namespace { return s.ns }

// Mode returns the namespace's mode: Periodic or Synchronous.
func (s *Syncer) Mode() Mode { return s.mode }

// StoreName names the namespace's store (Config.StoreName).
func (s *Syncer) StoreName() string { return s.cfg.StoreName }

// Run ticks until ctx is done, then pushes one last time, bounded by
// ShutdownTimeout. It returns the last push's error, if any.
func (s *Syncer) Run(ctx context.Context) error {
	first := time.Duration(0)
	if !s.cfg.NoJitter {
		first = rand.N(s.period + 1)
	}
	timer := time.NewTimer(first)
	defer timer.Stop()
	if s.background != nil {
		fctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); s.background(fctx) }()
		defer func() { stop(); <-done }()
	}
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
			defer cancel()
			err := s.Flush(fctx)
			if err != nil {
				s.log.Error("final push failed: counts not yet stored are lost", "err", err)
			}
			return err
		case <-timer.C:
		}
		start := time.Now()
		if err := s.SyncOnce(ctx); err != nil && ctx.Err() == nil {
			// At debug only: a store outage fails every tick (ten a
			// second at sync_rate 0.1); whoever watches the store logs
			// the outage once (limiterd's store probes), and Status
			// and the metrics tell the rest.
			s.log.Debug("sync tick failed; will retry", "err", err)
		}
		// An overrun delays the next tick rather than stacking ticks.
		timer.Reset(max(s.period-time.Since(start), 0))
	}
}

// SyncOnce runs one tick: push, then fetch (only the windows the push did
// not read back), within TickTimeout.
func (s *Syncer) SyncOnce(ctx context.Context) error {
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TickTimeout)
	defer cancel()
	now := s.ns.Now()
	s.calls.tick(now)
	tk := ticker{s}
	tk.checkEvicted(now)
	var perr, ferr error
	pf, isPF := s.can.pf, s.can.pf != nil
	switch {
	case s.ch.cr != nil:
		// A plain push: the others' sums of the windows pushed change only
		// by the others' writes, which the change read reports.
		tk.beginChanges(now)
		s.ns.TakeTick(now, &s.tick, node.PushWindows)
		perr = tk.push(ctx)
		s.ns.ApplyTick(&s.tick)
		if ctx.Err() == nil {
			ferr = tk.fetchChanges(ctx, now)
		} else {
			s.ch.requeue(s.ch.keys)
		}
	case isPF:
		s.ns.TakeTick(now, &s.tick, node.PushWindows|node.ReadWindows)
		perr, ferr = tk.pushFetch(ctx, pf)
		s.ns.ApplyTick(&s.tick)
	default:
		s.ns.TakeTick(now, &s.tick, node.PushWindows)
		perr = tk.push(ctx)
		s.ns.ApplyTick(&s.tick)
		if ctx.Err() == nil {
			// Read after the push: a key first touched meanwhile is read
			// at once.
			s.ns.TakeTick(now, &s.tick, node.ReadWindows)
			ferr = tk.fetch(ctx)
			s.ns.ApplyTick(&s.tick)
		}
	}
	if ctx.Err() == nil {
		// Buckets: a periodic namespace reads every bucket it holds; a
		// synchronous one only sends what its calls could not.
		periodic := !s.sync
		ferr = errors.Join(ferr, bucketSync{s}.sync(ctx, now, periodic), leaseSync{s}.sync(ctx, now, periodic))
	}
	took := time.Since(start)
	// A decaying maximum: one short tick after a long one does not
	// shrink the blind time at once.
	s.lastTick.Store(max(int64(took), s.lastTick.Load()*7/8))
	s.m.Tick(s.name, took, perr != nil, ferr != nil)
	err := errors.Join(perr, ferr)
	s.statusMu.Lock()
	s.lastErr = err
	if err == nil {
		s.fetchedAt.Store(start.UnixNano())
		s.lastSuccess = time.Now()
		s.m.Synced(s.name, s.lastSuccess)
	}
	s.statusMu.Unlock()
	return err
}

// Fetch reads the other incarnations' totals of the interest set now,
// without pushing (Kong's fetch), within TickTimeout.
func (s *Syncer) Fetch(ctx context.Context) error {
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TickTimeout)
	defer cancel()
	s.ns.TakeTick(s.ns.Now(), &s.tick, node.ReadWindows)
	err := ticker{s}.fetch(ctx)
	s.ns.ApplyTick(&s.tick)
	return err
}

// Flush pushes every dirty window and bucket, and the leases of this
// node and its releases, once, without fetching.
func (s *Syncer) Flush(ctx context.Context) error {
	s.tickMu.Lock()
	defer s.tickMu.Unlock()
	now := s.ns.Now()
	s.ns.TakeTick(now, &s.tick, node.PushWindows)
	perr := ticker{s}.push(ctx)
	s.ns.ApplyTick(&s.tick)
	return errors.Join(perr, bucketSync{s}.sync(ctx, now, false), leaseSync{s}.sync(ctx, now, false))
}

func (s *Syncer) row(p node.Pending, version int64) Row {
	return Row{
		WindowKey: WindowKey{Namespace: s.name, Size: p.Size, Start: p.Start, Key: p.Key},
		Total:     p.Total,
		Version:   version,
		ExpireAt:  time.Unix(0, p.Start).Add(2*p.Size + s.ttlPad),
	}
}

// push stores the tick's dirty windows (s.tick.Push) in batches,
// recording each batch's version in the tick; a batch that fails is
// recorded uncertain, and the ones after it are not sent: they stay dirty
// for the next tick.
func (tk ticker) push(ctx context.Context) error {
	s := tk.s
	t := &s.tick
	s.m.Dirty(s.name, len(t.Push))
	if len(t.Push) == 0 {
		return nil
	}
	version := s.versions.Next()
	for lo := 0; lo < len(t.Push); lo += s.cfg.BatchSize {
		hi := min(lo+s.cfg.BatchSize, len(t.Push))
		s.rows = s.rows[:0]
		for _, p := range t.Push[lo:hi] {
			s.rows = append(s.rows, s.row(p, version))
		}
		if err := s.store.Push(ctx, s.inc, s.rows); err != nil {
			tk.failed(lo, hi)
			return fmt.Errorf("sync: push %d rows of namespace %q: %w", len(t.Push)-lo, s.name, err)
		}
		tk.stored(lo, hi, version)
		s.m.Pushed(s.name, hi-lo)
	}
	return nil
}

// failed records the tick's windows to push from lo to hi as uncertain:
// their push failed once sent, so the store may hold it or not.
func (tk ticker) failed(lo, hi int) { tk.stored(lo, hi, node.Uncertain) }

// stored records version for the tick's windows to push from lo to hi.
func (tk ticker) stored(lo, hi int, version int64) {
	for i := lo; i < hi; i++ {
		tk.s.tick.Version[i] = version
	}
}

// pushFetch is a tick on a PushFetcher: each batch of dirty rows is
// written and the others' totals of those same windows read back in one
// call, so only the interest windows that were not pushed need a Fetch.
// A batch that fails stays dirty, and its windows are fetched like the
// rest.
func (tk ticker) pushFetch(ctx context.Context, pf PushFetcher) (perr, ferr error) {
	s := tk.s
	t := &s.tick
	s.m.Dirty(s.name, len(t.Push))
	tk.matchPending()
	if len(t.Push) > 0 {
		version := s.versions.Next()
		for lo := 0; lo < len(t.Push); lo += s.cfg.BatchSize {
			hi := min(lo+s.cfg.BatchSize, len(t.Push))
			s.rows = s.rows[:0]
			for _, p := range t.Push[lo:hi] {
				s.rows = append(s.rows, s.row(p, version))
			}
			s.others = slices.Grow(s.others[:0], hi-lo)[:hi-lo]
			clear(s.others)
			if err := pf.PushFetch(ctx, s.inc, s.rows, s.others); err != nil {
				tk.failed(lo, hi)
				perr = fmt.Errorf("sync: push %d rows of namespace %q: %w", len(t.Push)-lo, s.name, err)
				break
			}
			tk.stored(lo, hi, version)
			for j := range hi - lo {
				if w := s.match[lo+j]; w >= 0 {
					t.Others[w], t.Got[w] = s.others[j], true
				}
			}
			s.m.Pushed(s.name, hi-lo)
			s.m.Fetched(s.name, hi-lo)
		}
	}
	if ctx.Err() == nil {
		ferr = tk.fetch(ctx)
	}
	return perr, ferr
}

// matchPending sets match[j] to the index in the tick's Read of its
// Push[j]'s window, or -1. The namespace walks its keys in the same order
// for both lists, so a merge finds every match; should a concurrent
// insert or reclaim have reordered the walk, a map finds them instead.
func (tk ticker) matchPending() {
	s := tk.s
	push, read := s.tick.Push, s.tick.Read
	s.match = slices.Grow(s.match[:0], len(push))[:len(push)]
	i := 0
	for j := range push {
		p := &push[j]
		for i < len(read) && !sameWindow(&read[i], p) {
			i++
		}
		if i == len(read) {
			tk.matchByMap()
			return
		}
		s.match[j] = i
		i++
	}
}

func sameWindow(w *node.Window, p *node.Pending) bool {
	return w.Start == p.Start && w.Size == p.Size && w.Key == p.Key
}

func (tk ticker) matchByMap() {
	s := tk.s
	type id struct {
		key   string
		size  time.Duration
		start int64
	}
	at := make(map[id]int, len(s.tick.Push))
	for j, p := range s.tick.Push {
		at[id{p.Key, p.Size, p.Start}] = j
		s.match[j] = -1
	}
	for i, w := range s.tick.Read {
		if j, ok := at[id{w.Key, w.Size, w.Start}]; ok {
			s.match[j] = i
		}
	}
}

// fetch reads the other incarnations' totals of the tick's windows to
// read that are not read yet (Got), into the tick.
func (tk ticker) fetch(ctx context.Context) error {
	s := tk.s
	t := &s.tick
	for lo := 0; lo < len(t.Read); {
		// The next batch: up to BatchSize windows not read yet, from lo.
		s.keys, s.idx = s.keys[:0], s.idx[:0]
		for ; lo < len(t.Read) && len(s.keys) < s.cfg.BatchSize; lo++ {
			if t.Got[lo] {
				continue
			}
			w := &t.Read[lo]
			s.keys = append(s.keys, WindowKey{Namespace: s.name, Size: w.Size, Start: w.Start, Key: w.Key})
			s.idx = append(s.idx, lo)
		}
		if len(s.keys) == 0 {
			break
		}
		s.others = slices.Grow(s.others[:0], len(s.keys))[:len(s.keys)]
		clear(s.others)
		if err := s.store.Fetch(ctx, s.inc, s.keys, s.others); err != nil {
			return fmt.Errorf("sync: fetch %d windows of namespace %q: %w", len(s.keys), s.name, err)
		}
		for j, i := range s.idx {
			t.Others[i], t.Got[i] = s.others[j], true
		}
		s.m.Fetched(s.name, len(s.keys))
	}
	return nil
}

// Status reports when the last fully successful tick ended (zero if none
// yet) and the last tick's error.
func (s *Syncer) Status() (lastSuccess time.Time, lastErr error) {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	return s.lastSuccess, s.lastErr
}

// ticker runs the parts of a tick: the push and fetch of windows
// (syncer.go), the change reads (changetick.go) and the learning of keys
// not held (learn.go).
type ticker struct{ s *Syncer }
