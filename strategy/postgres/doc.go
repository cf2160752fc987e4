// Package postgres is limiterd's PostgreSQL store: a clustersync.Store
// (with the optional clustersync.PushFetcher and clustersync.AtomicAllower)
// on PostgreSQL ≥ 12 through pgx v5. Import it as pgstore.
//
// Open builds a pgxpool.Pool from a Config without contacting the server,
// so a node starts during a store outage; New wraps anything that has the
// few pgx methods the store uses (DB: a *pgxpool.Pool, *pgx.Conn or pgx.Tx).
//
// # Data layout
//
// One table (default public.limiterd_windows; SchemaSQL prints its DDL)
// holds one row per (namespace, window size, window start, key, node
// incarnation): that incarnation's absolute total in micro-hits, the row's
// version and when it may be deleted.
//
//	namespace text COLLATE "C", size_ns bigint, start_ns bigint, key bytea,
//	incarnation text COLLATE "C", total bigint, version bigint,
//	expire_at timestamptz, PRIMARY KEY (namespace, size_ns, start_ns, key, incarnation)
//
// Window size and start are stored in nanoseconds, exactly as
// clustersync.WindowKey holds them, so no rounding can merge two windows.
// Keys are bytea: any bytes, including U+0000 (which text cannot hold), stay
// distinct. A window's cluster count is the sum of its rows' totals.
// The table is created on first use (CreateSchema, the default): under a
// transaction-scoped advisory lock, so nodes starting together do not race
// on the catalog, and again on later calls until that succeeds.
//
// # Statements
//
// Every value is a bound parameter; the only text spliced into SQL is the
// schema and table names from Config, which must be plain identifiers and
// are quoted. A batch of rows travels as parallel arrays (binary-encoded)
// expanded by unnest(...) WITH ORDINALITY: one statement, one round trip
// and one prepared plan per batch of up to 5000 rows, whatever its size.
//
// A call of 1000 rows or more on a pool (a Store made by Open) is split
// into contiguous ranges of its sorted rows, at most min(4, pool size / 2)
// statements of at least 500 rows, which run at once, each on its own
// connection: a backend process spends about 12–14 µs of CPU per row
// written and read back, so one statement at a time keeps at most one
// server core busy, and a tick of 10 000 keys would take 150 ms or more
// however many cores the server has. The ranges are disjoint and each
// statement locks its rows in primary-key order, so the statements of a
// call never wait for each other and none can deadlock with another
// call's. Half the pool is left to the other calls (synchronous ones).
//
//   - Push is one INSERT ... ON CONFLICT DO UPDATE ... WHERE stored.version
//     < excluded.version per batch. Rows are sorted by primary key first
//     (and a window given twice keeps its highest version), so every
//     statement locks rows in one global order and concurrent pushes of
//     one incarnation (a tick racing synchronous calls) cannot deadlock;
//     different incarnations never touch the same rows.
//   - Fetch is one query per batch: for each requested window, a
//     primary-key index range summing every incarnation's total but the
//     caller's. Unknown windows read 0.
//   - PushFetch is one statement: a data-modifying CTE upserts the rows and
//     the main query sums the other incarnations' rows. Both see one
//     snapshot, and that is enough: the read excludes the caller's rows,
//     the only ones the write touches.
//   - Allow is one round trip: a pipeline of two statements in one implicit
//     transaction. The first takes pg_advisory_xact_lock on a 64-bit hash
//     of (table, namespace, key), which serialises decisions on that key
//     across nodes (row locks could not: the other incarnations' rows may
//     not exist yet). The second, under READ COMMITTED, takes its snapshot
//     after the lock is granted, so it sees every decision committed
//     before; it reads the others' totals, decides in float8 exactly as
//     node.SlidingRate does, and writes the version-checked rows in
//     primary-key order. No serialization failures (nothing runs above
//     READ COMMITTED, which Open sets for its connections) and no
//     deadlocks (a waiter for the advisory lock holds no other lock).
//
// # Expiry
//
// Purge deletes rows whose expire_at has passed in statements of at most
// 1000 rows (DELETE ... WHERE ctid = ANY(ARRAY(SELECT ctid ... LIMIT 1000
// FOR UPDATE SKIP LOCKED)), through an index on expire_at), so it never
// holds many locks or a long transaction and several nodes purging at once
// skip each other's rows. A store made by Open runs it every
// PurgeInterval (30 s) in the background until Close. This was chosen over
// time-partitioned tables: the live rows are few (about two windows per
// key, size and node), partitioning would need DDL privileges and a
// partition scheduler on every deployment, and windows of very different
// sizes (100 ms to days) share the table. A row's expire_at only moves
// later (greatest of old and new).
//
// # Connections
//
// Open sets, as startup parameters of its connections,
// default_transaction_isolation = read committed (which Allow needs),
// statement_timeout (Config.StatementTimeout), and, unless the DSN sets
// them, plan_cache_mode = force_generic_plan (the statements are prepared
// once per connection; their generic plan is the right one for any array,
// and re-planning a small call cost more than running it: 0.4 ms → 0.13
// ms for a two-row PushFetch), jit = off (JIT compiling costs more than
// these short statements run) and application_name = limiterd. Behind PgBouncer in transaction mode
// use default_query_exec_mode=exec in the DSN and list those parameters
// in PgBouncer's ignore_startup_parameters (the server's defaults, which
// must then be READ COMMITTED, apply).
//
// # Errors
//
// Connection failures, timeouts, a done ctx and transient server states
// (starting up, shutting down, too many connections, statement timeout,
// read-only standby, serialization failure) wrap
// clustersync.ErrUnavailable; other server errors (a missing table with
// CreateSchema off, refused credentials) are returned as they are, with
// the *pgconn.PgError reachable by errors.As. Every call after Close
// returns clustersync.ErrClosed.
package postgres
