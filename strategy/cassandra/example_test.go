package cassandra_test

import (
	"fmt"

	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
)

// The schema `limiterd schema cassandra` prints, for a cluster with two
// data centers.
func ExampleSchemaCQL() {
	cfg := cassandrastore.DefaultConfig()
	cfg.Replication = cassandrastore.Replication{"class": "NetworkTopologyStrategy", "eu": "3", "us": "3"}
	fmt.Print(cassandrastore.SchemaCQL(cfg))
	// Output:
	// CREATE KEYSPACE IF NOT EXISTS limiterd
	//   WITH replication = {'class': 'NetworkTopologyStrategy', 'eu': '3', 'us': '3'};
	//
	// CREATE TABLE IF NOT EXISTS limiterd.windows (
	//   namespace   text,
	//   size_ns     bigint,
	//   start_ns    bigint,
	//   key         blob,
	//   incarnation text,
	//   total       bigint,
	//   PRIMARY KEY ((namespace, size_ns, start_ns, key), incarnation)
	// ) WITH compaction = {'class': 'TimeWindowCompactionStrategy', 'compaction_window_unit': 'HOURS', 'compaction_window_size': '1'}
	//   AND compression = {'class': 'LZ4Compressor', 'chunk_length_in_kb': '4'}
	//   AND gc_grace_seconds = 10800
	//   AND comment = 'limiterd sliding-window totals per node incarnation; rows expire by TTL';
	//
	// CREATE TABLE IF NOT EXISTS limiterd.windows_buckets (
	//   namespace text,
	//   key       blob,
	//   bucket    blob,
	//   level     bigint,
	//   mark      bigint,
	//   waste     bigint,
	//   seq       bigint,
	//   expire_ns bigint,
	//   incs      frozen<map<text, frozen<tuple<bigint, bigint, bigint>>>>,
	//   PRIMARY KEY ((namespace, key), bucket)
	// ) WITH compaction = {'class': 'LeveledCompactionStrategy'}
	//   AND compression = {'class': 'LZ4Compressor', 'chunk_length_in_kb': '4'}
	//   AND gc_grace_seconds = 10800
	//   AND comment = 'limiterd token, leaky and fixed buckets, decided under lightweight transactions; rows expire by TTL';
	//
	// ALTER TABLE limiterd.windows_buckets ADD IF NOT EXISTS waste bigint;
	//
	// CREATE TABLE IF NOT EXISTS limiterd.windows_leases (
	//   namespace text,
	//   key       blob,
	//   id        blob,
	//   expiry    bigint,
	//   released  boolean,
	//   seq       bigint static,
	//   PRIMARY KEY ((namespace, key), id)
	// ) WITH compaction = {'class': 'LeveledCompactionStrategy'}
	//   AND compression = {'class': 'LZ4Compressor', 'chunk_length_in_kb': '4'}
	//   AND gc_grace_seconds = 10800
	//   AND comment = 'limiterd concurrency leases, changed under lightweight transactions; rows expire by TTL';
}

// A store for a production cluster: three replicas per data center,
// requests to the local one.
func ExampleOpen() {
	cfg := cassandrastore.DefaultConfig()
	cfg.Hosts = []string{"cassandra-1.eu.internal", "cassandra-2.eu.internal"}
	cfg.LocalDC = "eu"
	cfg.Replication = cassandrastore.Replication{"class": "NetworkTopologyStrategy", "eu": "3", "us": "3"}
	cfg.Username, cfg.Password = "limiterd", "secret"
	cfg.TLS.Enabled = true
	s, err := cassandrastore.Open(cfg) // does not connect yet
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	fmt.Println(s)
	// Output: cassandra "limiterd.windows" on [cassandra-1.eu.internal cassandra-2.eu.internal]
}
