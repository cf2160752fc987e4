package postgres

import (
	"context"
	"fmt"

	clustersync "github.com/limiterd/limiterd/sync"
)

// Push stores rows for incarnation inc, each only if its version is newer
// than the stored one: rows sorted by primary key (a key given twice keeps
// its highest version), one statement per part (see parts).
func (s *Store) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	const op = "push"
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if len(rows) == 0 {
		return nil
	}
	if err := s.ensureSchema(ctx); err != nil {
		return s.fail(op, err)
	}
	b := newRowBatch(rows)
	return s.each(ctx, op, b.len(), func(ctx context.Context, lo, hi int) error {
		if _, err := s.db.Exec(ctx, s.q.push, b.pushArgs(inc, lo, hi)...); err != nil {
			return s.fail(op, err)
		}
		return nil
	})
}

// Fetch writes into others[i] the sum of every incarnation's total but
// inc's for keys[i] (0 for an unknown window): one query per part (see
// parts).
func (s *Store) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	const op = "fetch"
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if len(others) != len(keys) {
		return fmt.Errorf("postgres: %s: %d results for %d keys", op, len(others), len(keys))
	}
	if len(keys) == 0 {
		return nil
	}
	if err := s.ensureSchema(ctx); err != nil {
		return s.fail(op, err)
	}
	return s.each(ctx, op, len(keys), func(ctx context.Context, lo, hi int) error {
		part := keys[lo:hi]
		n := len(part)
		ns, size, start, key := make([]string, n), make([]int64, n), make([]int64, n), make([][]byte, n)
		for i := range part {
			k := &part[i]
			ns[i], size[i], start[i], key[i] = k.Namespace, int64(k.Size), k.Start, []byte(k.Key)
		}
		return s.sums(ctx, op, others[lo:hi], identity, s.q.fetch, inc, ns, size, start, key)
	})
}

// PushFetch pushes rows like Push and writes into others[i] what Fetch
// would return for rows[i].WindowKey, in the same statement: one per part
// (see parts), so a call takes one round trip, or one per connection it
// runs on at once.
func (s *Store) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	const op = "pushfetch"
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if len(others) != len(rows) {
		return fmt.Errorf("postgres: %s: %d results for %d rows", op, len(others), len(rows))
	}
	if len(rows) == 0 {
		return nil
	}
	if err := s.ensureSchema(ctx); err != nil {
		return s.fail(op, err)
	}
	b := newRowBatch(rows)
	sums := make([]int64, b.len())
	var err error
	if b.len() < 2*minRowsPerStatement {
		// One statement: called directly, as each would, without the
		// closure's allocations (this is every synchronous call).
		err = s.sums(ctx, op, sums, identity, s.q.pfetch, b.pushArgs(inc, 0, b.len())...)
	} else {
		err = s.each(ctx, op, b.len(), func(ctx context.Context, lo, hi int) error {
			return s.sums(ctx, op, sums[lo:hi], identity, s.q.pfetch, b.pushArgs(inc, lo, hi)...)
		})
	}
	if err != nil {
		return err
	}
	for i, p := range b.pos {
		others[i] = sums[p]
	}
	return nil
}

func identity(i int) int { return i }

// sums runs a query returning (ord, sum) rows, ord counting from 1, and
// stores each sum into dst[at(ord-1)] after zeroing dst.
func (s *Store) sums(ctx context.Context, op string, dst []int64, at func(int) int, sql string, args ...any) error {
	clear(dst)
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return s.fail(op, err)
	}
	defer rows.Close()
	var ord, sum int64
	for rows.Next() {
		if err := rows.Scan(&ord, &sum); err != nil {
			return s.fail(op, err)
		}
		i := at(int(ord - 1))
		if i < 0 || i >= len(dst) {
			return fmt.Errorf("postgres: %s: row %d out of range", op, ord)
		}
		dst[i] = sum
	}
	if err := rows.Err(); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// Window returns the sum of every incarnation's total for key (0 for an
// unknown window).
func (s *Store) Window(ctx context.Context, key clustersync.WindowKey) (int64, error) {
	const op = "window"
	if s.closed.Load() {
		return 0, fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if err := s.ensureSchema(ctx); err != nil {
		return 0, s.fail(op, err)
	}
	var sum int64
	err := s.db.QueryRow(ctx, s.q.window, key.Namespace, int64(key.Size), key.Start, []byte(key.Key)).Scan(&sum)
	if err != nil {
		return 0, s.fail(op, err)
	}
	return sum, nil
}
