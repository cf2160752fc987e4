package main

import (
	"context"
	"slices"
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

// storeState is the last probe's outcome of one store.
type storeState struct {
	name    string
	up      bool
	err     string
	since   time.Time // of the current state
	checked time.Time
	// reminded is when the outage was last logged.
	reminded time.Time
}

// storeHealth holds every open store's state.
type storeHealth struct {
	mu     gosync.Mutex
	stores map[*openStore]*storeState
}

// snapshot returns the states, by store name.
func (h *storeHealth) snapshot() []storeState {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]storeState, 0, len(h.stores))
	for _, s := range h.stores {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b storeState) int {
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	return out
}

// probeStores probes the open stores until ctx ends.
func (d *daemon) probeStores(ctx context.Context) {
	t := time.NewTicker(storeProbePeriod)
	defer t.Stop()
	for {
		d.probeOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeOnce probes every open store once, at the same time.
func (d *daemon) probeOnce(ctx context.Context) {
	stores := d.openStores()
	errs := make([]error, len(stores))
	var wg gosync.WaitGroup
	for i, o := range stores {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, storeProbeTimeout)
			defer cancel()
			errs[i] = o.st.Fetch(pctx, d.inc, probeKey, make([]int64, 1))
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // stopping: a cancelled probe says nothing
	}
	now := time.Now()
	h := &d.storeHealth
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stores == nil {
		h.stores = map[*openStore]*storeState{}
	}
	for o := range h.stores {
		if !slices.Contains(stores, o) {
			delete(h.stores, o) // closed
		}
	}
	for i, o := range stores {
		s := h.stores[o]
		if s == nil {
			s = &storeState{name: o.name, up: true, since: now}
			h.stores[o] = s
		}
		s.checked = now
		d.observeStore(s, errs[i], now)
	}
}

// observeStore moves s to a probe's outcome, logging an outage's start,
// reminders and end.
func (d *daemon) observeStore(s *storeState, err error, now time.Time) {
	log := d.log.With("store", s.name)
	switch {
	case err == nil && !s.up:
		log.Info("store reachable again", "outage", now.Sub(s.since).Round(time.Millisecond))
		s.up, s.err, s.since = true, "", now
	case err == nil:
	case s.up:
		log.Warn("store unreachable; namespaces answer from local counts and keep what they count for later", "err", err)
		s.up, s.err, s.since, s.reminded = false, err.Error(), now, now
	default:
		s.err = err.Error()
		if now.Sub(s.reminded) >= outageReminder {
			log.Warn("store still unreachable", "for", now.Sub(s.since).Round(time.Second), "err", err)
			s.reminded = now
		}
	}
}
