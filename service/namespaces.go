package service

import (
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// Mode is how a namespace shares its counts with the other nodes.
type Mode uint8

// The modes, as sync_rate selects them.
const (
	// Local: this node's counts only (sync_rate < 0).
	Local Mode = iota
	// Periodic: pushed and fetched every sync_rate seconds (> 0).
	Periodic
	// Synchronous: every call written through to the store (0).
	Synchronous
)

var modeNames = [...]string{Local: "local", Periodic: "periodic", Synchronous: "synchronous"}

// String is the mode's name: local, periodic or synchronous.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "unknown"
}

// NamespaceInfo is what a front needs to know of a namespace.
type NamespaceInfo struct {
	Name string
	// WindowSizes are its window sizes, ascending; shared: not to be
	// changed.
	WindowSizes []time.Duration
	Mode        Mode
	// Estimator: an estimator namespace, which serves sliding windows
	// only.
	Estimator bool
}

// Namespaces returns every namespace served, ordered by name.
func (s *Service) Namespaces() []NamespaceInfo {
	rt := s.rt.Load()
	nss := s.node.Namespaces()
	out := make([]NamespaceInfo, len(nss))
	for i, ns := range nss {
		out[i] = rt.info(ns)
	}
	return out
}

// Namespace returns the namespace called name ("" is "default"), or a
// FieldError wrapping ErrUnknownNamespace.
func (s *Service) Namespace(name string) (NamespaceInfo, error) {
	ns, err := s.node.Namespace(name)
	if err != nil {
		return NamespaceInfo{}, err
	}
	return s.rt.Load().info(ns), nil
}

// info is ns's NamespaceInfo, its mode as routed by rt.
func (rt *routes) info(ns *node.Namespace) NamespaceInfo {
	m := Local
	if d := rt.byName[ns.Name()]; d != nil && d.ns == ns {
		m = d.mode
	}
	return NamespaceInfo{Name: ns.Name(), WindowSizes: ns.Sizes(), Mode: m, Estimator: ns.Config().Estimator != nil}
}

// FormatDuration writes d as the config and the JSON API write durations
// ("60s", "250ms"), for a front's messages.
func FormatDuration(d time.Duration) string { return ratelimit.FormatDuration(d) }
