package strategytest

import (
	"context"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// OneAllow is a single Allow request, as a node sends it: a
// clustersync.GroupAllowRequest of one entry, whose windows are those of
// its limits in order (Group).
type OneAllow struct {
	Inc string
	// At is the decision time in Unix nanoseconds.
	At   int64
	Cost int64 // micro-hits
	// Limits to check, at most one per window size.
	Limits        []OneLimit
	CountRejected bool
}

// OneLimit is one limit of a OneAllow, with the incarnation's own rows of
// the current and previous window of its size.
type OneLimit struct {
	Size  time.Duration
	Limit int64 // micro-hits
	Cur   clustersync.Row
	Prev  clustersync.Row
}

// OneResult is a store's decision of a OneAllow: Others[i] holds the
// other incarnations' totals of Limits[i] ([0] the current window, [1]
// the previous one).
type OneResult struct {
	Allowed bool
	Others  [][2]int64
}

// Group returns a as the group of one entry a node sends.
func (a *OneAllow) Group() *clustersync.GroupAllowRequest {
	req := &clustersync.GroupAllowRequest{Inc: a.Inc, At: a.At}
	e := clustersync.GroupEntry{Cost: a.Cost, CountRejected: a.CountRejected}
	for i, l := range a.Limits {
		req.Windows = append(req.Windows, clustersync.GroupWindow{Size: l.Size, Cur: l.Cur, Prev: l.Prev})
		e.Limits = append(e.Limits, clustersync.GroupLimit{Window: i, Limit: l.Limit})
	}
	req.Entries = []clustersync.GroupEntry{e}
	return req
}

// AllowOne has ga decide a as a group of one.
func AllowOne(ctx context.Context, ga clustersync.GroupAllower, a OneAllow) (OneResult, error) {
	res := OneResult{Others: make([][2]int64, len(a.Limits))}
	allowed := make([]bool, 1)
	err := ga.AllowGroup(ctx, a.Group(), allowed, res.Others)
	res.Allowed = allowed[0]
	return res, err
}
