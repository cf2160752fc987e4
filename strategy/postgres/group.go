package postgres

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	clustersync "github.com/limiterd/limiterd/sync"
)

// AllowGroup decides req's entries in order, as clustersync.GroupAllower
// specifies (a single Allow is a group of one), in one round trip: a
// transaction of two statements sent as one pipeline. The first takes a
// transaction-scoped advisory lock on the request's (namespace, key), so
// the decisions on one key are serialised across nodes (row locks could
// not do it: the other incarnations' rows may not exist yet); the second
// (groupAllowSQL), whose snapshot therefore sees every decision committed
// before it, reads the other incarnations' totals, decides in float8 and
// writes the version-checked rows. Committing releases the lock. Under
// READ COMMITTED this never fails with a serialization error, and rows
// are written in primary-key order, as by Push, so it cannot deadlock
// with a concurrent Push.
//
// All rows of req must be windows of one (namespace, key), with distinct
// sizes.
func (s *Store) AllowGroup(ctx context.Context, req *clustersync.GroupAllowRequest, allowed []bool, others [][2]int64) error {
	const op = "allow group"
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	nw, ne := len(req.Windows), len(req.Entries)
	if len(allowed) != ne || len(others) != nw {
		return fmt.Errorf("postgres: %s: len(allowed) = %d, len(others) = %d, want %d, %d", op, len(allowed), len(others), ne, nw)
	}
	if nw == 0 {
		for i := range allowed {
			allowed[i] = true
		}
		return nil
	}
	if err := checkGroup(req); err != nil {
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
	if err := s.ensureSchema(ctx); err != nil {
		return s.fail(op, err)
	}
	ns, key := req.Windows[0].Cur.Namespace, req.Windows[0].Cur.Key
	var (
		size, pos                         = make([]int64, nw), make([]int64, nw)
		curStart, curTotal, curVersion    = make([]int64, nw), make([]int64, nw), make([]int64, nw)
		prevStart, prevTotal, prevVersion = make([]int64, nw), make([]int64, nw), make([]int64, nw)
		curExp, prevExp                   = make([]pgtype.Timestamptz, nw), make([]pgtype.Timestamptz, nw)
		cost, countRejected, limits       = make([]int64, ne), make([]bool, ne), make([]pgtype.Int8, ne*nw)
	)
	for i := range req.Windows {
		w := &req.Windows[i]
		size[i], pos[i] = int64(w.Size), req.At-w.Cur.Start
		curStart[i], curTotal[i], curVersion[i], curExp[i] = w.Cur.Start, w.Cur.Total, w.Cur.Version, expireAt(w.Cur.ExpireAt)
		prevStart[i], prevTotal[i], prevVersion[i], prevExp[i] = w.Prev.Start, w.Prev.Total, w.Prev.Version, expireAt(w.Prev.ExpireAt)
	}
	for i := range req.Entries {
		e := &req.Entries[i]
		cost[i], countRejected[i] = e.Cost, e.CountRejected
		for _, l := range e.Limits {
			limits[i*nw+l.Window] = pgtype.Int8{Int64: l.Limit, Valid: true}
		}
	}
	b := &pgx.Batch{}
	b.Queue(s.q.lock, lockKey(s.lockNS, ns, key))
	b.Queue(s.q.allow, req.Inc, ns, []byte(key),
		size, pos, curStart, curTotal, curVersion, curExp, prevStart, prevTotal, prevVersion, prevExp,
		cost, countRejected, limits)
	br := s.db.SendBatch(ctx, b)
	err := readGroup(br, allowed, others)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return s.fail(op, err)
	}
	return nil
}

func readGroup(br pgx.BatchResults, allowed []bool, others [][2]int64) error {
	if _, err := br.Exec(); err != nil {
		return err
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		kind, ord, a, b int64
		seen            int
	)
	for rows.Next() {
		if err := rows.Scan(&kind, &ord, &a, &b); err != nil {
			return err
		}
		switch {
		case kind == 0 && ord >= 1 && ord <= int64(len(others)):
			others[ord-1] = [2]int64{a, b}
		case kind == 1 && ord >= 1 && ord <= int64(len(allowed)):
			allowed[ord-1] = a == 1
		default:
			return fmt.Errorf("unexpected result (%d, %d)", kind, ord)
		}
		seen++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if seen != len(others)+len(allowed) {
		return fmt.Errorf("%d results for %d windows and %d entries", seen, len(others), len(allowed))
	}
	return nil
}

// checkGroup rejects a request the statement cannot decide: rows of
// several keys, a size that is not positive or given twice, or a limit
// outside its windows.
func checkGroup(req *clustersync.GroupAllowRequest) error {
	first := &req.Windows[0].Cur.WindowKey
	seen := make(map[int64]bool, len(req.Windows))
	for i := range req.Windows {
		w := &req.Windows[i]
		if w.Size <= 0 {
			return fmt.Errorf("windows[%d]: size must be positive, got %s", i, w.Size)
		}
		if seen[int64(w.Size)] {
			return fmt.Errorf("windows[%d]: size %s given twice", i, w.Size)
		}
		seen[int64(w.Size)] = true
		for _, r := range [2]*clustersync.Row{&w.Cur, &w.Prev} {
			if r.Namespace != first.Namespace || r.Key != first.Key || r.Size != w.Size {
				return fmt.Errorf("windows[%d]: all rows must be windows of one (namespace, key) of the window's size", i)
			}
		}
	}
	for i, e := range req.Entries {
		for _, l := range e.Limits {
			if l.Window < 0 || l.Window >= len(req.Windows) {
				return fmt.Errorf("entries[%d]: limit of window %d out of range", i, l.Window)
			}
		}
	}
	return nil
}

// groupAllowSQL decides a GroupAllowRequest after the key's advisory lock
// is held (a separate, earlier statement of the same transaction, so this
// statement's snapshot sees every decision committed before it): the
// one statement shape of every Allow. w reads the others' totals of
// every window; the recursive s decides the entries one after the other,
// carrying the costs counted so far; then the rows are written in
// primary-key order and the others' totals and verdicts returned (kind 0:
// window ord, others' current and previous totals; kind 1: entry ord, 1
// if admitted).
//
// $1 inc, $2 namespace, $3 key; per window: $4 size, $5 pos (At −
// Cur.Start), $6 cur start, $7 cur total, $8 cur version, $9 cur
// expire_at, $10 prev start, $11 prev total, $12 prev version, $13 prev
// expire_at; per entry: $14 cost, $15 count_rejected; $16 the limits,
// entry by entry, one per window (NULL: none).
//
// The rate is computed in float8 as clustersync.DecideGroup computes it
// in Go: float(cur) + float(prev) × float(size − pos) / float(size), each
// count being the exact (numeric) sum of own and others' totals; the Cur
// row's total is that exact sum too, whatever its size.
const groupAllowSQL = `WITH RECURSIVE w AS MATERIALIZED (
	SELECT q.*,
		coalesce((SELECT sum(t.total) FROM %[1]s t
			WHERE t.namespace = $2::text AND t.size_ns = q.size AND t.start_ns = q.cur_start
				AND t.key = $3::bytea AND t.incarnation <> $1::text), 0) AS oc,
		coalesce((SELECT sum(t.total) FROM %[1]s t
			WHERE t.namespace = $2::text AND t.size_ns = q.size AND t.start_ns = q.prev_start
				AND t.key = $3::bytea AND t.incarnation <> $1::text), 0) AS op
	FROM unnest($4::int8[], $5::int8[], $6::int8[], $7::int8[], $8::int8[], $9::timestamptz[],
		$10::int8[], $11::int8[], $12::int8[], $13::timestamptz[])
		WITH ORDINALITY AS q(size, pos, cur_start, cur_total, cur_version, cur_exp,
			prev_start, prev_total, prev_version, prev_exp, ord)
), s(e, counted, allowed) AS (
	SELECT 0::int8, 0::numeric, NULL::bool
	UNION ALL
	SELECT s.e + 1,
		s.counted + CASE WHEN d.ok OR ($15::bool[])[s.e + 1] THEN ($14::int8[])[s.e + 1] ELSE 0 END,
		d.ok
	FROM s CROSS JOIN LATERAL (
		SELECT coalesce(bool_and(
			(w.cur_total + s.counted + w.oc)::float8
				+ (w.prev_total + w.op)::float8 * (w.size - w.pos)::float8 / w.size::float8
				+ ($14::int8[])[s.e + 1]::float8 <= x.lim::float8), true) AS ok
		FROM w CROSS JOIN LATERAL (SELECT ($16::int8[])[s.e * cardinality($4::int8[]) + w.ord] AS lim) x
		WHERE x.lim IS NOT NULL
	) d
	WHERE s.e < cardinality($14::int8[])
), f AS MATERIALIZED (
	SELECT counted FROM s ORDER BY e DESC LIMIT 1
), ins AS (
	INSERT INTO %[1]s AS t (namespace, size_ns, start_ns, key, incarnation, total, version, expire_at, changed)
	SELECT $2::text, w.size, v.start_ns, $3::bytea, $1::text, v.total, v.version, v.expire_at, ` + currentXact + `
	FROM w CROSS JOIN f CROSS JOIN LATERAL (VALUES
		(w.prev_start, w.prev_total::numeric, w.prev_version, w.prev_exp),
		(w.cur_start, w.cur_total + f.counted, w.cur_version, w.cur_exp)
	) AS v(start_ns, total, version, expire_at)
	ORDER BY w.size, v.start_ns
	ON CONFLICT (namespace, size_ns, start_ns, key, incarnation) DO UPDATE
	SET total = excluded.total, version = excluded.version,
		expire_at = greatest(t.expire_at, excluded.expire_at), changed = excluded.changed
	WHERE t.version < excluded.version
)
SELECT 0::int8, w.ord, %[2]s, %[3]s FROM w
UNION ALL
SELECT 1::int8, s.e, CASE WHEN s.allowed THEN 1::int8 ELSE 0::int8 END, 0::int8 FROM s WHERE s.e > 0`

// lockKey is the advisory lock of one (namespace, key) of the table named
// table: FNV-1a 64 of the parts, each preceded by its length (8 bytes,
// little-endian) to keep them apart. Every node must compute the same key,
// so this function must never change; a collision only makes two keys wait
// for each other.
func lockKey(table, ns, key string) int64 {
	buf := make([]byte, 0, 3*8+len(table)+len(ns)+len(key))
	for _, part := range [3]string{table, ns, key} {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(len(part)))
		buf = append(buf, part...)
	}
	h := fnv.New64a()
	h.Write(buf) // never fails
	return int64(h.Sum64())
}
