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

// Allow decides req atomically across the cluster, as
// clustersync.AtomicAllower specifies, in one round trip: a transaction of
// two statements sent as one pipeline. The first takes a transaction-scoped
// advisory lock on the request's (namespace, key), so the decisions on one
// key are serialised across nodes (row locks could not do it: the other
// incarnations' rows may not exist yet); the second, whose snapshot therefore
// sees every decision committed before it, reads the other incarnations'
// totals, decides in float8 and writes the version-checked rows. Committing
// releases the lock. Under READ COMMITTED this never fails with a
// serialization error, and rows are written in primary-key order, as by
// Push, so it cannot deadlock with a concurrent Push.
//
// All rows of req must be windows of one (namespace, key), with distinct
// (size, start).
func (s *Store) Allow(ctx context.Context, req clustersync.AllowRequest) (clustersync.AllowResult, error) {
	const op = "allow"
	if s.closed.Load() {
		return clustersync.AllowResult{}, fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	n := len(req.Limits)
	if n == 0 {
		return clustersync.AllowResult{Allowed: true}, nil
	}
	if err := checkAllow(&req); err != nil {
		return clustersync.AllowResult{}, fmt.Errorf("postgres: %s: %w", op, err)
	}
	if err := s.ensureSchema(ctx); err != nil {
		return clustersync.AllowResult{}, s.fail(op, err)
	}
	ns, key := req.Limits[0].Cur.Namespace, req.Limits[0].Cur.Key
	var (
		size, lim, pos                              = make([]int64, n), make([]int64, n), make([]int64, n)
		curSize, curStart, curTotal, curVersion     = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		prevSize, prevStart, prevTotal, prevVersion = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
		curExp, prevExp                             = make([]pgtype.Timestamptz, n), make([]pgtype.Timestamptz, n)
	)
	for i := range req.Limits {
		l := &req.Limits[i]
		size[i], lim[i], pos[i] = int64(l.Size), l.Limit, req.At-l.Cur.Start
		curSize[i], curStart[i], curTotal[i], curVersion[i], curExp[i] = int64(l.Cur.Size), l.Cur.Start, l.Cur.Total, l.Cur.Version, expireAt(l.Cur.ExpireAt)
		prevSize[i], prevStart[i], prevTotal[i], prevVersion[i], prevExp[i] = int64(l.Prev.Size), l.Prev.Start, l.Prev.Total, l.Prev.Version, expireAt(l.Prev.ExpireAt)
	}
	b := &pgx.Batch{}
	b.Queue(s.q.lock, lockKey(s.lockNS, ns, key))
	b.Queue(s.q.allow, req.Inc, ns, []byte(key), req.Cost, req.CountRejected,
		size, lim, pos, curSize, curStart, curTotal, curVersion, curExp,
		prevSize, prevStart, prevTotal, prevVersion, prevExp)
	br := s.db.SendBatch(ctx, b)
	res, err := readAllow(br, n)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return clustersync.AllowResult{}, s.fail(op, err)
	}
	return res, nil
}

func readAllow(br pgx.BatchResults, n int) (clustersync.AllowResult, error) {
	res := clustersync.AllowResult{Others: make([][2]int64, n)}
	if _, err := br.Exec(); err != nil {
		return res, err
	}
	rows, err := br.Query()
	if err != nil {
		return res, err
	}
	defer rows.Close()
	var (
		ord    int64
		oc, op int64
		seen   int
	)
	for rows.Next() {
		if err := rows.Scan(&res.Allowed, &ord, &oc, &op); err != nil {
			return res, err
		}
		if ord < 1 || ord > int64(n) {
			return res, fmt.Errorf("limit %d out of range", ord)
		}
		res.Others[ord-1] = [2]int64{oc, op}
		seen++
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	if seen != n {
		return res, fmt.Errorf("%d results for %d limits", seen, n)
	}
	return res, nil
}

// checkAllow rejects a request the single statement cannot decide: rows of
// several keys (the lock would not cover them), a size that is not
// positive, or two rows of one window (one statement cannot write a row
// twice).
func checkAllow(req *clustersync.AllowRequest) error {
	first := &req.Limits[0].Cur.WindowKey
	seen := make(map[[2]int64]bool, 2*len(req.Limits))
	for i := range req.Limits {
		l := &req.Limits[i]
		if l.Size <= 0 {
			return fmt.Errorf("limits[%d]: size must be positive, got %s", i, l.Size)
		}
		for _, r := range [2]*clustersync.Row{&l.Cur, &l.Prev} {
			if r.Namespace != first.Namespace || r.Key != first.Key {
				return fmt.Errorf("limits[%d]: all rows must be windows of one (namespace, key)", i)
			}
			w := [2]int64{int64(r.Size), r.Start}
			if seen[w] {
				return fmt.Errorf("limits[%d]: window (size %s, start %d) given twice", i, r.Size, r.Start)
			}
			seen[w] = true
		}
	}
	return nil
}

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
