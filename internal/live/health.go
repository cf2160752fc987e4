package live

import (
	"context"
	"slices"
	"strings"
	gosync "sync"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// Store health: every open store is probed every storeProbePeriod, also
// when no namespace has anything to sync (an idle node's ticks never
// contact the store). /healthz and limiterd_store_up report the outcome,
// and an outage is logged once when it starts (with its error), at most
// once a minute while it lasts, and once when it ends.

const (
	storeProbePeriod  = 2 * time.Second
	storeProbeTimeout = time.Second
	outageReminder    = time.Minute
)

// probeKey is what a probe reads: a window no namespace writes (names
// cannot hold '/').
var probeKey = []clustersync.WindowKey{{Namespace: "limiterd/probe", Size: time.Second, Key: "probe"}}

// StoreState is the last probe's outcome of one store.
type StoreState struct {
	Name    string
	Up      bool
	Err     string
	Since   time.Time // of the current state
	Checked time.Time
}

type storeState struct {
	StoreState
	// reminded is when the outage was last logged.
	reminded time.Time
}

// storeHealth holds every open store's state.
type storeHealth struct {
	mu     gosync.Mutex
	stores map[*openStore]*storeState
}

// Stores returns the stores' states, by name.
func (o *Owner) Stores() []StoreState {
	h := &o.health
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]StoreState, 0, len(h.stores))
	for _, s := range h.stores {
		out = append(out, s.StoreState)
	}
	slices.SortFunc(out, func(a, b StoreState) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Probe probes the open stores every few seconds until ctx ends; Stores
// and the health endpoints report the outcome.
func (o *Owner) Probe(ctx context.Context) {
	t := time.NewTicker(storeProbePeriod)
	defer t.Stop()
	for {
		o.probeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeOnce probes every open store once, at the same time.
func (o *Owner) probeOnce(ctx context.Context) {
	stores := o.openStores()
	errs := make([]error, len(stores))
	var wg gosync.WaitGroup
	for i, st := range stores {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, storeProbeTimeout)
			defer cancel()
			errs[i] = st.st.Fetch(pctx, o.opts.Incarnation, probeKey, make([]int64, 1))
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // stopping: a cancelled probe says nothing
	}
	now := time.Now()
	h := &o.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stores == nil {
		h.stores = map[*openStore]*storeState{}
	}
	for st := range h.stores {
		if !slices.Contains(stores, st) {
			delete(h.stores, st) // closed
		}
	}
	for i, st := range stores {
		s := h.stores[st]
		if s == nil {
			s = &storeState{StoreState: StoreState{Name: st.name, Up: true, Since: now}}
			h.stores[st] = s
		}
		s.Checked = now
		o.observeStore(s, errs[i], now)
	}
}

// observeStore moves s to a probe's outcome, logging an outage's start,
// reminders and end.
func (o *Owner) observeStore(s *storeState, err error, now time.Time) {
	log := o.opts.Log.With("store", s.Name)
	switch {
	case err == nil && !s.Up:
		log.Info("store reachable again", "outage", now.Sub(s.Since).Round(time.Millisecond))
		s.Up, s.Err, s.Since = true, "", now
	case err == nil:
	case s.Up:
		log.Warn("store unreachable; namespaces answer from local counts and keep what they count for later", "err", err)
		s.Up, s.Err, s.Since, s.reminded = false, err.Error(), now, now
	default:
		s.Err = err.Error()
		if now.Sub(s.reminded) >= outageReminder {
			log.Warn("store still unreachable", "for", now.Sub(s.Since).Round(time.Second), "err", err)
			s.reminded = now
		}
	}
}
