package cassandra

import (
	"context"
	"time"
)

// ExecCQL runs one statement on s's session, for tests.
func ExecCQL(ctx context.Context, s *Store, stmt string) error {
	sess, err := s.session(ctx)
	if err != nil {
		return err
	}
	return sess.Query(stmt).ExecContext(ctx)
}

// Sessions returns how many sessions s has created.
func Sessions(s *Store) int64 { return s.connects.Load() }

// TTL is ttl, for tests.
var TTL = ttl

// SetReplaceSessionAfter sets how long a session may find no host before
// it is replaced, until the returned restore is called.
func SetReplaceSessionAfter(d time.Duration) (restore func()) {
	old := replaceSessionAfter
	replaceSessionAfter = d
	return func() { replaceSessionAfter = old }
}
