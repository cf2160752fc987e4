package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	clustersync "github.com/limiterd/limiterd/sync"
)

// Buckets applies calls as clustersync.BucketStore specifies, in one
// round trip: one call of the bucket function (see bucketFuncSQL), which
// locks the buckets' rows in key order, decides with the same integer
// arithmetic as node and writes the rows back, in the statement's own
// transaction. Concurrent calls on a bucket thus queue on its row lock,
// and each sees the state the previous one committed.
//
// The calls must be of one namespace and name distinct buckets. A zero
// ExpireAt keeps no row alive (as in the memory store): such a bucket
// reads as new on the next call.
func (s *Store) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	const op = "buckets"
	if s.closed.Load() {
		return false, fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if len(replies) != len(calls) {
		return false, fmt.Errorf("postgres: %s: len(replies) = %d, want len(calls) = %d", op, len(replies), len(calls))
	}
	n := len(calls)
	if n == 0 {
		return true, nil // as the reference: nothing refuses
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("postgres: %s: %w: %w", op, clustersync.ErrUnavailable, err)
	}
	var (
		keys                = make([][]byte, n)
		kinds               = make([]int32, n)
		a, b, c             = make([]int64, n), make([]int64, n), make([]int64, n)
		strict              = make([]bool, n)
		life, total, lastAt = make([]int64, n), make([]int64, n), make([]int64, n)
		version             = make([]int64, n)
		expire              = make([]pgtype.Timestamptz, n)
		reset               = make([]bool, n)
		resetL, resetM      = make([]int64, n), make([]int64, n)
		seen                = make(map[string]bool, n)
	)
	for i := range calls {
		cl := &calls[i]
		key := cl.Bucket.StoreKey()
		if err := checkBucketCall(cl, key, calls[0].Namespace, seen); err != nil {
			return false, fmt.Errorf("postgres: %s: calls[%d]: %w", op, i, err)
		}
		keys[i] = []byte(key)
		kinds[i] = int32(cl.Bucket.Kind) // 1 token, 2 leaky, 3 fixed, as the function reads them
		a[i], b[i], c[i], strict[i] = cl.Bucket.A, cl.Bucket.B, cl.Bucket.C, cl.Bucket.Strict
		life[i], total[i], lastAt[i], version[i] = cl.Life, cl.Total, cl.ApplyAt, cl.Version
		expire[i] = expireAt(cl.ExpireAt)
		if cl.Reset {
			st := cl.Bucket.Init(at)
			reset[i], resetL[i], resetM[i] = true, st.Level, st.Mark
		}
	}
	if err := s.ensureSchema(ctx); err != nil {
		return false, s.fail(op, err)
	}
	allowed, err := s.buckets(ctx, inc, calls[0].Namespace, at, take,
		[]any{keys, kinds, a, b, c, strict, life, total, lastAt, version, expire, reset, resetL, resetM}, replies)
	if err != nil {
		return false, s.fail(op, err)
	}
	return allowed, nil
}

// buckets runs the bucket function and reads its rows into replies.
func (s *Store) buckets(ctx context.Context, inc, ns string, at, take int64, arrays []any, replies []clustersync.BucketReply) (bool, error) {
	args := append([]any{inc, ns, at, take}, arrays...)
	rows, err := s.db.Query(ctx, s.q.buckets, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	var (
		allowed bool
		ord     int32
		seen    int
	)
	for rows.Next() {
		var r clustersync.BucketReply
		if err := rows.Scan(&allowed, &ord, &r.Before.Level, &r.Before.Mark,
			&r.After.Level, &r.After.Mark, &r.Applied, &r.Seq, &r.Before.Waste, &r.After.Waste); err != nil {
			return false, err
		}
		if ord < 1 || int(ord) > len(replies) {
			return false, fmt.Errorf("bucket %d out of range", ord)
		}
		replies[ord-1] = r
		seen++
	}
	if err := rows.Err(); err != nil {
		return false, err
	}
	if seen != len(replies) {
		return false, fmt.Errorf("%d replies for %d buckets", seen, len(replies))
	}
	return allowed, nil
}

// checkBucketCall rejects a call the function cannot apply: another
// namespace than the first call's, a bucket named twice (the function
// keeps one state per row), or parameters node could not have built (a
// zero divisor would fail the whole transaction).
func checkBucketCall(c *clustersync.BucketCall, key, ns string, seen map[string]bool) error {
	if c.Namespace != ns {
		return fmt.Errorf("namespace %q, want the first call's %q", c.Namespace, ns)
	}
	if err := c.Bucket.Validate(); err != nil {
		return err
	}
	if seen[key] {
		return fmt.Errorf("bucket %q given twice", key)
	}
	seen[key] = true
	return nil
}
