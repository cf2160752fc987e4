package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	clustersync "github.com/limiterd/limiterd/sync"
)

// DB is the part of a pgx connection the Store uses: *pgxpool.Pool,
// *pgx.Conn and pgx.Tx all satisfy it. A *pgx.Conn or a pgx.Tx is not safe
// for concurrent use, so a Store on one must be called by one goroutine at
// a time (tests do this to run inside a transaction they roll back).
//
// Allow relies on READ COMMITTED (each statement of its transaction takes a
// new snapshot); Open sets default_transaction_isolation on its
// connections, and a DB passed to New must run at that level too.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

const (
	// rowsPerStatement bounds the rows (or windows) of one statement.
	rowsPerStatement = 5000
	// minRowsPerStatement is the smallest part a call is split into to run
	// in parallel: below it a statement's fixed cost (a round trip, a
	// connection) outweighs the backend CPU it would spread.
	minRowsPerStatement = 500
	// maxParallel bounds the statements one call runs at once, each on its
	// own connection (so each in its own backend process, on its own core).
	maxParallel = 4
	// purgeBatch is the most rows one DELETE of Purge removes, so a purge
	// never holds many row locks or a long transaction.
	purgeBatch = 1000
)

// Store is a clustersync.Store on PostgreSQL. It also implements
// clustersync.PushFetcher and clustersync.AtomicAllower. It is safe for
// concurrent use when its DB is (a pool is).
type Store struct {
	db     DB
	pool   *pgxpool.Pool // the pool Open made; nil after New
	cfg    Config
	q      queries
	lockNS string // table identity mixed into Allow's advisory lock keys
	par    int    // statements one call may run at once (1 unless db is a pool)
	log    *slog.Logger

	closed    atomic.Bool
	ready     atomic.Bool   // the table is known to exist
	schemaSem chan struct{} // one schema creation at a time

	stop context.CancelFunc // stops the background purge
	wg   sync.WaitGroup
}

// Open validates cfg and returns a Store on a new connection pool. It does
// not contact the server: a node must start while its store is down, so
// the pool connects on first use, the table is created (when
// cfg.CreateSchema) by the first call that reaches the server, and
// connection errors surface on the Store's calls wrapping
// clustersync.ErrUnavailable. A background goroutine purges expired rows
// every cfg.PurgeInterval until Close, which also closes the pool.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("postgres: dsn: %w", err)
	}
	if cfg.PoolSize > 0 {
		pc.MaxConns = int32(cfg.PoolSize)
	}
	rp := pc.ConnConfig.RuntimeParams
	// Allow needs READ COMMITTED: its decision statement must see what the
	// holder of the key's lock committed before it.
	rp["default_transaction_isolation"] = "read committed"
	if cfg.StatementTimeout > 0 {
		rp["statement_timeout"] = strconv.FormatInt(time.Duration(cfg.StatementTimeout).Milliseconds(), 10)
	}
	// Every statement is prepared once per connection with array
	// parameters, whose generic plan (index lookups per array element) is
	// the right one whatever the arrays hold: planning it again at each
	// call (a custom plan) would cost more than a small call runs. JIT
	// compiling, likewise, costs more than these short statements run.
	for k, v := range map[string]string{
		"plan_cache_mode":  "force_generic_plan",
		"jit":              "off",
		"application_name": "limiterd",
	} {
		if _, ok := rp[k]; !ok {
			rp[k] = v
		}
	}
	pool, err := pgxpool.NewWithConfig(context.WithoutCancel(ctx), pc)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	s := New(pool, cfg)
	s.pool = pool
	if every := time.Duration(cfg.PurgeInterval); every > 0 {
		bg, stop := context.WithCancel(context.Background())
		s.stop = stop
		s.wg.Add(1)
		go s.background(bg, every)
	}
	return s, nil
}

// New returns a Store on db, which the caller owns: Close does not close
// it. It starts no goroutine (no background purge: call Purge) and, like
// Open, contacts the server only when called. cfg.DSN, PoolSize and
// StatementTimeout are not used; empty Schema and Table mean their
// defaults. New panics if Schema or Table is not a plain identifier.
func New(db DB, cfg Config) *Store {
	cfg = cfg.withDefaults()
	if err := checkIdent("schema", cfg.Schema, 63); err != nil {
		panic(err)
	}
	if err := checkIdent("table", cfg.Table, maxTableLen); err != nil {
		panic(err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Only a pool may run statements concurrently; half its connections,
	// so one tick leaves the others to synchronous calls.
	par := 1
	if p, ok := db.(*pgxpool.Pool); ok {
		par = max(1, min(maxParallel, int(p.Config().MaxConns)/2))
	}
	return &Store{
		db:        db,
		cfg:       cfg,
		q:         buildQueries(cfg.tableName()),
		lockNS:    cfg.Schema + "." + cfg.Table,
		par:       par,
		log:       log,
		schemaSem: make(chan struct{}, 1),
	}
}

// parts splits n rows into the ranges of the statements a call runs: at
// most rowsPerStatement each, and, on a pool, up to par of them at once
// when there are enough rows to keep several backends busy.
func (s *Store) parts(n int) []int {
	k := (n + rowsPerStatement - 1) / rowsPerStatement
	k = max(k, min(s.par, n/minRowsPerStatement))
	bounds := make([]int, k+1)
	for i := range bounds {
		bounds[i] = n * i / k
	}
	return bounds
}

// each runs f(lo, hi) for every part of n rows, up to par at once, and
// returns the first error (the rest are cancelled). Parts are disjoint
// ranges of rows sorted by primary key, so statements running at once
// never wait for each other's row locks, and each still locks its rows in
// primary-key order.
func (s *Store) each(ctx context.Context, op string, n int, f func(ctx context.Context, lo, hi int) error) error {
	if n < 2*minRowsPerStatement {
		return f(ctx, 0, n) // one part: the synchronous calls' path
	}
	bounds := s.parts(n)
	if len(bounds) == 2 || s.par == 1 {
		for i := 0; i+1 < len(bounds); i++ {
			if err := f(ctx, bounds[i], bounds[i+1]); err != nil {
				return err
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		sem   = make(chan struct{}, s.par)
	)
	for i := 0; i+1 < len(bounds); i++ {
		sem <- struct{}{}
		if err := ctx.Err(); err != nil {
			once.Do(func() { first = s.fail(op, err) })
			break
		}
		wg.Add(1)
		go func(lo, hi int) {
			defer func() { <-sem; wg.Done() }()
			if err := f(ctx, lo, hi); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}(bounds[i], bounds[i+1])
	}
	wg.Wait()
	return first
}

// Close marks the store closed, so every later call returns
// clustersync.ErrClosed, stops the background purge and closes the pool if
// Open made it (waiting for calls in flight to release their connections).
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return fmt.Errorf("postgres: close: %w", clustersync.ErrClosed)
	}
	if s.stop != nil {
		s.stop()
		s.wg.Wait()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	return nil
}

// Push stores rows for incarnation inc, each only if its version is newer
// than the stored one: rows sorted by primary key (a key given twice keeps
// its highest version), one statement per part (see parts).
func (s *Store) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	const op = "push"
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if len(rows) == 0 {
		return nil
	}
	if err := s.ensureSchema(ctx); err != nil {
		return s.fail(op, err)
	}
	b := newRowBatch(rows)
	return s.each(ctx, op, b.len(), func(ctx context.Context, lo, hi int) error {
		if _, err := s.db.Exec(ctx, s.q.push, b.pushArgs(inc, lo, hi)...); err != nil {
			return s.fail(op, err)
		}
		return nil
	})
}

// Fetch writes into others[i] the sum of every incarnation's total but
// inc's for keys[i] (0 for an unknown window): one query per part (see
// parts).
func (s *Store) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	const op = "fetch"
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if len(others) != len(keys) {
		return fmt.Errorf("postgres: %s: %d results for %d keys", op, len(others), len(keys))
	}
	if len(keys) == 0 {
		return nil
	}
	if err := s.ensureSchema(ctx); err != nil {
		return s.fail(op, err)
	}
	return s.each(ctx, op, len(keys), func(ctx context.Context, lo, hi int) error {
		part := keys[lo:hi]
		n := len(part)
		ns, size, start, key := make([]string, n), make([]int64, n), make([]int64, n), make([][]byte, n)
		for i := range part {
			k := &part[i]
			ns[i], size[i], start[i], key[i] = k.Namespace, int64(k.Size), k.Start, []byte(k.Key)
		}
		return s.sums(ctx, op, others[lo:hi], identity, s.q.fetch, inc, ns, size, start, key)
	})
}

// PushFetch pushes rows like Push and writes into others[i] what Fetch
// would return for rows[i].WindowKey, in the same statement: one per part
// (see parts), so a call takes one round trip, or one per connection it
// runs on at once.
func (s *Store) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	const op = "pushfetch"
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if len(others) != len(rows) {
		return fmt.Errorf("postgres: %s: %d results for %d rows", op, len(others), len(rows))
	}
	if len(rows) == 0 {
		return nil
	}
	if err := s.ensureSchema(ctx); err != nil {
		return s.fail(op, err)
	}
	b := newRowBatch(rows)
	sums := make([]int64, b.len())
	var err error
	if b.len() < 2*minRowsPerStatement {
		// One statement: called directly, as each would, without the
		// closure's allocations (this is every synchronous call).
		err = s.sums(ctx, op, sums, identity, s.q.pfetch, b.pushArgs(inc, 0, b.len())...)
	} else {
		err = s.each(ctx, op, b.len(), func(ctx context.Context, lo, hi int) error {
			return s.sums(ctx, op, sums[lo:hi], identity, s.q.pfetch, b.pushArgs(inc, lo, hi)...)
		})
	}
	if err != nil {
		return err
	}
	for i, p := range b.pos {
		others[i] = sums[p]
	}
	return nil
}

func identity(i int) int { return i }

// sums runs a query returning (ord, sum) rows, ord counting from 1, and
// stores each sum into dst[at(ord-1)] after zeroing dst.
func (s *Store) sums(ctx context.Context, op string, dst []int64, at func(int) int, sql string, args ...any) error {
	clear(dst)
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		return s.fail(op, err)
	}
	defer rows.Close()
	var ord, sum int64
	for rows.Next() {
		if err := rows.Scan(&ord, &sum); err != nil {
			return s.fail(op, err)
		}
		i := at(int(ord - 1))
		if i < 0 || i >= len(dst) {
			return fmt.Errorf("postgres: %s: row %d out of range", op, ord)
		}
		dst[i] = sum
	}
	if err := rows.Err(); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// Window returns the sum of every incarnation's total for key (0 for an
// unknown window).
func (s *Store) Window(ctx context.Context, key clustersync.WindowKey) (int64, error) {
	const op = "window"
	if s.closed.Load() {
		return 0, fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if err := s.ensureSchema(ctx); err != nil {
		return 0, s.fail(op, err)
	}
	var sum int64
	err := s.db.QueryRow(ctx, s.q.window, key.Namespace, int64(key.Size), key.Start, []byte(key.Key)).Scan(&sum)
	if err != nil {
		return 0, s.fail(op, err)
	}
	return sum, nil
}

// Allow decides req atomically across the cluster, as
// clustersync.AtomicAllower specifies, in one round trip: a transaction of
// two statements sent as one pipeline. The first takes a transaction-scoped
// advisory lock on the request's (namespace, key), so the decisions on one
// key are serialised across nodes; the second, whose snapshot therefore
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
// table: FNV-1a 64 of the length-prefixed parts. Every node must compute
// the same key, so this function must never change; a collision only makes
// two keys wait for each other.
func lockKey(table, ns, key string) int64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for _, part := range [3]string{table, ns, key} {
		n := uint64(len(part))
		for j := 0; j < 8; j++ {
			h = (h ^ (n & 0xff)) * prime
			n >>= 8
		}
		for j := 0; j < len(part); j++ {
			h = (h ^ uint64(part[j])) * prime
		}
	}
	return int64(h)
}

// Purge deletes the rows whose expire_at has passed, in statements of at
// most 1000 rows each (skipping rows other transactions hold locked), until
// a statement deletes fewer; it returns how many rows it deleted. A store
// made by Open runs it every PurgeInterval by itself.
func (s *Store) Purge(ctx context.Context) (int64, error) {
	const op = "purge"
	if s.closed.Load() {
		return 0, fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
	}
	if err := s.ensureSchema(ctx); err != nil {
		return 0, s.fail(op, err)
	}
	var total int64
	for {
		tag, err := s.db.Exec(ctx, s.q.purge, purgeBatch)
		if err != nil {
			return total, s.fail(op, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < purgeBatch {
			return total, nil
		}
		if s.closed.Load() {
			return total, fmt.Errorf("postgres: %s: %w", op, clustersync.ErrClosed)
		}
	}
}

// background creates the table as soon as the server answers, then purges
// every interval (the first time at a random point of the first interval,
// so nodes started together do not purge together) until ctx is done.
func (s *Store) background(ctx context.Context, every time.Duration) {
	defer s.wg.Done()
	if s.cfg.CreateSchema {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := s.ensureSchema(sctx); err != nil && ctx.Err() == nil {
			s.log.Debug("postgres: creating the table failed; the next call retries", "err", err)
		}
		cancel()
	}
	timer := time.NewTimer(rand.N(every) + time.Millisecond)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		start := time.Now()
		n, err := s.Purge(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, clustersync.ErrUnavailable):
			s.log.Debug("postgres: purge failed; will retry", "err", err, "deleted", n)
		case err != nil:
			s.log.Warn("postgres: purge failed; will retry", "err", err, "deleted", n)
		default:
			s.log.Debug("postgres: purged expired rows", "deleted", n, "took", time.Since(start))
		}
		timer.Reset(every)
	}
}

// ensureSchema makes sure the table exists, creating it when CreateSchema
// is set. Until that succeeds every call tries again (one at a time); once
// it has, it costs one atomic load.
func (s *Store) ensureSchema(ctx context.Context) error {
	if !s.cfg.CreateSchema || s.ready.Load() {
		return nil
	}
	select {
	case s.schemaSem <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the table to be created: %w", ctx.Err())
	}
	defer func() { <-s.schemaSem }()
	if s.ready.Load() {
		return nil
	}
	var schemaOK, tableOK bool
	if err := s.db.QueryRow(ctx, s.q.exists, pgx.Identifier{s.cfg.Schema}.Sanitize(), s.cfg.tableName()).Scan(&schemaOK, &tableOK); err != nil {
		return err
	}
	if !tableOK {
		// One implicit transaction (a simple-protocol query of several
		// statements): the advisory lock serialises nodes that start
		// together, and each later one finds the table made by the first.
		// CREATE SCHEMA is left out when the schema exists, so a user
		// without CREATE on the database can still create the table.
		ddl := fmt.Sprintf("SELECT pg_advisory_xact_lock(%d);\n%s", int64(schemaLockKey), schemaSQL(s.cfg, !schemaOK))
		if _, err := s.db.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("creating table %s: %w", s.cfg.tableName(), err)
		}
	}
	s.ready.Store(true)
	return nil
}

// fail wraps err from operation op: clustersync.ErrClosed once the store
// is closed; a server error that retrying cannot cure (a missing table,
// refused credentials, bad data) as is; anything else — no connection, a
// timeout, ctx done, a server starting, shutting down, out of connections
// or cancelling the statement — with clustersync.ErrUnavailable.
func (s *Store) fail(op string, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("postgres: %s: %w: %w", op, clustersync.ErrClosed, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Code == "42P01" || pe.Code == "3F000" {
			// The table or schema is gone (dropped, restored from an old
			// backup): create it again on the next call.
			s.ready.Store(false)
		}
		if !transient(pe.Code) {
			return fmt.Errorf("postgres: %s: %w", op, err)
		}
	}
	return fmt.Errorf("postgres: %s: %w: %w", op, clustersync.ErrUnavailable, err)
}

// transient reports whether a SQLSTATE is one a later retry may not see.
func transient(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "53"),    // insufficient resources: too many connections, disk full, out of memory
		strings.HasPrefix(code, "57P"),   // admin or crash shutdown, cannot connect now, database dropped
		strings.HasPrefix(code, "40"),    // serialization failure, deadlock detected (not expected, but retryable)
		code == "57014",                  // query canceled: statement_timeout or a cancel request
		code == "55P03",                  // lock not available (lock_timeout)
		code == "25006",                  // read-only transaction: a standby, mid-failover
		code == "58000", code == "58030", // system or I/O error
		code == "XX000": // internal error
		return true
	}
	return false
}
