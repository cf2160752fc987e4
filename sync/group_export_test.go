package sync

// Queued returns how many calls of key wait for a group (for tests that
// must know a call has queued before acting).
func (s *Syncer) Queued(key string) int {
	sh := s.calls.(*synchronous).groups.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if q := sh.keys[key]; q != nil {
		return len(q.calls)
	}
	return 0
}

// MaxGroup is the most calls one store call decides.
const MaxGroup = maxGroup

// FreshBatch is the most new keys one background fetch reads.
const FreshBatch = freshBatch
