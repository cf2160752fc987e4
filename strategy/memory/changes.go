package memory

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	clustersync "github.com/limiterd/limiterd/sync"
)

// changeLogs is the store's clustersync.ChangeReader log: one counter for
// the store, and per namespace the counter's value at each window's last
// write. A cursor is "<epoch>:<counter>"; the epoch is random per store,
// so a cursor of another store reads as lost.
type changeLogs struct {
	epoch string
	seq   int64
	logs  map[string]*changeLog
}

type changeLog struct {
	at map[written]int64 // per window and writer, the counter at its last write
	// trimmed: what was written at or before it is forgotten.
	trimmed int64
}

func (c *changeLogs) init() {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	c.epoch = hex.EncodeToString(b)
	c.logs = make(map[string]*changeLog)
}

// written is one writer's writes of one window.
type written struct {
	k   clustersync.WindowKey
	inc string
}

// record notes a write of window k by inc. The caller holds s.mu for
// writing.
func (c *changeLogs) record(k *clustersync.WindowKey, inc string) {
	l := c.logs[k.Namespace]
	if l == nil {
		l = &changeLog{at: make(map[written]int64)}
		c.logs[k.Namespace] = l
	}
	c.seq++
	l.at[written{*k, inc}] = c.seq
}

// forget drops a window whose rows were all purged: expiry records
// nothing.
func (c *changeLogs) forget(k *clustersync.WindowKey) {
	if l := c.logs[k.Namespace]; l != nil {
		for w := range l.at {
			if w.k == *k {
				delete(l.at, w)
			}
		}
	}
}

func (c *changeLogs) cursor(seq int64) clustersync.Cursor {
	return clustersync.Cursor(c.epoch + ":" + strconv.FormatInt(seq, 10))
}

// parse returns the counter of cursor, or false for a cursor this store
// did not issue.
func (c *changeLogs) parse(cursor clustersync.Cursor) (int64, bool) {
	epoch, n, ok := strings.Cut(string(cursor), ":")
	if !ok || epoch != c.epoch {
		return 0, false
	}
	seq, err := strconv.ParseInt(n, 10, 64)
	return seq, err == nil && seq >= 0 && seq <= c.seq
}

// Changes implements clustersync.ChangeReader: the windows of namespace
// written since the cursor, in the order of their last writes, at most
// limit (all when limit ≤ 0) per call.
func (s *Store) Changes(ctx context.Context, inc, namespace string, since clustersync.Cursor, limit int, dst []clustersync.Change) ([]clustersync.Change, clustersync.Cursor, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "changes"); err != nil {
		return dst, since, false, err
	}
	c := &s.changes
	if since == "" {
		return dst, c.cursor(c.seq), false, nil
	}
	from, ok := c.parse(since)
	l := c.logs[namespace]
	if !ok || (l != nil && from < l.trimmed) {
		return dst, since, false, fmt.Errorf("memory: changes of %q since %q: %w", namespace, since, clustersync.ErrChangesLost)
	}
	if l == nil {
		return dst, c.cursor(c.seq), false, nil
	}
	type change struct {
		k   clustersync.WindowKey
		seq int64
	}
	var ws []change
	for w, seq := range l.at {
		if seq > from && w.inc != inc { // the reader's own writes change no others' sum
			ws = append(ws, change{w.k, seq})
		}
	}
	slices.SortFunc(ws, func(a, b change) int { return cmp.Compare(a.seq, b.seq) })
	next, more := c.seq, false
	if limit > 0 && len(ws) > limit {
		ws, next, more = ws[:limit], ws[limit-1].seq, true
	}
	now := s.now()
	for _, w := range ws {
		dst = append(dst, clustersync.Change{WindowKey: w.k, Others: s.sum(w.k, inc, false, now)})
	}
	return dst, c.cursor(next), more, nil
}

// TrimChanges forgets the change log of namespace, as a store that trims
// its log by age would after a reader's long absence: every cursor issued
// before reads as lost. For tests.
func (s *Store) TrimChanges(ctx context.Context, namespace string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "trim changes"); err != nil {
		return err
	}
	if l := s.changes.logs[namespace]; l != nil {
		clear(l.at)
		l.trimmed = s.changes.seq
	} else {
		s.changes.logs[namespace] = &changeLog{at: make(map[written]int64), trimmed: s.changes.seq}
	}
	return nil
}
