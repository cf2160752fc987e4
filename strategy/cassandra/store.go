package cassandra

import (
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	clustersync "github.com/limiterd/limiterd/sync"
)

// Store is a clustersync.Store (and clustersync.PushFetcher) on Apache
// Cassandra. It is safe for concurrent use. Open creates it without
// contacting Cassandra; the session is created by the first call that
// needs it and re-created by later calls after a failure.
//
// It is not a clustersync.GroupAllower: deciding an Allow atomically
// would take a lightweight transaction (Paxos, several round trips among
// the replicas) on a partition holding every window of a key. It is a
// clustersync.BucketStore and a clustersync.LeaseStore, whose calls do
// take one (see Buckets and Leases).
type Store struct {
	cfg     Config
	cluster gocql.ClusterConfig
	wcons   gocql.Consistency
	rcons   gocql.Consistency
	log     *slog.Logger

	insertCQL       string // one row, TTL and TIMESTAMP bound
	selectCQL       string // one partition: incarnation, total
	selectKeysCQL   string // key IN ?: key, incarnation, total
	selectStartsCQL string // start_ns IN ?: start_ns, incarnation, total
	bucketCQL       bucketCQL
	leaseCQL        leaseCQL

	mu         sync.Mutex
	sess       *gocql.Session
	connecting chan struct{} // non-nil while an attempt runs, closed when it ends
	lastErr    error         // of the last failed attempt
	lastFail   time.Time
	closed     bool
	done       chan struct{} // closed by Close

	noHostsSince time.Time // first of an unbroken run of ErrNoConnections
	// replaceSessionAfter is how long a session may answer every call
	// with "no hosts available" before it is replaced (see observe).
	replaceSessionAfter time.Duration

	connects      atomic.Int64 // sessions created, for tests
	bucketRetries atomic.Int64 // Buckets attempts after a failed condition, for tests
	bucketTrips   atomic.Int64 // Buckets requests (reads and batches), for tests
	leaseRetries  atomic.Int64 // Leases attempts after a failed condition, for tests
	leaseTrips    atomic.Int64 // Leases requests (reads and batches), for tests
}

// Open validates cfg and returns a Store. It does not contact Cassandra:
// a node must start while its store is down. The first call that needs
// the session creates it (and, with CreateSchema, the keyspace and the
// table); when that fails the calls return errors wrapping
// clustersync.ErrUnavailable and a later call tries again (at most one
// attempt per second). Close releases the session.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	wcons, _ := writeConsistency(cfg.WriteConsistency)
	rcons, _ := readConsistency(cfg.ReadConsistency)
	tc, err := cfg.tlsConfig()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}

	c := gocql.NewCluster(cfg.Hosts...)
	c.Port = cfg.Port
	c.ProtoVersion = cfg.ProtoVersion
	c.ConnectTimeout = time.Duration(cfg.ConnectTimeout)
	c.Timeout = time.Duration(cfg.Timeout)
	c.WriteTimeout = time.Duration(cfg.Timeout)
	c.Consistency = rcons
	// Write each request at once: the driver's default, waiting 200 µs
	// for more requests to coalesce into one socket write, costs a
	// synchronous call about a millisecond per request (timer
	// granularity) and saved no measurable CPU in a tick.
	c.WriteCoalesceWaitTime = 0
	// Every statement is idempotent (writes carry their own timestamp), so
	// the driver may retry one on another node; the caller's context
	// bounds the retries.
	c.RetryPolicy = &gocql.SimpleRetryPolicy{NumRetries: 2}
	c.DefaultIdempotence = true
	// Down nodes are dialled again every 5 s (driver default: 60 s), so a
	// restarted node serves again soon.
	c.ReconnectInterval = 5 * time.Second
	c.ReconnectionPolicy = &gocql.ConstantReconnectionPolicy{MaxRetries: 10, Interval: time.Second}
	// Token-aware routing needs keyspace metadata only.
	c.Metadata.CacheMode = gocql.KeyspaceOnly
	if cfg.Username != "" {
		c.Authenticator = gocql.PasswordAuthenticator{Username: cfg.Username, Password: cfg.Password}
	}
	if tc != nil {
		c.SslOpts = &gocql.SslOptions{Config: tc, EnableHostVerification: !cfg.TLS.InsecureSkipVerify}
	}
	c.Logger = slogLogger{log}

	table := cfg.Keyspace + "." + cfg.Table
	part := " WHERE namespace = ? AND size_ns = ? AND start_ns = ? AND key"
	return &Store{
		cfg: cfg, cluster: *c, wcons: wcons, rcons: rcons, log: log,
		insertCQL: "INSERT INTO " + table +
			" (namespace, size_ns, start_ns, key, incarnation, total) VALUES (?, ?, ?, ?, ?, ?) USING TTL ? AND TIMESTAMP ?",
		selectCQL:     "SELECT incarnation, total FROM " + table + part + " = ?",
		selectKeysCQL: "SELECT key, incarnation, total FROM " + table + part + " IN ?",
		selectStartsCQL: "SELECT start_ns, incarnation, total FROM " + table +
			" WHERE namespace = ? AND size_ns = ? AND start_ns IN ? AND key = ?",
		bucketCQL:           newBucketCQL(cfg),
		leaseCQL:            newLeaseCQL(cfg),
		done:                make(chan struct{}),
		replaceSessionAfter: defaultReplaceSessionAfter,
	}, nil
}

// Abilities are what a Cassandra store can do. It cannot decide a
// sliding window's Allow atomically (see the package's doc), and it
// reads no changes: every tick fetches. Buckets and leases are held
// under lightweight transactions.
const Abilities = clustersync.PushFetch | clustersync.Buckets | clustersync.Leases | clustersync.Window

// Abilities returns the package's Abilities.
func (s *Store) Abilities() clustersync.Abilities { return Abilities }

// Close closes the session. Every call after Close returns an error
// wrapping clustersync.ErrClosed, a second Close too; calls in flight fail
// with it.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("cassandra: close: %w", clustersync.ErrClosed)
	}
	s.closed = true
	close(s.done)
	if s.sess != nil {
		s.sess.Close()
		s.sess = nil
	}
	return nil
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// String describes the store for logs: its hosts, keyspace and table.
func (s *Store) String() string {
	return "cassandra " + strconv.Quote(s.cfg.Keyspace+"."+s.cfg.Table) + " on " + fmt.Sprint(s.cfg.Hosts)
}
