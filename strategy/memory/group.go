package memory

import (
	"context"
	"errors"
	"fmt"

	clustersync "github.com/limiterd/limiterd/sync"
)

// AllowGroup decides req's entries in order in one atomic step, as
// clustersync.GroupAllower documents, by clustersync.DecideGroup: it
// reads the others' totals of every window, decides, then writes every
// window's Prev row and its Cur row with the counted costs, version-checked
// like Push.
func (s *Store) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	if len(allowed) != len(req.Entries) || len(others) != len(req.Windows) {
		return fmt.Errorf("memory: allow group: len(allowed) = %d, len(others) = %d, want %d, %d",
			len(allowed), len(others), len(req.Entries), len(req.Windows))
	}
	for _, w := range req.Windows {
		if w.Size <= 0 {
			return errSize
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "allow group"); err != nil {
		return err
	}
	now := s.now()
	for i := range req.Windows {
		w := &req.Windows[i]
		others[i] = [2]int64{s.sum(w.Cur.WindowKey, req.Inc, false, now), s.sum(w.Prev.WindowKey, req.Inc, false, now)}
	}
	cur := make([]int64, len(req.Windows))
	clustersync.DecideGroup(req, others, allowed, cur)
	for i := range req.Windows {
		w := &req.Windows[i]
		s.put(req.Inc, &w.Prev, now)
		row := w.Cur
		row.Total = cur[i]
		s.put(req.Inc, &row, now)
	}
	s.maybePurge(now)
	return nil
}

// AllowGroup forwards to the inner store's AllowGroup unless a fault is
// injected (counted as an allow call); an inner store without one makes
// it fail with errors.ErrUnsupported.
func (f *Faulty) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	if err := f.gate(ctx, "allow", &f.allow); err != nil {
		return err
	}
	ga, ok := f.inner.(clustersync.GroupAllower)
	if !ok {
		return fmt.Errorf("memory: faulty allow group: inner store %T: %w", f.inner, errors.ErrUnsupported)
	}
	return ga.AllowGroup(ctx, req, allowed, others)
}
