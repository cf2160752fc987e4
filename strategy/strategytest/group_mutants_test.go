package strategytest_test

import (
	"context"

	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// groupFirstTotals decides every entry of a group against the totals
// sent, as if the entries before it had counted nothing.
type groupFirstTotals struct{ *memory.Store }

func (s *groupFirstTotals) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	for i := range req.Entries {
		one := *req
		one.Entries = req.Entries[i : i+1]
		if err := s.Store.AllowGroup(ctx, &one, allowed[i:i+1], others); err != nil {
			return err
		}
	}
	return nil
}

// groupNoCountRejected drops CountRejected: a refused cost is never
// counted.
type groupNoCountRejected struct{ *memory.Store }

func (s *groupNoCountRejected) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	r := *req
	r.Entries = append([]clustersync.GroupEntry(nil), req.Entries...)
	for i := range r.Entries {
		r.Entries[i].CountRejected = false
	}
	return s.Store.AllowGroup(ctx, &r, allowed, others)
}
