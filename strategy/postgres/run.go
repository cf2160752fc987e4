package postgres

import (
	"context"

	"golang.org/x/sync/errgroup"
)

const (
	// rowsPerStatement bounds the rows (or windows) of one statement.
	rowsPerStatement = 5000
	// minRowsPerStatement is the smallest part a call is split into to run
	// in parallel: below it a statement's fixed cost (a round trip, a
	// connection) outweighs the backend CPU it would spread.
	minRowsPerStatement = 500
	// maxParallel bounds the statements one call runs at once, each on its
	// own connection. A statement runs in one backend process, on one
	// server core: one statement at a time would leave a tick of many
	// thousand keys bound to a single core however many the server has.
	maxParallel = 4
)

// parts splits n rows into the ranges of the statements a call runs: at
// most rowsPerStatement each, and, on a pool, up to par of them at once
// when there are enough rows to keep several backends busy.
func (s *Store) parts(n int) []int {
	k := (n + rowsPerStatement - 1) / rowsPerStatement
	k = max(k, min(s.par, n/minRowsPerStatement))
	bounds := make([]int, k+1)
	for i := range bounds {
		bounds[i] = n * i / k
	}
	return bounds
}

// each runs f(lo, hi) for every part of n rows, up to par at once, and
// returns the first error (the rest are cancelled). Parts are disjoint
// ranges of rows sorted by primary key, so statements running at once
// never wait for each other's row locks, and each still locks its rows in
// primary-key order.
func (s *Store) each(ctx context.Context, op string, n int, f func(ctx context.Context, lo, hi int) error) error {
	if n < 2*minRowsPerStatement {
		return f(ctx, 0, n) // one part: the synchronous calls' path
	}
	bounds := s.parts(n)
	if len(bounds) == 2 || s.par == 1 {
		for i := 0; i+1 < len(bounds); i++ {
			if err := f(ctx, bounds[i], bounds[i+1]); err != nil {
				return err
			}
		}
		return nil
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.par)
	var stopped error // ctx ended before every part started
	for i := 0; i+1 < len(bounds); i++ {
		if stopped = gctx.Err(); stopped != nil {
			break
		}
		lo, hi := bounds[i], bounds[i+1]
		g.Go(func() error { return f(gctx, lo, hi) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if stopped != nil {
		return s.fail(op, stopped)
	}
	return nil
}
