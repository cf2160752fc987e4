package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	clustersync "github.com/limiterd/limiterd/sync"
)

// DB is the part of a pgx connection the Store uses: *pgxpool.Pool,
// *pgx.Conn and pgx.Tx all satisfy it. A *pgx.Conn or a pgx.Tx is not safe
// for concurrent use, so a Store on one must be called by one goroutine at
// a time (tests do this to run inside a transaction they roll back).
//
// AllowGroup relies on READ COMMITTED (each statement of its transaction
// takes a new snapshot); Open sets default_transaction_isolation on its
// connections, and a DB passed to New must run at that level too.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Store is a clustersync.Store on PostgreSQL. It also implements
// clustersync.PushFetcher, clustersync.GroupAllower,
// clustersync.BucketStore and clustersync.LeaseStore. It is safe for
// concurrent use when its DB is (a pool is).
type Store struct {
	db     DB
	pool   *pgxpool.Pool // the pool Open made; nil after New
	cfg    Config
	q      queries
	lockNS string // table identity mixed into AllowGroup's advisory lock keys
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
	// AllowGroup needs READ COMMITTED: its decision statement must see what the
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
		q:         buildQueries(cfg.tableName(), cfg.bucketNames(), cfg.leaseNames()),
		lockNS:    cfg.Schema + "." + cfg.Table,
		par:       par,
		log:       log,
		schemaSem: make(chan struct{}, 1),
	}
}

// Abilities are what a PostgreSQL store can do: every ability, each
// decision in one transaction.
const Abilities = clustersync.PushFetch | clustersync.Decide | clustersync.Buckets | clustersync.Leases | clustersync.Changes | clustersync.Window

// Abilities returns the package's Abilities.
func (s *Store) Abilities() clustersync.Abilities { return Abilities }

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
