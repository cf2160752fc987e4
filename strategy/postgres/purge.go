package postgres

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// purgeBatch is the most rows one DELETE of Purge removes, so a purge
// never holds many row locks or a long transaction.
const purgeBatch = 1000

// Purge deletes the window and bucket rows whose expire_at has passed
// (a bucket's incarnation rows with it), and the lease and release rows
// a minute past their time on the server's clock, in statements of at
// most 1000 rows each (skipping rows other transactions hold locked, so
// nodes purging at once skip each other's rows), until a statement deletes
// fewer; it returns how many rows it deleted. A store made by Open runs it
// every PurgeInterval by itself.
//
// Deleting rows was chosen over dropping time partitions: the live rows
// are few (about two windows per key, size and node), windows of very
// different sizes (100 ms to days) share the table, and partitions would
// need DDL privileges and a partition scheduler on every deployment.
func (s *Store) Purge(ctx context.Context) (int64, error) {
	const op = "purge"
	if s.closed.Load() {
		return 0, fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if err := s.ensureSchema(ctx); err != nil {
		return 0, s.fail(op, err)
	}
	var total int64
	for _, q := range [...]string{s.q.purge, s.q.purgeBuckets, s.q.purgeLeases, s.q.purgeReleases} {
		for {
			tag, err := s.db.Exec(ctx, q, purgeBatch)
			if err != nil {
				return total, s.fail(op, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < purgeBatch {
				break
			}
			if s.closed.Load() {
				return total, fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
			}
		}
	}
	return total, nil
}

// background creates the table as soon as the server answers, then purges
// every interval (the first time at a random point of the first interval,
// so nodes started together do not purge together) until ctx is done.
func (s *Store) background(ctx context.Context, every time.Duration) {
	defer s.wg.Done()
	if s.cfg.CreateSchema {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := s.ensureSchema(sctx); err != nil && ctx.Err() == nil {
			s.log.Debug("postgres: creating the table failed; the next call retries", "err", err)
		}
		cancel()
	}
	timer := time.NewTimer(rand.N(every) + time.Millisecond)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		start := time.Now()
		n, err := s.Purge(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, clustersync.ErrUnavailable):
			s.log.Debug("postgres: purge failed; will retry", "err", err, "deleted", n)
		case err != nil:
			s.log.Warn("postgres: purge failed; will retry", "err", err, "deleted", n)
		default:
			s.log.Debug("postgres: purged expired rows", "deleted", n, "took", time.Since(start))
		}
		timer.Reset(every)
	}
}
