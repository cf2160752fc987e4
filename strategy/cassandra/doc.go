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
// The store is not a clustersync.AtomicAllower: a synchronous namespace on
// Cassandra pushes and reads in one PushFetch and decides locally, so
// nodes may race near a limit.
//
// Errors wrap clustersync.ErrUnavailable when Cassandra could not answer
// (no host, a timeout, overload, a done context); errors that retrying
// cannot cure (a missing table with create_schema off, bad credentials,
// an invalid request) do not. After Close every call, and a second Close,
// returns an error wrapping clustersync.ErrClosed.
package cassandra
