package strategytest_test

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// versionChanges reads "what changed since" by the writers' versions:
// the cursor is the highest version seen, so a late push that carries an
// older version is never reported.
type versionChanges struct {
	*memory.Store
	mu sync.Mutex
	at map[clustersync.WindowKey]int64 // window → highest version written
}

func newVersionChanges() *versionChanges {
	return &versionChanges{Store: memory.New(), at: map[clustersync.WindowKey]int64{}}
}

func (s *versionChanges) note(rows ...clustersync.Row) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rows {
		s.at[r.WindowKey] = max(s.at[r.WindowKey], r.Version)
	}
}

func (s *versionChanges) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	s.note(rows...)
	return s.Store.Push(ctx, inc, rows)
}

func (s *versionChanges) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	s.note(rows...)
	return s.Store.PushFetch(ctx, inc, rows, others)
}

func (s *versionChanges) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	for _, w := range req.Windows {
		s.note(w.Cur, w.Prev)
	}
	return s.Store.AllowGroup(ctx, req, allowed, others)
}

func (s *versionChanges) Changes(ctx context.Context, inc, ns string, since clustersync.Cursor, limit int, dst []clustersync.Change) ([]clustersync.Change, clustersync.Cursor, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	top := int64(0)
	for _, v := range s.at {
		top = max(top, v)
	}
	next := clustersync.Cursor(strconv.FormatInt(top, 10))
	if since == "" {
		return dst, next, false, nil
	}
	from, err := strconv.ParseInt(string(since), 10, 64)
	if err != nil {
		return dst, since, false, clustersync.ErrChangesLost
	}
	for k, v := range s.at {
		if k.Namespace != ns || v <= from {
			continue
		}
		others := make([]int64, 1)
		if err := s.Store.Fetch(ctx, inc, []clustersync.WindowKey{k}, others); err != nil {
			return dst, since, false, err
		}
		dst = append(dst, clustersync.Change{WindowKey: k, Others: others[0]})
	}
	return dst, next, false, nil
}

// onePage reads one page of changes and reports no more.
type onePage struct{ *memory.Store }

func (s *onePage) Changes(ctx context.Context, inc, ns string, since clustersync.Cursor, limit int, dst []clustersync.Change) ([]clustersync.Change, clustersync.Cursor, bool, error) {
	dst, next, _, err := s.Store.Changes(ctx, inc, ns, since, limit, dst)
	return dst, next, false, err
}

// lossHidden answers a lost cursor as "nothing changed" from now.
type lossHidden struct{ *memory.Store }

func (s *lossHidden) Changes(ctx context.Context, inc, ns string, since clustersync.Cursor, limit int, dst []clustersync.Change) ([]clustersync.Change, clustersync.Cursor, bool, error) {
	dst, next, more, err := s.Store.Changes(ctx, inc, ns, since, limit, dst)
	if errors.Is(err, clustersync.ErrChangesLost) {
		return s.Store.Changes(ctx, inc, ns, "", limit, dst)
	}
	return dst, next, more, err
}
