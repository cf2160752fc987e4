package sync

import (
	"fmt"
	"time"
)

// Mode is how a namespace shares its counts with the other nodes: Local,
// Periodic or Synchronous. The config's sync_rate is decoded into one
// once, where the config is loaded; nothing after that reads a sign.
type Mode interface {
	// String is the mode's name: local, periodic or synchronous.
	String() string
	mode()
}

// Local keeps a namespace's counts on this node (sync_rate < 0).
type Local struct{}

// Periodic pushes and fetches a namespace's counts every Period
// (sync_rate > 0).
type Periodic struct{ Period time.Duration }

// Synchronous writes every call of a namespace through to its store
// (sync_rate = 0).
type Synchronous struct{}

func (Local) mode()       {}
func (Periodic) mode()    {}
func (Synchronous) mode() {}

func (Local) String() string       { return "local" }
func (Periodic) String() string    { return "periodic" }
func (Synchronous) String() string { return "synchronous" }

// The bounds of a periodic namespace's period.
const (
	MinPeriod = time.Millisecond
	MaxPeriod = 24 * time.Hour
)

// StoreDownPolicy is what a synchronous namespace's Acquire does when its
// store cannot be reached.
type StoreDownPolicy string

// The store-down policies.
const (
	// StoreDownRefuse refuses the Acquire (the default).
	StoreDownRefuse StoreDownPolicy = "refuse"
	// StoreDownLocal decides it from this node's own leases, pushed when
	// the store is back.
	StoreDownLocal StoreDownPolicy = "local"
)

// period is how often m's namespace ticks: its period when periodic, the
// retry period when synchronous.
func period(m Mode, retry time.Duration) (time.Duration, error) {
	switch m := m.(type) {
	case Periodic:
		if m.Period < MinPeriod || m.Period > MaxPeriod {
			return 0, fmt.Errorf("period %s out of [%s, %s]", m.Period, MinPeriod, MaxPeriod)
		}
		return m.Period, nil
	case Synchronous:
		return retry, nil
	default:
		return 0, fmt.Errorf("mode %v does not sync", m)
	}
}
