package node

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// Node is the set of namespaces one limiterd process serves. The set can
// change while it serves (Prepare, Commit).
type Node struct {
	clock Clock
	tab   atomic.Pointer[nsTable]
}

// nsTable is one set of namespaces; a change replaces the whole table.
type nsTable struct {
	byName map[string]*Namespace
	names  []string // sorted
}

// New builds a node from namespace configs, which must have distinct names.
func New(cfgs []Config, clock Clock) (*Node, error) {
	if clock == nil {
		clock = SystemClock{}
	}
	n := &Node{clock: clock}
	t := &nsTable{byName: make(map[string]*Namespace, len(cfgs))}
	for i, c := range cfgs {
		if _, dup := t.byName[c.Name]; dup {
			return nil, fieldErr(fmt.Sprintf("namespaces[%d].name", i), ErrInvalidConfig, "namespace %q is defined twice", c.Name)
		}
		ns, err := NewNamespace(c, clock)
		if err != nil {
			if fe, ok := err.(*ratelimit.FieldError); ok {
				fe.Field = fmt.Sprintf("namespaces[%d].%s", i, fe.Field)
			}
			return nil, err
		}
		t.byName[c.Name] = ns
		t.names = append(t.names, c.Name)
	}
	slices.Sort(t.names)
	n.tab.Store(t)
	return n, nil
}

// Namespace returns the namespace called name; "" means DefaultNamespace.
func (n *Node) Namespace(name string) (*Namespace, error) {
	if name == "" {
		name = DefaultNamespace
	}
	t := n.tab.Load()
	if ns := t.byName[name]; ns != nil {
		return ns, nil
	}
	return nil, UnknownNamespace(name, len(t.byName))
}

// UnknownNamespace is the error of a call naming a namespace the node does
// not serve ("" being DefaultNamespace), among served namespaces.
func UnknownNamespace(name string, served int) error {
	if name == "" {
		name = DefaultNamespace
	}
	if served == 0 {
		return fieldErr("namespace", ErrUnknownNamespace, "namespace %q is not configured: this node serves no namespace", name)
	}
	return fieldErr("namespace", ErrUnknownNamespace, "namespace %q is not configured", name)
}

// Namespaces returns every namespace, ordered by name.
func (n *Node) Namespaces() []*Namespace {
	t := n.tab.Load()
	out := make([]*Namespace, len(t.names))
	for i, name := range t.names {
		out[i] = t.byName[name]
	}
	return out
}

// reclaimInterval is how often Run reclaims a namespace's dead windows: its
// smallest window size, clamped to [1 s, 30 s].
func reclaimInterval(c Config) time.Duration {
	return min(max(slices.Min(c.WindowSizes), time.Second), 30*time.Second)
}

// leaseIdle is how long a key of a namespace's lease table stays without
// a lease of this node: long enough that a key in use keeps its others'
// count from one sync to the next.
func leaseIdle(c Config) time.Duration {
	return max(time.Minute, c.LeaseIdle)
}

// Run reclaims dead windows, buckets back at their idle state and idle
// lease keys of every namespace until ctx is done. It ticks every second,
// the shortest reclaimInterval, and follows changes of the namespaces.
func (n *Node) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := make(map[*Namespace]time.Time)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := n.clock.Now()
		tab := n.tab.Load()
		for _, ns := range tab.byName {
			if now.Sub(last[ns]) >= reclaimInterval(ns.cfg) {
				ns.reclaim(now)
				ns.buckets.reclaim(now)
				ns.leases.reclaim(now, now.Add(-leaseIdle(ns.cfg)))
				last[ns] = now
			}
		}
		for ns := range last {
			if tab.byName[ns.cfg.Name] != ns {
				delete(last, ns) // replaced or removed
			}
		}
	}
}
