package memory

import (
	"context"
	"fmt"

	clustersync "github.com/limiterd/limiterd/sync"
)

// leaseKey names one key's lease set.
type leaseKey struct {
	namespace, key string
}

// Leases applies ops in order with clustersync.ApplyLease, the reference
// every store is compared with, under the store's one mutex.
func (s *Store) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	if len(replies) != len(ops) {
		return fmt.Errorf("memory: leases: len(replies) = %d, want len(ops) = %d", len(replies), len(ops))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "leases"); err != nil {
		return err
	}
	if s.leases == nil {
		s.leases = make(map[leaseKey]*clustersync.LeaseSet)
	}
	for i, op := range ops {
		k := leaseKey{op.Namespace, op.Key}
		set := s.leases[k]
		if set == nil {
			set = &clustersync.LeaseSet{}
		}
		replies[i] = clustersync.ApplyLease(set, now, op)
		if set.Expiry() > now {
			s.leases[k] = set
		} else {
			delete(s.leases, k)
		}
	}
	return nil
}
