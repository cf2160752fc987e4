package sync

import "time"

// synchronous serves a synchronous namespace's calls: each written
// through to the store, the calls of one key that queue meanwhile sharing
// the next store call (direct.go, group.go); the tick, every
// RetryPeriod, pushes what the calls could not.
type synchronous struct {
	shared
	// groups queues the calls of keys in flight (group.go).
	groups *groups
	// prevReads serves exchange; the tick prunes it.
	prevReads *prevReads
}

// tick prunes the previous reads of windows that no longer count.
func (wt *synchronous) tick(now time.Time) { wt.prevReads.prune(now, wt.s.ns.Sizes()) }

// forget drops key's previous reads: a reset changed what the store
// holds of them.
func (wt *synchronous) forget(key string) { wt.prevReads.forget(key) }
