package sync

import "time"

// Metrics receives what a Syncer measures, labelled by namespace name.
// Implementations must be safe for concurrent use and must not block: they
// are called on the sync loop and, for Fallback, on synchronous calls.
// The Prometheus implementation lives with the program that owns the
// registry, so this package needs no metrics library.
type Metrics interface {
	// Tick reports one tick's duration and which of its halves failed.
	Tick(namespace string, d time.Duration, pushFailed, fetchFailed bool)
	// Synced reports the end of a fully successful tick.
	Synced(namespace string, at time.Time)
	// Dirty reports the rows changed since their last successful push, as
	// a tick found them.
	Dirty(namespace string, rows int)
	// Pushed and Fetched count rows written to and read from the store.
	Pushed(namespace string, rows int)
	Fetched(namespace string, rows int)
	// Fallback counts a synchronous call answered from local counts
	// because the store failed, timed out or was presumed down.
	Fallback(namespace string)
	// Escalated counts a periodic Allow decided by the store because it
	// came near a limit or its key was new to the node.
	Escalated(namespace string)
}

// NopMetrics discards every measurement. Embed it to observe only some.
type NopMetrics struct{}

func (NopMetrics) Tick(string, time.Duration, bool, bool) {}
func (NopMetrics) Synced(string, time.Time)               {}
func (NopMetrics) Dirty(string, int)                      {}
func (NopMetrics) Pushed(string, int)                     {}
func (NopMetrics) Fetched(string, int)                    {}
func (NopMetrics) Fallback(string)                        {}
func (NopMetrics) Escalated(string)                       {}
