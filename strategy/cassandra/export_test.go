package cassandra

import (
	"context"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
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

// BucketTrips returns how many requests s's Buckets calls sent.
func BucketTrips(s *Store) int64 { return s.bucketTrips.Load() }

// BucketTTL returns the TTL in seconds of the row of bucket b in
// namespace ns.
func BucketTTL(ctx context.Context, s *Store, ns string, b ratelimit.BucketSpec) (int, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return 0, err
	}
	var ttl int
	err = sess.Query("SELECT TTL(level) FROM "+s.cfg.Keyspace+"."+bucketTable(s.cfg)+" WHERE namespace = ? AND key = ? AND bucket = ?",
		ns, []byte(b.Key), []byte(b.StoreKey())).ScanContext(ctx, &ttl)
	return ttl, err
}

// LeaseRetries returns how many Leases runs of s started again after a
// failed condition.
func LeaseRetries(s *Store) int64 { return s.leaseRetries.Load() }

// LeaseTrips returns how many requests s's Leases calls sent.
func LeaseTrips(s *Store) int64 { return s.leaseTrips.Load() }

// LeaseTTLs returns the TTL in seconds of the lease rows of key in
// namespace ns, by id, and of the partition's seq.
func LeaseTTLs(ctx context.Context, s *Store, ns, key string) (map[string]int, int, error) {
	sess, err := s.session(ctx)
	if err != nil {
		return nil, 0, err
	}
	iter := sess.Query("SELECT id, TTL(expiry), TTL(seq) FROM "+s.cfg.Keyspace+"."+leaseTable(s.cfg)+" WHERE namespace = ? AND key = ?",
		ns, []byte(key)).IterContext(ctx)
	ttls := map[string]int{}
	var (
		id          []byte
		ttl, seqTTL int
	)
	for iter.Scan(&id, &ttl, &seqTTL) {
		ttls[string(id)] = ttl
	}
	return ttls, seqTTL, iter.Close()
}
