package node

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// Node is the set of namespaces one limiterd process serves.
type Node struct {
	clock  Clock
	byName map[string]*Namespace
	names  []string
}

// New builds a node from namespace configs, which must have distinct names.
func New(cfgs []Config, clock Clock) (*Node, error) {
	if clock == nil {
		clock = SystemClock{}
	}
	n := &Node{clock: clock, byName: make(map[string]*Namespace, len(cfgs))}
	for i, c := range cfgs {
		if _, dup := n.byName[c.Name]; dup {
			return nil, fieldErr(fmt.Sprintf("namespaces[%d].name", i), ErrInvalidConfig, "namespace %q is defined twice", c.Name)
		}
		ns, err := NewNamespace(c, clock)
		if err != nil {
			if fe, ok := err.(*FieldError); ok {
				fe.Field = fmt.Sprintf("namespaces[%d].%s", i, fe.Field)
			}
			return nil, err
		}
		n.byName[c.Name] = ns
		n.names = append(n.names, c.Name)
	}
	slices.Sort(n.names)
	return n, nil
}

// Clock returns the node's clock.
func (n *Node) Clock() Clock { return n.clock }

// Namespace returns the namespace called name; "" means DefaultNamespace.
func (n *Node) Namespace(name string) (*Namespace, error) {
	if name == "" {
		name = DefaultNamespace
	}
	if ns := n.byName[name]; ns != nil {
		return ns, nil
	}
	return nil, fieldErr("namespace", ErrUnknownNamespace, "namespace %q is not configured", name)
}

// Namespaces returns every namespace, ordered by name.
func (n *Node) Namespaces() []*Namespace {
	out := make([]*Namespace, len(n.names))
	for i, name := range n.names {
		out[i] = n.byName[name]
	}
	return out
}

// ReclaimInterval is how often Run reclaims a namespace's dead windows: its
// smallest window size, clamped to [1 s, 30 s].
func ReclaimInterval(c Config) time.Duration {
	return min(max(slices.Min(c.WindowSizes), time.Second), 30*time.Second)
}

// leaseIdle is how long a key of a namespace's lease table stays without
// a lease of this node: long enough that a key in use keeps its others'
// count from one sync to the next.
func leaseIdle(c Config) time.Duration {
	return max(time.Minute, 4*c.SyncPeriod())
}

// Run reclaims dead windows, buckets back at their idle state and idle
// lease keys of every namespace until ctx is done.
func (n *Node) Run(ctx context.Context) {
	tick := time.Second
	for _, ns := range n.byName {
		tick = min(tick, ReclaimInterval(ns.cfg))
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	last := make(map[*Namespace]time.Time)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := n.clock.Now()
		for _, ns := range n.byName {
			if now.Sub(last[ns]) >= ReclaimInterval(ns.cfg) {
				ns.Reclaim(now)
				ns.buckets.Reclaim(now)
				ns.leases.Reclaim(now, now.Add(-leaseIdle(ns.cfg)))
				last[ns] = now
			}
		}
	}
}
