package memory

import (
	"context"
	"fmt"

	clustersync "github.com/limiterd/limiterd/sync"
)

// bucketKey names one bucket row.
type bucketKey struct {
	namespace, key string
}

// Buckets applies calls atomically with clustersync.ApplyBuckets, the
// reference every store is compared with. An expired row counts as
// absent.
func (s *Store) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	if len(replies) != len(calls) {
		return false, fmt.Errorf("memory: buckets: len(replies) = %d, want len(calls) = %d", len(replies), len(calls))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "buckets"); err != nil {
		return false, err
	}
	now := s.now()
	if s.buckets == nil {
		s.buckets = make(map[bucketKey]*clustersync.BucketRow)
	}
	keys := make([]bucketKey, len(calls))
	rows := make([]*clustersync.BucketRow, len(calls))
	for i := range calls {
		keys[i] = bucketKey{calls[i].Namespace, calls[i].Bucket.StoreKey()}
		if r := s.buckets[keys[i]]; r != nil && r.ExpireAt.After(now) {
			c := *r
			c.Incs = make(map[string]clustersync.BucketInc, len(r.Incs)+1)
			for k, v := range r.Incs {
				c.Incs[k] = v
			}
			rows[i] = &c
		}
	}
	changed := make([]bool, len(calls))
	allowed := clustersync.ApplyBuckets(inc, at, take, calls, rows, replies, changed)
	for i := range calls {
		if changed[i] {
			s.buckets[keys[i]] = rows[i]
		}
	}
	return allowed, nil
}
