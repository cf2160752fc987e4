package cassandra

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	clustersync "github.com/limiterd/limiterd/sync"
)

// maxBatchBytes keeps an unlogged batch under Cassandra's
// batch_size_warn_threshold (default 5 KiB; Cassandra logs every batch
// over it): a batch is cut before a row that would take it over (a row
// alone always goes).
const maxBatchBytes = 4 << 10

// Push stores rows for incarnation inc: each row one INSERT ... USING
// TTL ... AND TIMESTAMP <Version>, grouped into unlogged batches of up to
// BatchRows rows, at most Concurrency requests in flight. Cassandra keeps
// the cell with the highest write timestamp, on every replica and through
// compaction, so an older version never overwrites a newer one and a
// repeated push changes nothing: the version check needs no read before
// the write and no lightweight transaction. (Two writes with one
// timestamp and different values would resolve to the larger value; an
// incarnation's versions only grow, so it never sends those.)
func (s *Store) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	if err := s.precheck(inc); err != nil {
		return err
	}
	for i := range rows {
		if err := checkNamespace(rows[i].Namespace); err != nil {
			return err
		}
	}
	if len(rows) == 0 {
		return nil
	}
	sess, err := s.session(ctx)
	if err != nil {
		return s.wrap("push", ctx, err)
	}
	err = s.push(ctx, sess, inc, rows)
	s.observe(sess, err)
	return s.wrap("push", ctx, err)
}

func (s *Store) push(ctx context.Context, sess *gocql.Session, inc string, rows []clustersync.Row) error {
	now := time.Now()
	// Cut rows into batches of at most BatchRows rows and about
	// maxBatchBytes.
	cuts := []int{0}
	n, size := 0, 0
	for i := range rows {
		b := rowBytes(inc, &rows[i])
		if n > 0 && (n == s.cfg.BatchRows || size+b > maxBatchBytes) {
			cuts = append(cuts, i)
			n, size = 0, 0
		}
		n++
		size += b
	}
	cuts = append(cuts, len(rows))
	return s.parallel(ctx, len(cuts)-1, func(ctx context.Context, j int) error {
		chunk := rows[cuts[j]:cuts[j+1]]
		args := insertArgs(inc, chunk, now)
		if len(chunk) == 1 {
			return sess.Query(s.insertCQL, args...).
				Consistency(s.wcons).Idempotent(true).ExecContext(ctx)
		}
		b := sess.Batch(gocql.UnloggedBatch)
		b.Entries = make([]gocql.BatchEntry, len(chunk))
		for i := range chunk {
			b.Entries[i] = gocql.BatchEntry{Stmt: s.insertCQL, Args: args[i*insertCols : (i+1)*insertCols], Idempotent: true}
		}
		return b.Consistency(s.wcons).ExecContext(ctx)
	})
}

// PushFetch pushes rows like Push and fetches the others' totals of
// their windows like Fetch, both at once: CQL has no statement that
// writes and reads, but the read excludes this incarnation's rows, so it
// need not wait for the write. The call takes the longer of the two
// round trips instead of their sum.
func (s *Store) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	if err := s.precheck(inc); err != nil {
		return err
	}
	if len(others) != len(rows) {
		return fmt.Errorf("cassandra: pushfetch: len(others) = %d, want len(rows) = %d", len(others), len(rows))
	}
	for i := range rows {
		if err := checkNamespace(rows[i].Namespace); err != nil {
			return err
		}
	}
	clear(others)
	if len(rows) == 0 {
		return nil
	}
	sess, err := s.session(ctx)
	if err != nil {
		return s.wrap("pushfetch", ctx, err)
	}
	keys := make([]clustersync.WindowKey, len(rows))
	for i := range rows {
		keys[i] = rows[i].WindowKey
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var perr error
	var wg sync.WaitGroup
	wg.Go(func() {
		if perr = s.push(cctx, sess, inc, rows); perr != nil {
			cancel()
		}
	})
	ferr := s.fetch(cctx, sess, inc, keys, others)
	if ferr != nil {
		cancel()
	}
	wg.Wait()
	s.observe(sess, cmp.Or(perr, ferr))
	if perr != nil {
		return s.wrap("pushfetch: push", ctx, perr)
	}
	return s.wrap("pushfetch: fetch", ctx, ferr)
}
