package service

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/node"
	clustersync "github.com/limiterd/limiterd/sync"
)

// routes is one table of where calls go: every namespace of the node, with
// its syncers. Reroute replaces the whole table; calls that started on the
// previous one finish on it, and Reroute waits for them.
type routes struct {
	byName map[string]*dest
	gate   gate
}

// gate counts the calls running on one routes table, in slots picked at
// random so that concurrent calls rarely share a cache line: two atomic
// adds per call, and no lock.
type gate struct {
	slots [gateSlots]struct {
		n atomic.Int64
		_ [56]byte
	}
}

const gateSlots = 16

func (g *gate) enter() int {
	i := int(rand.Uint32() % gateSlots)
	g.slots[i].n.Add(1)
	return i
}

func (g *gate) exit(i int) { g.slots[i].n.Add(-1) }

// idle reports whether no call is running. Called once the table is
// replaced: a call that entered before that is seen, and later ones
// leave again (resolve checks the table after entering).
func (g *gate) idle() bool {
	for i := range g.slots {
		if g.slots[i].n.Load() != 0 {
			return false
		}
	}
	return true
}

// buildRoutes routes every namespace of n, the synchronous ones through
// their syncers (see New).
func buildRoutes(n *node.Node, syncers []*clustersync.Syncer) (*routes, error) {
	nss := n.Namespaces()
	rt := &routes{byName: make(map[string]*dest, len(nss))}
	for _, ns := range nss {
		cfg := ns.Config()
		rt.byName[ns.Name()] = &dest{ns: ns, calls: clustersync.LocalCalls(ns), tab: rt, shadow: cfg.Shadow, policies: cfg.Policies}
	}
	for _, sy := range syncers {
		ns := sy.Namespace()
		d, ok := rt.byName[ns.Name()]
		if !ok || d.ns != ns {
			return nil, fmt.Errorf("service: the syncer of %s is not of this node's namespaces", ns)
		}
		d.calls, d.store, d.synced = sy.Calls(), sy.StoreName(), true
		switch sy.Mode().(type) {
		case clustersync.Synchronous:
			d.mode = Synchronous
		case clustersync.Periodic:
			d.mode = Periodic
		}
	}
	for _, d := range rt.byName {
		// A shared namespace keeps its changes for a sync: without one
		// they would pile up, and a synchronous one would count alone.
		if d.ns.Config().Shared && !d.synced {
			return nil, fmt.Errorf("service: namespace %q keeps its changes for a sync but has no syncer", d.ns.Name())
		}
	}
	return rt, nil
}

// Reroute makes s (and every copy of it) serve its node's namespaces as
// they are now, after a node.Commit, with syncers (as New). It returns
// once no call runs on the previous namespaces and syncers, so that the
// caller may retire them — copy their counts, stop their syncers — or
// with ctx's error when ctx ends first (the new routes serve all the
// same). Calls are never refused or paused for it. It is the owner of the
// running configuration's, not a front's: a function, so that a
// Service's methods are all a front's.
func Reroute(ctx context.Context, s *Service, syncers ...*clustersync.Syncer) error {
	rt, err := buildRoutes(s.node, syncers)
	if err != nil {
		return err
	}
	old := s.rt.Swap(rt)
	// Calls run for microseconds, synchronous ones up to a store call
	// timeout: poll at a period between the two.
	for wait := 50 * time.Microsecond; !old.gate.idle(); wait = min(2*wait, 10*time.Millisecond) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("service: calls still running on the previous namespaces: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// exit ends the call that resolved r; a no-op for a route not resolved.
func (r *route) exit() {
	if r.gated {
		r.tab.gate.exit(r.slot)
		r.gated = false
	}
}
