package postgres

import (
	"context"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// The change read (clustersync.ChangeReader). Every statement that writes
// a row sets its changed column to the writing transaction's id (xid8, as
// an int8). Transactions commit in another order than their ids, so a
// cursor is not the highest id read but the xmin of the read's snapshot:
// every transaction that snapshot did not see (running, or not begun) has
// an id at or above it. The next read takes the rows changed at or after
// it: a transaction that commits late, with a low id, is read then. The
// reader's own rows change no others' sum and are skipped. What
// a transaction the previous read did see is read again when its id is at
// or above that xmin: a window may come twice, never not at all. A long
// transaction anywhere on the server holds xmin back and makes each read
// take everything since it began; the index on (namespace, changed) keeps
// that a range scan.
//
// A read returns windows in (changed, size, start, key) order, limit at a
// time; the cursor of a read cut by the limit holds where it stopped and
// the xmin of its first page, which ends the read.

// cursorSQL is the cursor of a read that has not begun: the xmin of its
// snapshot.
const cursorSQL = `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8`

// changesSQL reads one page. $1 namespace, $2 the lowest changed to read,
// $3 … $6 the (changed, size, start, key) to read after, $7 the limit
// (NULL: all), $8 the reader's incarnation. Every reply row holds the
// snapshot's xmin and xmax; with no change, the one row has only them.
const changesSQL = `WITH s AS MATERIALIZED (
	SELECT pg_snapshot_xmin(pg_current_snapshot())::text::int8 AS xmin,
		pg_snapshot_xmax(pg_current_snapshot())::text::int8 AS xmax
), c AS MATERIALIZED (
	SELECT size_ns, start_ns, key, max(changed) AS changed
	FROM %[1]s WHERE namespace = $1::text AND changed >= $2::int8 AND incarnation <> $8::text
	GROUP BY size_ns, start_ns, key
), p AS MATERIALIZED (
	SELECT * FROM c
	WHERE (changed, size_ns, start_ns, key) > ($3::int8, $4::int8, $5::int8, $6::bytea)
	ORDER BY changed, size_ns, start_ns, key
	LIMIT $7::int8
), w AS MATERIALIZED (
	SELECT p.*, coalesce((SELECT %[2]s FROM %[1]s o
		WHERE o.namespace = $1::text AND o.size_ns = p.size_ns AND o.start_ns = p.start_ns
			AND o.key = p.key AND o.incarnation <> $8::text), 0) AS others
	FROM p
)
SELECT s.xmin, s.xmax, w.changed, w.size_ns, w.start_ns, w.key, w.others
FROM s LEFT JOIN w ON true
ORDER BY w.changed, w.size_ns, w.start_ns, w.key`

// changeCursor is a parsed cursor: from is the lowest changed to read;
// a read cut by its limit also has next, the cursor it ends with, and the
// position after which it resumes.
type changeCursor struct {
	from    int64
	next    int64
	resume  bool
	changed int64
	size    int64
	start   int64
	key     []byte
}

const cursorVersion = "p1:"

func nsHash(namespace string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(namespace))
	return hex.EncodeToString(h.Sum(nil))
}

func (c *changeCursor) format(namespace string) clustersync.Cursor {
	s := cursorVersion + nsHash(namespace) + ":" + strconv.FormatInt(c.from, 10)
	if c.resume {
		s += ":" + strconv.FormatInt(c.next, 10) + ":" + strconv.FormatInt(c.changed, 10) + ":" +
			strconv.FormatInt(c.size, 10) + ":" + strconv.FormatInt(c.start, 10) + ":" + hex.EncodeToString(c.key)
	}
	return clustersync.Cursor(s)
}

func parseCursor(cur clustersync.Cursor, namespace string) (c changeCursor, ok bool) {
	rest, found := strings.CutPrefix(string(cur), cursorVersion)
	if !found {
		return c, false
	}
	parts := strings.Split(rest, ":")
	if parts[0] != nsHash(namespace) || (len(parts) != 2 && len(parts) != 7) {
		return c, false
	}
	var nums [5]int64
	for i, p := range parts[1:min(len(parts), 6)] {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 && i != 4 {
			return c, false
		}
		nums[i] = n
	}
	c.from = nums[0]
	if len(parts) == 7 {
		key, err := hex.DecodeString(parts[6])
		if err != nil {
			return c, false
		}
		c.resume, c.next, c.changed, c.size, c.start, c.key = true, nums[1], nums[2], nums[3], nums[4], key
	}
	return c, true
}

// Changes implements clustersync.ChangeReader: one query per call.
func (s *Store) Changes(ctx context.Context, inc, namespace string, since clustersync.Cursor, limit int, dst []clustersync.Change) ([]clustersync.Change, clustersync.Cursor, bool, error) {
	const op = "changes"
	if s.closed.Load() {
		return dst, since, false, fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if err := s.ensureSchema(ctx); err != nil {
		return dst, since, false, s.fail(op, err)
	}
	if since == "" {
		var xmin int64
		if err := s.db.QueryRow(ctx, s.q.cursor).Scan(&xmin); err != nil {
			return dst, since, false, s.fail(op, err)
		}
		return dst, (&changeCursor{from: xmin}).format(namespace), false, nil
	}
	c, ok := parseCursor(since, namespace)
	if !ok {
		return dst, since, false, fmt.Errorf("postgres: %s of %q: cursor %.40q: %w", op, namespace, since, clustersync.ErrChangesLost)
	}
	after := [4]any{int64(-1), int64(0), int64(0), []byte{}}
	if c.resume {
		after = [4]any{c.changed, c.size, c.start, c.key}
	}
	var lim any // NULL: no limit
	if limit > 0 {
		lim = int64(limit)
	}
	rows, err := s.db.Query(ctx, s.q.changes, namespace, c.from, after[0], after[1], after[2], after[3], lim, inc)
	if err != nil {
		return dst, since, false, s.fail(op, err)
	}
	defer rows.Close()
	var (
		xmin, xmax int64
		n          int
		last       changeCursor
	)
	for rows.Next() {
		var changed, size, start, others *int64
		var key []byte
		if err := rows.Scan(&xmin, &xmax, &changed, &size, &start, &key, &others); err != nil {
			return dst, since, false, s.fail(op, err)
		}
		if changed == nil {
			continue // no change: the snapshot's row alone
		}
		dst = append(dst, clustersync.Change{
			WindowKey: clustersync.WindowKey{Namespace: namespace, Size: time.Duration(*size), Start: *start, Key: string(key)},
			Others:    *others,
		})
		n++
		last.changed, last.size, last.start, last.key = *changed, *size, *start, key
	}
	if err := rows.Err(); err != nil {
		return dst, since, false, s.fail(op, err)
	}
	if c.from > xmax {
		// A cursor from the future: another server, or a restored one.
		return dst[:len(dst)-n], since, false, fmt.Errorf("postgres: %s of %q: cursor beyond the server's transactions: %w", op, namespace, clustersync.ErrChangesLost)
	}
	next := xmin
	if c.resume {
		next = c.next
	}
	if limit > 0 && n == limit {
		last.from, last.next, last.resume = c.from, next, true
		return dst, last.format(namespace), true, nil
	}
	return dst, (&changeCursor{from: next}).format(namespace), false, nil
}
