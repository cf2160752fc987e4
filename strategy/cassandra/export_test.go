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

// SetReplaceSessionAfter sets how long a session of s may find no host
// before it is replaced.
func SetReplaceSessionAfter(s *Store, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replaceSessionAfter = d
}

// BucketRetries returns how many Buckets attempts of s started again
// after a failed condition.
func BucketRetries(s *Store) int64 { return s.bucketRetries.Load() }
