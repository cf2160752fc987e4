package cassandra

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// parallel runs fn(ctx, 0..n-1) with at most Concurrency calls at once.
// The first error cancels the others' ctx and is returned; so is ctx's
// error when ctx ends first.
func (s *Store) parallel(ctx context.Context, n int, fn func(context.Context, int) error) error {
	if n == 1 {
		return fn(ctx, 0)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.Concurrency)
	for i := range n {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return fn(gctx, i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err() // done before every index ran
}
