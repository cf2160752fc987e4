package sync

import (
	"context"
	"errors"
	"fmt"
	gosync "sync"
	"time"

	"github.com/limiterd/limiterd/node"
)

// changeTick is a Syncer's state for a store that is a ChangeReader. The
// first tick, and the tick after the log lost its cursor, reads the whole
// interest set, from a cursor taken after its push and before the read;
// later ticks read only the windows written since the cursor, and the
// windows of keys new to the node. Windows that no longer change are then
// never read again. A read that fails otherwise keeps the cursor: the next
// tick reads from it again.
type changeTick struct {
	cr     ChangeReader
	cursor Cursor // "" until a full read succeeds, and after a loss
	// full is set for a tick that reads the whole interest set.
	full bool

	changes []Change
	// ahead holds changes of held keys whose window starts after the
	// node's current one (a writer whose clock runs ahead): they are
	// applied once the window is current, as the log will not report them
	// again.
	ahead []Change
	// newKeys are the keys inserted since the last tick, whose rows
	// written before the cursor no change read reports; keys are this
	// tick's, and fresh their windows, read in full.
	newMu   gosync.Mutex
	newKeys []string
	keys    []string
	fresh   []node.Window
}

// newKey is the namespace's OnNewKey hook for a ChangeReader store: it
// must not block.
func (tk ticker) newKey(key string) {
	s := tk.s
	if tk.knowsAll(s.ns.Now()) {
		return // the change reads tell all its windows' writes
	}
	c := &s.ch
	c.newMu.Lock()
	c.newKeys = append(c.newKeys, key)
	c.newMu.Unlock()
	if s.fresh != nil {
		enqueueFresh(s.fresh, key)
	}
}

// takeNewKeys moves the keys inserted since the last call to c.keys.
func (c *changeTick) takeNewKeys() {
	c.newMu.Lock()
	c.keys, c.newKeys = c.newKeys, c.keys[:0]
	c.newMu.Unlock()
}

// requeue gives back keys whose windows a failed read did not fetch.
func (c *changeTick) requeue(keys []string) {
	c.newMu.Lock()
	c.newKeys = append(c.newKeys, keys...)
	c.newMu.Unlock()
}

// beginChanges starts a tick before its push: it takes the keys new
// since the last tick and, for a tick that reads only changes, their
// windows (now, before a push that reads back some of their windows and
// so marks them fetched).
func (tk ticker) beginChanges(now time.Time) {
	s := tk.s
	c := &s.ch
	c.takeNewKeys()
	c.fresh = c.fresh[:0]
	c.full = c.cursor == ""
	if c.full {
		return
	}
	for _, k := range c.keys {
		c.fresh = s.ns.UnfetchedWindows(now, k, c.fresh)
	}
}

// fetchChanges is the fetch of a tick on a ChangeReader, after its push.
// A full read takes its cursor after the push, so the next read does not
// report this tick's own rows again, and before reading the interest set,
// so it reports every row written during that read.
func (tk ticker) fetchChanges(ctx context.Context, now time.Time) error {
	s := tk.s
	c := &s.ch
	if !c.full {
		err := tk.readChanges(ctx, now)
		if err == nil {
			// Applied after the changes: this read is newer.
			return tk.fetchFreshWindows(ctx)
		}
		clear(c.fresh)
		c.fresh = c.fresh[:0]
		if !errors.Is(err, ErrChangesLost) {
			c.requeue(c.keys)
			return err
		}
		s.log.Info("store lost the change cursor; reading the interest set in full", "err", err)
		c.cursor = ""
		s.learn.since.Store(0)
	}
	_, start, _, err := c.cr.Changes(ctx, s.inc, s.name, "", 0, nil)
	taken := s.ns.Now()
	if err != nil {
		// Read in full all the same; the next tick does it again.
		s.log.Debug("change cursor not read", "err", err)
		start = ""
	}
	s.ns.TakeTick(now, &s.tick, node.ReadWindows)
	err = tk.fetch(ctx)
	s.ns.ApplyTick(&s.tick)
	if err != nil {
		c.requeue(c.keys)
		return err
	}
	c.cursor = start
	if start != "" && s.learn.on {
		s.learn.since.Store(taken.UnixNano())
	}
	// Keys inserted before the tick that counted nothing yet were not in
	// the interest set: read them like new keys.
	for _, k := range c.keys {
		c.fresh = s.ns.UnfetchedWindows(now, k, c.fresh)
	}
	return tk.fetchFreshWindows(ctx)
}

// readChanges reads the windows written since the cursor, a page at a
// time, and applies them. When a page fails, the pages read before it are
// applied all the same and the cursor moves past them, so a tick that
// runs out of time still makes progress; a lost cursor applies nothing,
// as a full read follows.
func (tk ticker) readChanges(ctx context.Context, now time.Time) error {
	s := tk.s
	c := &s.ch
	n0 := len(c.ahead)
	c.changes = append(c.changes[:0], c.ahead...)
	c.ahead = c.ahead[:0]
	cursor := c.cursor
	var rerr error
	for {
		read := len(c.changes)
		changes, next, more, err := c.cr.Changes(ctx, s.inc, s.name, cursor, s.cfg.BatchSize, c.changes)
		if err != nil {
			clear(c.changes[read:cap(c.changes)]) // what the failed page may have left
			c.changes = c.changes[:read]
			rerr = fmt.Errorf("sync: read changes of namespace %q: %w", s.name, err)
			break
		}
		c.changes, cursor = changes, next
		if !more {
			break
		}
	}
	if errors.Is(rerr, ErrChangesLost) {
		c.ahead = c.ahead[:n0] // still held, for the ticks after the full read
		clear(c.changes)
		return rerr
	}
	s.m.Fetched(s.name, len(c.changes)-n0)
	if len(c.changes) > 0 {
		tk.applyChanges(now)
	}
	c.cursor = cursor
	return rerr
}

// fetchFreshWindows reads c.fresh, the windows of new keys; on failure
// their keys wait for the next tick.
func (tk ticker) fetchFreshWindows(ctx context.Context) error {
	s := tk.s
	c := &s.ch
	if len(c.fresh) == 0 {
		return nil
	}
	t := &s.tick
	s.ns.TakeTick(s.ns.Now(), t, 0)
	t.Read = append(t.Read, c.fresh...)
	t.Others = append(t.Others[:0], make([]int64, len(t.Read))...)
	t.Got = append(t.Got[:0], make([]bool, len(t.Read))...)
	err := tk.fetch(ctx)
	s.ns.ApplyTick(t)
	clear(c.fresh) // drop references to entries
	c.fresh = c.fresh[:0]
	if err != nil {
		c.requeue(c.keys)
	}
	return err
}

// applyChanges stores the others' sums of c.changes in the windows of
// the keys they name, found by key (no walk over the keys); a later
// change of a window is newer than an earlier one. Changes of keys the
// node does not hold are dropped, unless it learns them (learn.go).
// Changes in a window after the current one wait for it, as the log will
// not report them again.
func (tk ticker) applyChanges(now time.Time) {
	s := tk.s
	c := &s.ch
	t := &s.tick
	for rest := c.changes; len(rest) > 0; {
		s.ns.TakeTick(now, t, 0)
		for i := range rest {
			ch := &rest[i]
			t.Changes = append(t.Changes, node.KeyTotal{Key: ch.Key, Size: ch.Size, Start: ch.Start, Others: ch.Others, Learn: tk.learns(ch)})
		}
		s.ns.ApplyTick(t)
		for i := range t.Changes {
			if t.Changes[i].Ahead {
				c.ahead = append(c.ahead, rest[i])
			}
		}
		// A learn that found no room starts the knowledge over (and stops
		// the apply): whether to learn the rest is decided again.
		n := len(t.Changes)
		if t.Changes[n-1].Full {
			s.learn.restart(now)
		}
		rest = rest[n:]
	}
	clear(t.Changes)
	clear(c.changes) // drop the keys
}
