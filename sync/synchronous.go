package sync

// synchronous serves a synchronous namespace's calls: each written
// through to the store, the calls of one key that queue meanwhile sharing
// the next store call (direct.go, group.go); the tick, every
// RetryPeriod, pushes what the calls could not.
type synchronous struct {
	shared
	// groups queues the calls of keys in flight (group.go).
	groups *groups
}
