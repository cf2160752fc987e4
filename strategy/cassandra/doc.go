// Package cassandra is limiterd's Apache Cassandra store: a
// clustersync.Store that is also a clustersync.PushFetcher. Import it as
// cassandrastore. It is tested against Cassandra 5.0 over native protocol
// v4; its CQL is that of Cassandra 3.11 too (not tested there).
//
// Open builds a Store from a Config without contacting Cassandra, so a
// node starts during a store outage; the session is created by the first
// call that needs it. SchemaCQL returns the schema for operators who
// create it themselves (`limiterd schema cassandra`, with create_schema:
// false).
//
// # Data layout
//
// One table (default limiterd.windows):
//
//	CREATE TABLE IF NOT EXISTS limiterd.windows (
//	  namespace   text,
//	  size_ns     bigint,   -- window size, ns (sub-second sizes are exact)
//	  start_ns    bigint,   -- window start, Unix ns
//	  key         blob,     -- the key's bytes
//	  incarnation text,     -- the node incarnation owning the row
//	  total       bigint,   -- its absolute total, micro-hits
//	  PRIMARY KEY ((namespace, size_ns, start_ns, key), incarnation)
//	) WITH compaction = {'class': 'TimeWindowCompactionStrategy', ...}
//
// Each window of each key is a partition of its own, holding one row per
// incarnation that counted in it: no partition grows with the namespace
// (or with time: a window's partition lives for about two window sizes),
// and the partitions of a busy namespace spread over the whole ring.
// The key is a blob so that every string is stored as it is: text would
// reject invalid UTF-8 (Cassandra's text does accept U+0000, checked by
// the tests); distinct (namespace, size, start, key) tuples are distinct
// partition keys whatever bytes they hold.
//
// # Versions are write timestamps
//
// Push writes each row as
//
//	INSERT ... VALUES (...) USING TTL <ttl> AND TIMESTAMP <Row.Version>
//
// Cassandra keeps, per cell, the value with the highest write timestamp,
// on every replica and through compaction, so the design's version check
// is Cassandra's own last-write-wins: an older version never overwrites a
// newer one, and a repeated or late push changes nothing, with no read
// before the write and no lightweight transaction. (Two writes with the
// same timestamp and different values would resolve to the larger value;
// limiterd never sends those, as an incarnation's versions only grow.)
// Totals are plain bigint columns, not counters: a counter increment that
// times out cannot be retried safely, and counters cannot expire.
//
// Rows expire by themselves: the TTL is the time left until Row.ExpireAt,
// rounded up to whole seconds, plus one second because Cassandra counts a
// TTL from the write's second (floor), never less than 1 s. The table
// uses TimeWindowCompactionStrategy (1-hour windows) so whole SSTables
// of expired windows are dropped, LZ4 compression in 4 KiB chunks (reads
// are point reads of a few rows), and gc_grace_seconds of 3 hours (the
// default hint window): no row is ever deleted, only overwritten or
// expired.
//
// # Requests
//
// Push sends the rows as unlogged batches of up to BatchRows rows (and
// about 4 KiB, under Cassandra's batch_size_warn_threshold); Fetch reads
// the windows with SELECT ... WHERE namespace, size_ns, start_ns = ? AND
// key IN (up to BatchRows keys), since the windows of a tick share a few
// (size, start) pairs, and sums the rows of the other incarnations. At
// most Concurrency requests of a call are in flight. Every statement is
// prepared and marked idempotent, so the driver may retry it on another
// node. With BatchRows = 1 each request covers one partition and goes to
// one of its replicas (token-aware); the default (32) costs a cluster's
// coordinators some forwarding but does about three times the keys per
// second on one node (see BENCHMARKS.md). Small fetches whose windows
// share keys rather than starts (a synchronous call: the current and
// previous window of each size) read by key with start_ns IN instead. PushFetch runs the write and the read at once (the
// read excludes this incarnation's rows, so it need not follow the write).
//
// Write and read consistency default to LOCAL_QUORUM: a push acknowledged
// by a quorum of the local data center's replicas is seen by the next
// fetch of any node of that data center. Replication defaults to
// SimpleStrategy with one replica, for a single test node; production
// wants NetworkTopologyStrategy with 3 replicas per data center, and
// local_dc set.
//
// The store is not a clustersync.AtomicAllower: deciding an Allow
// atomically would need a lightweight transaction (Paxos: several round
// trips among the replicas) on a partition holding all windows of a key. A synchronous
// namespace on Cassandra pushes its rows and reads the others' totals in
// one PushFetch and decides locally; nodes may race, as the design
// describes for stores without atomic Allow.
//
// # Sessions, outages and errors
//
// One attempt at a time creates the session (and, with CreateSchema, the
// keyspace and the table: CREATE ... IF NOT EXISTS), in the background
// and bounded by ConnectTimeout; callers wait for it only until their
// context is done, and the attempt's session serves the calls after it.
// After a failed attempt, calls fail at once with its error for a second,
// then one of them starts the next attempt. The driver re-dials nodes
// that went down every 5 s (its default is 60 s); a session that has
// found no host for 30 s is closed and replaced by a new one from the
// configured hosts.
//
// Errors wrap clustersync.ErrUnavailable when Cassandra could not answer:
// no host, timeouts, Unavailable, overloaded, a done context (which is
// wrapped too). Errors that retrying cannot cure (a missing table with
// create_schema off, bad credentials, an invalid request) do not. After
// Close every call returns an error wrapping clustersync.ErrClosed.
//
// # Driver
//
// The store uses github.com/apache/cassandra-gocql-driver/v2, the
// maintained successor of github.com/gocql/gocql (whose last release,
// v1.7.0, dates from 2024). What matters here:
//
//   - Token-aware routing for statements naming their keyspace: the
//     session has no keyspace, since it must be able to create it, and
//     v1.7.0 computes replicas only for the session's keyspace, so it
//     sends every request to the first replica of the token and never
//     spreads reads over the others; v2 computes replicas for every
//     keyspace (CASSGO-104) and shuffles them.
//   - Retries honour idempotency (CASSGO-27), and a context-first API
//     (ExecContext, IterContext) that the store uses for every call.
//   - Structured logging, passed on to Config.Logger (slog).
//   - Fixes to connection pooling with short timeouts (CASSGO-125) and to
//     protocol negotiation; the store still pins protocol v4 by default.
//
// The driver's write coalescing (waiting 200 µs for more frames) is off:
// it added about 1.2 ms to each request of a synchronous call here and
// saved nothing measurable in a tick.
package cassandra
