// Package postgres is limiterd's PostgreSQL store: a clustersync.Store,
// also a clustersync.PushFetcher, a clustersync.GroupAllower, a
// clustersync.BucketStore, a clustersync.LeaseStore and a
// clustersync.ChangeReader, on PostgreSQL 13 or later (xid8 transaction
// ids) through pgx v5. Import it as pgstore.
//
// The change read (changes.go): every write stamps its rows with its
// transaction's id; a read takes the rows stamped at or after the xmin of
// the previous read's snapshot, so a transaction that commits after a
// later one is still read.
//
// Open builds a Store on a new connection pool without contacting the
// server, so a node starts during a store outage; New wraps a pool,
// connection or transaction the caller owns (see DB).
//
//	cfg := pgstore.DefaultConfig()
//	cfg.DSN = "postgres://limiterd:secret@db:5432/limiter?sslmode=verify-full"
//	s, err := pgstore.Open(ctx, cfg)
//	if err != nil {
//		return err // an invalid Config only
//	}
//	defer s.Close()
//
// One table T (default public.limiterd_windows) holds one row per
// (namespace, window size, window start, key, node incarnation): that
// incarnation's absolute total and its version. A window's cluster count
// is the sum of its rows. The tables and the function are created on
// first use unless Config.CreateSchema is off; SchemaSQL returns their
// DDL for teams that run migrations themselves (`limiterd schema
// postgres`).
//
// Buckets (token, leaky, fixed) live in two more tables named after it:
// T_bkt holds one row per (namespace, bucket: BucketSpec.StoreKey() as
// bytea) with the shared level, mark, write count and expire_at; T_bkt_inc
// one row per (bucket, incarnation) with its life, applied total and
// version, deleted with its bucket (ON DELETE CASCADE). A bucket row past
// expire_at counts as absent (a new bucket; its stale incarnation rows are
// deleted) and is purged like the windows. Buckets is one call of the
// PL/pgSQL function T_bkt_v5, in one transaction: it locks the buckets'
// rows in key order (inserting those missing), applies the catch-up and
// the take with node's integer arithmetic, all buckets or none, and
// writes back what changed; the row locks serialise calls on a bucket
// across nodes. The function's version is in its name, so a later
// release adds T_bkt_v6 beside it.
//
// Concurrency leases live in two more tables: T_lease holds one row per
// live lease (namespace, key as bytea, lease id as bytea) with its expiry,
// T_lease_rel one per remembered release with the time it is remembered
// until, both int8 Unix nanoseconds on the callers' clocks; a row at or
// before a call's now counts as absent. Leases is one call of the
// PL/pgSQL function T_lease_v2 per statement, in one transaction: it
// takes a transaction-scoped advisory lock per distinct key of the call
// (a hash of the lease table, namespace and key), in ascending order so
// calls sharing keys queue instead of deadlocking, then applies the ops
// as clustersync.ApplyLease, each key's in order. A call of at most 64
// keys and 5000 ops is one round trip; a larger one is split, in order,
// so that no transaction fills the server's shared lock table. The purge
// deletes lease and release rows a minute past their time on the
// server's clock.
//
// Push, Fetch and PushFetch take one statement per batch of rows (large
// calls on a pool run a few at once); AllowGroup decides a single Allow
// (a group of one) or a group in one round trip, one statement shape,
// under a per-key advisory lock. A store made by Open deletes expired
// rows every Config.PurgeInterval; with New, call Store.Purge.
//
// Connection failures, timeouts, a done context and transient server
// states wrap clustersync.ErrUnavailable; other server errors (a missing
// table with CreateSchema off, refused credentials) are returned as they
// are, the *pgconn.PgError reachable by errors.As. After Close every
// call, and a second Close, returns an error wrapping
// clustersync.ErrClosed.
package postgres
