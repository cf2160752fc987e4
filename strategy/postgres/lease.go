package postgres

import (
	"context"
	"fmt"

	clustersync "github.com/limiterd/limiterd/sync"
)

// leaseKeysPerStatement bounds the distinct keys of one statement of
// Leases. Each key holds an advisory lock until the statement's
// transaction ends, and the server's shared lock table has room for
// max_locks_per_transaction (default 64) locks per connection: a call of
// thousands of keys in one transaction could fill it for every client.
const leaseKeysPerStatement = 64

// leaseKey names one key's leases.
type leaseKey struct{ namespace, key string }

// Leases applies ops as clustersync.LeaseStore specifies: one call of the
// lease function (see leaseFuncSQL) per statement, in the statement's own
// transaction, which locks the ops' keys (advisory locks, in ascending
// order) and then applies the ops in order. A call of at most 64
// distinct keys and 5000 ops is one round trip; a larger one is split, in
// order, into statements within those bounds, so an error leaves a prefix
// of the ops applied.
func (s *Store) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	const op = "leases"
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if len(replies) != len(ops) {
		return fmt.Errorf("postgres: %s: len(replies) = %d, want len(ops) = %d", op, len(replies), len(ops))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("postgres: %s: %w: %w", op, clustersync.ErrUnavailable, err)
	}
	if len(ops) == 0 {
		return nil
	}
	if err := s.ensureSchema(ctx); err != nil {
		return s.fail(op, err)
	}
	if len(ops) <= leaseKeysPerStatement {
		// Within both bounds: the synchronous calls' path.
		if err := s.leases(ctx, now, ops, replies); err != nil {
			return s.fail(op, err)
		}
		return nil
	}
	keys := make(map[leaseKey]struct{}, leaseKeysPerStatement)
	for lo := 0; lo < len(ops); {
		clear(keys)
		hi := lo
		for ; hi < len(ops) && hi-lo < rowsPerStatement; hi++ {
			k := leaseKey{ops[hi].Namespace, ops[hi].Key}
			if _, ok := keys[k]; !ok {
				if len(keys) == leaseKeysPerStatement {
					break
				}
				keys[k] = struct{}{}
			}
		}
		if err := s.leases(ctx, now, ops[lo:hi], replies[lo:hi]); err != nil {
			return s.fail(op, err)
		}
		lo = hi
	}
	return nil
}

// leases runs the lease function on ops and reads its rows into replies.
func (s *Store) leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	n := len(ops)
	var (
		kinds          = make([]int32, n)
		nss            = make([]string, n)
		keys, ids      = make([][]byte, n), make([][]byte, n)
		limits, expiry = make([]int64, n), make([]int64, n)
		locks          = make([]int64, n)
	)
	for i := range ops {
		o := &ops[i]
		kinds[i], nss[i] = int32(o.Kind), o.Namespace
		keys[i], ids[i] = []byte(o.Key), []byte(o.ID)
		limits[i], expiry[i] = o.Limit, o.Expiry
		locks[i] = lockKey(s.q.leaseLockNS, o.Namespace, o.Key)
	}
	rows, err := s.db.Query(ctx, s.q.leases, now, kinds, nss, keys, ids, limits, expiry, locks)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		ord  int32
		seen int
	)
	for rows.Next() {
		var r clustersync.LeaseReply
		if err := rows.Scan(&ord, &r.OK, &r.Held, &r.Next); err != nil {
			return err
		}
		if ord < 1 || int(ord) > n {
			return fmt.Errorf("lease op %d out of range", ord)
		}
		replies[ord-1] = r
		seen++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if seen != n {
		return fmt.Errorf("%d replies for %d lease ops", seen, n)
	}
	return nil
}
