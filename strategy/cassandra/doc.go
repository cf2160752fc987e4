// Package cassandra is limiterd's Apache Cassandra store: a
// clustersync.Store that is also a clustersync.PushFetcher, through
// github.com/apache/cassandra-gocql-driver/v2. Import it as
// cassandrastore. It is tested against Cassandra 5.0 over native
// protocol v4.
//
// Open builds a Store from a Config without contacting Cassandra, so a
// node starts during a store outage: the first call that needs the
// session creates it (and, with Config.CreateSchema, the keyspace and the
// table), and later calls create it again after a failure.
//
//	cfg := cassandrastore.DefaultConfig()
//	cfg.Hosts = []string{"cassandra-1", "cassandra-2"}
//	s, err := cassandrastore.Open(cfg)
//	if err != nil {
//		return err // an invalid Config only
//	}
//	defer s.Close()
//
// Each window of each key is a partition holding one row per node
// incarnation: that incarnation's absolute total, written with its version
// as write timestamp and a TTL, so Cassandra keeps the newest total and
// expires it by itself. SchemaCQL returns the schema for operators who
// create it themselves (`limiterd schema cassandra`, create_schema: false).
//
// The store is not a clustersync.GroupAllower: a synchronous namespace on
// Cassandra pushes and reads in one PushFetch and decides locally (the
// Allows of one key that queue meanwhile share the next PushFetch), so
// nodes may race near a limit.
//
// It is a clustersync.BucketStore. Token, leaky and fixed buckets live in
// a second table, <table>_buckets: one partition per namespace and key,
// one row per bucket of that key (clustering column: kind and parameters
// as ratelimit.BucketSpec.StoreKey names them), holding the shared state
// (level, mark), a write count seq, the latest ExpireAt and a frozen map
// of each incarnation's record (life, applied, version). Buckets decides
// in Go with clustersync.ApplyBuckets, exactly as the reference does: it
// reads the call's rows (one partition, one SELECT), applies the call,
// and writes every changed row in one conditional batch (a lightweight
// transaction: IF seq = <as read> on each row, IF NOT EXISTS for a new
// one). A batch that finds a seq changed applies nothing; the call reads
// again, at SERIAL (the first read is at the read consistency: a stale
// one only fails the conditions), and starts over after a short random
// pause, until its context ends. So a call is atomic over its buckets and linearizable
// with every other call, at the price of a Paxos round: two requests per
// call without contention (about twice PushFetch), more under
// contention, where Cassandra's own Paxos backoff dominates. Every write
// rewrites the whole row with the TTL of its latest ExpireAt, so a row
// and all its records expire together.
//
// It is a clustersync.LeaseStore. Leases live in a third table,
// <table>_leases: one partition per namespace and key, one row per lease
// id (expiry, and released: a live lease or a remembered release) and a
// static seq, the partition's version. Leases decides in Go with
// clustersync.ApplyLease, the reference, as Buckets does: per run of
// consecutive ops of one key it reads the partition, applies the run, and
// writes the changed rows (INSERT, or DELETE for a row past its time) in
// one conditional batch IF seq = <as read> (IF seq = null for a new
// partition), which sets seq to max(seq + 1, now); a lost condition reads
// again at SERIAL and starts over, until the context ends. So each run is
// atomic, and runs are applied in order, one after the other. A row's TTL
// is its own time (expiry, or until when a release is remembered) less
// the caller's now, rounded up; seq's is the partition's latest, so a key
// vanishes after its last lease or release.
//
// Errors wrap clustersync.ErrUnavailable when Cassandra could not answer
// (no host, a timeout, overload, a done context); errors that retrying
// cannot cure (a missing table with create_schema off, bad credentials,
// an invalid request) do not. After Close every call, and a second Close,
// returns an error wrapping clustersync.ErrClosed.
package cassandra
