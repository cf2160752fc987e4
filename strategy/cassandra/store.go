package cassandra

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	clustersync "github.com/limiterd/limiterd/sync"
)

const (
	// retryConnectAfter is how long after a failed attempt to create the
	// session calls fail at once (with that attempt's error) before one
	// of them starts the next attempt: during an outage a busy node does
	// not dial for every call.
	retryConnectAfter = time.Second
	// schemaTimeout bounds creating the keyspace and the table.
	schemaTimeout = 30 * time.Second
	// maxBatchBytes keeps an unlogged batch under Cassandra's
	// batch_size_warn_threshold (default 5 KiB; Cassandra logs every batch
	// over it): a batch is cut before a row that would take it over (a
	// row alone always goes).
	maxBatchBytes = 4 << 10
	// rowOverhead estimates what Cassandra counts for a row besides its
	// strings (3 bigints, liveness info, the cell's timestamp and TTL):
	// about 80 bytes, measured against its warnings.
	rowOverhead = 96
	// maxTTL is Cassandra's largest TTL, 20 years.
	maxTTL = 20 * 365 * 24 * 3600
)

// replaceSessionAfter is how long a session may answer every call with
// "no hosts available" before it is closed and the next call creates a
// new one from the configured hosts: a safety net for a driver that stops
// re-dialling its known nodes (it normally reconnects within a second of
// a node's return). A variable for tests.
var replaceSessionAfter = 30 * time.Second

// Store is a clustersync.Store (and clustersync.PushFetcher) on Apache
// Cassandra. It is safe for concurrent use. Open creates it without
// contacting Cassandra; the session is created by the first call that
// needs it and re-created by later calls after a failure.
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

	mu         sync.Mutex
	sess       *gocql.Session
	connecting chan struct{} // non-nil while an attempt runs, closed when it ends
	lastErr    error         // of the last failed attempt
	lastFail   time.Time
	closed     bool
	done       chan struct{} // closed by Close

	noHostsSince time.Time // first of an unbroken run of ErrNoConnections

	connects atomic.Int64 // sessions created, for tests
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
	// for more requests to coalesce into one socket write, raised one
	// request's p50 from 0.2-0.3 ms to 1.5 ms on a 2-core VM (timer
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
		done: make(chan struct{}),
	}, nil
}

// Close closes the session. Every call after Close returns an error
// wrapping clustersync.ErrClosed; calls in flight fail with it.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
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

// session returns the session, creating it when there is none. One
// attempt runs at a time, in the background (NewSession takes no
// context; ConnectTimeout bounds each dial and schemaTimeout the DDL);
// callers wait for it until their ctx is done, and a later call finds
// the session the attempt made.
func (s *Store) session(ctx context.Context) (*gocql.Session, error) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return nil, clustersync.ErrClosed
	case s.sess != nil:
		sess := s.sess
		s.mu.Unlock()
		return sess, nil
	case s.connecting == nil && s.lastErr != nil && time.Since(s.lastFail) < retryConnectAfter:
		err := s.lastErr
		s.mu.Unlock()
		if isPermanent(err) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", clustersync.ErrUnavailable, err)
	case s.connecting == nil:
		s.connecting = make(chan struct{})
		go s.connect(s.connecting)
	}
	ch := s.connecting
	s.mu.Unlock()

	select {
	case <-ch:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: connecting: %w", clustersync.ErrUnavailable, ctx.Err())
	case <-s.done:
		return nil, clustersync.ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, clustersync.ErrClosed
	case s.sess != nil:
		return s.sess, nil
	case isPermanent(s.lastErr):
		return nil, s.lastErr
	default:
		return nil, fmt.Errorf("%w: %w", clustersync.ErrUnavailable, s.lastErr)
	}
}

// connect makes one attempt to create the session and the schema.
func (s *Store) connect(ch chan struct{}) {
	sess, err := s.newSession()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer close(ch)
	s.connecting = nil
	if s.closed {
		if sess != nil {
			sess.Close()
		}
		return
	}
	if err != nil {
		level := slog.LevelWarn // the first failure of a run; then Debug
		if s.lastErr != nil {
			level = slog.LevelDebug
		}
		s.log.Log(context.Background(), level, "cassandra: cannot create session; will retry", "hosts", s.cfg.Hosts, "err", err)
		s.lastErr, s.lastFail = err, time.Now()
		return
	}
	s.sess, s.lastErr, s.noHostsSince = sess, nil, time.Time{}
	s.connects.Add(1)
}

// observe notes the outcome of a request on sess and replaces the session
// when it has had no host for replaceSessionAfter.
func (s *Store) observe(sess *gocql.Session, err error) {
	noHosts := errors.Is(err, gocql.ErrNoConnections)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sess != sess {
		return
	}
	switch {
	case !noHosts:
		if err == nil {
			s.noHostsSince = time.Time{}
		}
	case s.noHostsSince.IsZero():
		s.noHostsSince = time.Now()
	case time.Since(s.noHostsSince) > replaceSessionAfter:
		s.log.Warn("cassandra: no host reachable for a while; creating a new session", "hosts", s.cfg.Hosts, "since", s.noHostsSince)
		s.sess, s.noHostsSince = nil, time.Time{}
		go sess.Close() // calls still in flight on it fail as unavailable
	}
}

func (s *Store) newSession() (*gocql.Session, error) {
	c := s.cluster
	// A policy belongs to one session: a new one per attempt.
	var fallback gocql.HostSelectionPolicy = gocql.RoundRobinHostPolicy()
	if s.cfg.LocalDC != "" {
		fallback = gocql.DCAwareRoundRobinPolicy(s.cfg.LocalDC)
	}
	c.PoolConfig.HostSelectionPolicy = gocql.TokenAwareHostPolicy(fallback, gocql.ShuffleReplicas())
	sess, err := gocql.NewSession(c)
	if err != nil {
		return nil, fmt.Errorf("create session with %v: %w", s.cfg.Hosts, err)
	}
	if !s.cfg.CreateSchema {
		return sess, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), schemaTimeout)
	defer cancel()
	go func() { // Close ends the attempt
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	for _, stmt := range []string{createKeyspaceCQL(s.cfg), createTableCQL(s.cfg)} {
		// DDL is idempotent (IF NOT EXISTS) and waits for schema agreement.
		if err := sess.Query(stmt).Consistency(gocql.One).ExecContext(ctx); err != nil {
			sess.Close()
			return nil, fmt.Errorf("create schema: %w", err)
		}
	}
	return sess, nil
}

// Push stores rows for incarnation inc: each row one INSERT ... USING
// TTL ... AND TIMESTAMP <Version>, grouped into unlogged batches of up to
// BatchRows rows, at most Concurrency requests in flight. Cassandra keeps
// the cell with the highest write timestamp, so an older version never
// overwrites a newer one and a repeated push changes nothing.
func (s *Store) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	if err := s.precheck(inc); err != nil {
		return err
	}
	for i := range rows {
		if err := checkNamespace(rows[i].Namespace); err != nil {
			return err
		}
	}
	if len(rows) == 0 {
		return nil
	}
	sess, err := s.session(ctx)
	if err != nil {
		return s.wrap("push", ctx, err)
	}
	err = s.push(ctx, sess, inc, rows)
	s.observe(sess, err)
	return s.wrap("push", ctx, err)
}

func (s *Store) push(ctx context.Context, sess *gocql.Session, inc string, rows []clustersync.Row) error {
	now := time.Now()
	// Cut rows into batches of at most BatchRows rows and about
	// maxBatchBytes.
	cuts := []int{0}
	n, size := 0, 0
	for i := range rows {
		b := rowBytes(inc, &rows[i])
		if n > 0 && (n == s.cfg.BatchRows || size+b > maxBatchBytes) {
			cuts = append(cuts, i)
			n, size = 0, 0
		}
		n++
		size += b
	}
	cuts = append(cuts, len(rows))
	return s.parallel(ctx, len(cuts)-1, func(ctx context.Context, j int) error {
		chunk := rows[cuts[j]:cuts[j+1]]
		args := insertArgs(inc, chunk, now)
		if len(chunk) == 1 {
			return sess.Query(s.insertCQL, args...).
				Consistency(s.wcons).Idempotent(true).ExecContext(ctx)
		}
		b := sess.Batch(gocql.UnloggedBatch)
		b.Entries = make([]gocql.BatchEntry, len(chunk))
		for i := range chunk {
			b.Entries[i] = gocql.BatchEntry{Stmt: s.insertCQL, Args: args[i*insertCols : (i+1)*insertCols], Idempotent: true}
		}
		return b.Consistency(s.wcons).ExecContext(ctx)
	})
}

func rowBytes(inc string, r *clustersync.Row) int {
	return len(r.Namespace) + len(r.Key) + len(inc) + rowOverhead
}

// insertCols is the number of bound values of insertCQL.
const insertCols = 8

// encoded is a bound value already in its CQL wire form. Passed as a
// pointer (which an interface holds without allocating), the driver
// takes it through gocql.Marshaler as it is.
type encoded []byte

func (e *encoded) MarshalCQL(gocql.TypeInfo) ([]byte, error) { return *e, nil }

// insertArgs are the bound values of insertCQL for each row of chunk,
// insertCols per row: namespace text, size_ns, start_ns bigint, key
// blob, incarnation text, total bigint, TTL int, TIMESTAMP bigint. They
// are encoded into one buffer per chunk, which saves the driver's two
// allocations per value (boxing it, marshalling it): about half of a
// tick's allocations, on a client that shares its cores with the server.
func insertArgs(inc string, chunk []clustersync.Row, now time.Time) []any {
	size := 0
	for i := range chunk {
		size += len(chunk[i].Namespace) + len(chunk[i].Key) + len(inc) + 4*8 + 4 // 4 bigints, 1 int
	}
	// Each value is appended to buf, which size bounds so it is never
	// reallocated, and enc gets the slice of buf holding it: never nil,
	// also when empty (an empty key is a value, not null).
	buf := make([]byte, 0, size)
	enc := make([]encoded, 0, insertCols*len(chunk))
	str := func(v string) {
		buf = append(buf, v...)
		enc = append(enc, buf[len(buf)-len(v):len(buf):len(buf)])
	}
	i64 := func(v int64) {
		buf = binary.BigEndian.AppendUint64(buf, uint64(v))
		enc = append(enc, buf[len(buf)-8:len(buf):len(buf)])
	}
	for i := range chunk {
		r := &chunk[i]
		str(r.Namespace)
		i64(int64(r.Size))
		i64(r.Start)
		str(r.Key)
		str(inc)
		i64(r.Total)
		buf = binary.BigEndian.AppendUint32(buf, uint32(ttl(r.ExpireAt, now)))
		enc = append(enc, buf[len(buf)-4:len(buf):len(buf)])
		i64(r.Version)
	}
	args := make([]any, len(enc))
	for k := range enc {
		args[k] = &enc[k]
	}
	return args
}

// ttl is the TTL in whole seconds that makes a row written at now expire
// at or after expireAt: at least 1, at most Cassandra's 20 years.
// Cassandra expires a cell at floor(its write time in seconds) + TTL, up
// to a second before write time + TTL, hence the second added to the
// rounded-up remainder.
func ttl(expireAt, now time.Time) int {
	d := expireAt.Sub(now)
	secs := (d+time.Second-1)/time.Second + 1
	return int(min(max(secs, 1), maxTTL))
}

// Fetch writes into others[i] the sum of the totals of every incarnation
// but inc for keys[i]. One SELECT reads up to BatchRows windows that
// differ only in their key (key IN ...: a tick's windows share a few
// starts) or, for small calls when that takes fewer requests, only in
// their start (start_ns IN ...: a synchronous call's current and previous
// windows of one key); at most Concurrency in flight.
func (s *Store) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	if err := s.precheck(inc); err != nil {
		return err
	}
	if len(others) != len(keys) {
		return fmt.Errorf("cassandra: fetch: len(others) = %d, want len(keys) = %d", len(others), len(keys))
	}
	for i := range keys {
		if err := checkNamespace(keys[i].Namespace); err != nil {
			return err
		}
	}
	clear(others)
	if len(keys) == 0 {
		return nil
	}
	sess, err := s.session(ctx)
	if err != nil {
		return s.wrap("fetch", ctx, err)
	}
	err = s.fetch(ctx, sess, inc, keys, others)
	s.observe(sess, err)
	return s.wrap("fetch", ctx, err)
}

func (s *Store) fetch(ctx context.Context, sess *gocql.Session, inc string, keys []clustersync.WindowKey, others []int64) error {
	if len(keys) == 1 {
		sum, err := s.readPartition(ctx, sess, inc, keys[0])
		others[0] = sum
		return err
	}
	p := s.plan(keys, false)
	if len(keys) <= maxByKeyPlan {
		// A synchronous call's windows (current and previous of each
		// size, one key) share no start but share keys.
		if q := s.plan(keys, true); len(q.chunks) < len(p.chunks) {
			p = q
		}
	}
	return s.parallel(ctx, len(p.chunks), func(ctx context.Context, j int) error {
		c := p.idx[p.chunks[j].lo:p.chunks[j].hi]
		first := &keys[c[0]]
		if compareKeys(first, &keys[c[len(c)-1]]) == 0 { // one partition
			sum, err := s.readPartition(ctx, sess, inc, *first)
			for _, i := range c {
				others[i] = sum
			}
			return err
		}
		if p.byKey {
			return s.readStarts(ctx, sess, inc, keys, c, others)
		}
		return s.readKeys(ctx, sess, inc, keys, c, others)
	})
}

// maxByKeyPlan is the most windows for which fetch also considers
// grouping by key (SELECT ... start_ns IN): small calls only.
const maxByKeyPlan = 64

// fetchPlan groups the windows of a Fetch into requests: idx sorts them
// (by window then key, or with byKey by key then start), and each chunk
// idx[lo:hi] is one SELECT of up to BatchRows partitions that differ only
// in their key (or with byKey only in their start). Equal windows are
// adjacent and read once.
type fetchPlan struct {
	byKey  bool
	idx    []int32
	chunks []struct{ lo, hi int }
}

func (s *Store) plan(keys []clustersync.WindowKey, byKey bool) fetchPlan {
	p := fetchPlan{byKey: byKey, idx: make([]int32, len(keys))}
	for i := range p.idx {
		p.idx[i] = int32(i)
	}
	order := compareKeys
	if byKey {
		order = compareByKey
	}
	slices.SortFunc(p.idx, func(a, b int32) int { return order(&keys[a], &keys[b]) })
	lo, distinct := 0, 0
	for i := range p.idx {
		k := &keys[p.idx[i]]
		if i > 0 {
			prev := &keys[p.idx[i-1]]
			if compareKeys(prev, k) == 0 {
				continue // a duplicate, read with the first
			}
			same := prev.Namespace == k.Namespace && prev.Size == k.Size &&
				(!byKey && prev.Start == k.Start || byKey && prev.Key == k.Key)
			if !same || distinct == s.cfg.BatchRows {
				p.chunks = append(p.chunks, struct{ lo, hi int }{lo, i})
				lo, distinct = i, 0
			}
		}
		distinct++
	}
	p.chunks = append(p.chunks, struct{ lo, hi int }{lo, len(p.idx)})
	return p
}

// readKeys reads the windows keys[c] of one namespace, size and start
// with key IN, summing into others the rows not of inc.
func (s *Store) readKeys(ctx context.Context, sess *gocql.Session, inc string, keys []clustersync.WindowKey, c []int32, others []int64) error {
	first := &keys[c[0]]
	in := make([]string, 0, len(c))
	for _, i := range c {
		if k := keys[i].Key; len(in) == 0 || in[len(in)-1] != k {
			in = append(in, k)
		}
	}
	sums := make([]int64, len(in))
	iter := sess.Query(s.selectKeysCQL, first.Namespace, int64(first.Size), first.Start, in).
		Consistency(s.rcons).Idempotent(true).IterContext(ctx)
	// Scanned into reused buffers: no allocation per row.
	var key, rowInc []byte
	var total int64
	for iter.Scan(&key, &rowInc, &total) {
		if string(rowInc) == inc {
			continue
		}
		if p, ok := slices.BinarySearch(in, string(key)); ok {
			sums[p] += total
		}
	}
	if err := iter.Close(); err != nil {
		return err
	}
	p := 0
	for _, i := range c {
		for in[p] != keys[i].Key {
			p++
		}
		others[i] = sums[p]
	}
	return nil
}

// readStarts reads the windows keys[c] of one namespace, size and key
// with start_ns IN, summing into others the rows not of inc.
func (s *Store) readStarts(ctx context.Context, sess *gocql.Session, inc string, keys []clustersync.WindowKey, c []int32, others []int64) error {
	first := &keys[c[0]]
	in := make([]int64, 0, len(c))
	for _, i := range c {
		if st := keys[i].Start; len(in) == 0 || in[len(in)-1] != st {
			in = append(in, st)
		}
	}
	sums := make([]int64, len(in))
	iter := sess.Query(s.selectStartsCQL, first.Namespace, int64(first.Size), in, first.Key).
		Consistency(s.rcons).Idempotent(true).IterContext(ctx)
	var start, total int64
	var rowInc []byte
	for iter.Scan(&start, &rowInc, &total) {
		if string(rowInc) == inc {
			continue
		}
		if p, ok := slices.BinarySearch(in, start); ok {
			sums[p] += total
		}
	}
	if err := iter.Close(); err != nil {
		return err
	}
	p := 0
	for _, i := range c {
		for in[p] != keys[i].Start {
			p++
		}
		others[i] = sums[p]
	}
	return nil
}

func compareKeys(a, b *clustersync.WindowKey) int {
	return cmp.Or(
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Size, b.Size),
		cmp.Compare(a.Start, b.Start),
		cmp.Compare(a.Key, b.Key),
	)
}

func compareByKey(a, b *clustersync.WindowKey) int {
	return cmp.Or(
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Size, b.Size),
		cmp.Compare(a.Key, b.Key),
		cmp.Compare(a.Start, b.Start),
	)
}

// readPartition sums the totals of one window's rows whose incarnation
// is not skip ("" sums every row: incarnations are never empty).
func (s *Store) readPartition(ctx context.Context, sess *gocql.Session, skip string, k clustersync.WindowKey) (int64, error) {
	iter := sess.Query(s.selectCQL, k.Namespace, int64(k.Size), k.Start, k.Key).
		Consistency(s.rcons).Idempotent(true).IterContext(ctx)
	var rowInc []byte
	var total, sum int64
	for iter.Scan(&rowInc, &total) {
		if skip == "" || string(rowInc) != skip {
			sum += total
		}
	}
	if err := iter.Close(); err != nil {
		return 0, err
	}
	return sum, nil
}

// Window returns the sum of every incarnation's total for one window.
func (s *Store) Window(ctx context.Context, key clustersync.WindowKey) (int64, error) {
	if s.isClosed() {
		return 0, fmt.Errorf("cassandra: window: %w", clustersync.ErrClosed)
	}
	if err := checkNamespace(key.Namespace); err != nil {
		return 0, err
	}
	sess, err := s.session(ctx)
	if err != nil {
		return 0, s.wrap("window", ctx, err)
	}
	sum, err := s.readPartition(ctx, sess, "", key)
	s.observe(sess, err)
	return sum, s.wrap("window", ctx, err)
}

// PushFetch pushes rows like Push and fetches the others' totals of
// their windows like Fetch, both at once: CQL has no statement that
// writes and reads, but the read excludes this incarnation's rows, so it
// need not wait for the write. The call takes the longer of the two
// round trips instead of their sum.
func (s *Store) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	if err := s.precheck(inc); err != nil {
		return err
	}
	if len(others) != len(rows) {
		return fmt.Errorf("cassandra: pushfetch: len(others) = %d, want len(rows) = %d", len(others), len(rows))
	}
	for i := range rows {
		if err := checkNamespace(rows[i].Namespace); err != nil {
			return err
		}
	}
	clear(others)
	if len(rows) == 0 {
		return nil
	}
	sess, err := s.session(ctx)
	if err != nil {
		return s.wrap("pushfetch", ctx, err)
	}
	keys := make([]clustersync.WindowKey, len(rows))
	for i := range rows {
		keys[i] = rows[i].WindowKey
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var perr error
	var wg sync.WaitGroup
	wg.Go(func() {
		if perr = s.push(cctx, sess, inc, rows); perr != nil {
			cancel()
		}
	})
	ferr := s.fetch(cctx, sess, inc, keys, others)
	if ferr != nil {
		cancel()
	}
	wg.Wait()
	s.observe(sess, cmp.Or(perr, ferr))
	if perr != nil {
		return s.wrap("pushfetch: push", ctx, perr)
	}
	return s.wrap("pushfetch: fetch", ctx, ferr)
}

// parallel runs fn(ctx, 0..n-1) on at most Concurrency goroutines. The
// first error cancels the others' ctx and is returned.
func (s *Store) parallel(ctx context.Context, n int, fn func(context.Context, int) error) error {
	if n == 1 {
		return fn(ctx, 0)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range min(n, s.cfg.Concurrency) {
		wg.Go(func() {
			for cctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(cctx, i); err != nil {
					once.Do(func() { first = err })
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err() // done before every index ran
	}
	return first
}

// precheck fails after Close and on an incarnation Cassandra's text type
// cannot hold.
func (s *Store) precheck(inc string) error {
	if s.isClosed() {
		return fmt.Errorf("cassandra: %w", clustersync.ErrClosed)
	}
	if inc == "" || !utf8.ValidString(inc) {
		return fmt.Errorf("cassandra: incarnation %q: must be non-empty valid UTF-8", inc)
	}
	return nil
}

func checkNamespace(ns string) error {
	if !utf8.ValidString(ns) {
		return fmt.Errorf("cassandra: namespace %q: must be valid UTF-8", ns)
	}
	return nil
}

// wrap adds the package prefix and classifies err: ErrClosed after
// Close, ErrUnavailable for a done ctx and for anything that is not a
// permanent error (a bad request, a missing table, bad credentials).
func (s *Store) wrap(op string, ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, clustersync.ErrClosed):
		return fmt.Errorf("cassandra: %s: %w", op, clustersync.ErrClosed)
	case s.isClosed():
		return fmt.Errorf("cassandra: %s: %w: %v", op, clustersync.ErrClosed, err)
	case errors.Is(err, clustersync.ErrUnavailable):
		return fmt.Errorf("cassandra: %s: %w", op, err)
	case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
		return fmt.Errorf("cassandra: %s: %w: %w (%v)", op, clustersync.ErrUnavailable, ctx.Err(), err)
	case isPermanent(err):
		return fmt.Errorf("cassandra: %s: %w", op, err)
	default:
		return fmt.Errorf("cassandra: %s: %w: %w", op, clustersync.ErrUnavailable, err)
	}
}

// isPermanent reports errors that retrying will not cure: the request
// or the schema or the credentials are wrong.
func isPermanent(err error) bool {
	if err == nil {
		return false
	}
	var (
		syntax   *gocql.RequestErrSyntax
		invalid  *gocql.RequestErrInvalid
		unauth   *gocql.RequestErrUnauthorized
		config   *gocql.RequestErrConfig
		creds    *gocql.RequestErrCredentials
		marshal  gocql.MarshalError
		umarshal gocql.UnmarshalError
	)
	return errors.As(err, &syntax) || errors.As(err, &invalid) || errors.As(err, &unauth) ||
		errors.As(err, &config) || errors.As(err, &creds) || errors.As(err, &marshal) ||
		errors.As(err, &umarshal) || errors.Is(err, gocql.ErrQueryArgLength)
}

// slogLogger passes the driver's log to slog: errors and warnings as
// such, its informational and debug messages at Debug.
type slogLogger struct{ l *slog.Logger }

func (g slogLogger) Error(msg string, fields ...gocql.LogField) {
	g.log(slog.LevelError, msg, fields)
}

func (g slogLogger) Warning(msg string, fields ...gocql.LogField) {
	g.log(slog.LevelWarn, msg, fields)
}

func (g slogLogger) Info(msg string, fields ...gocql.LogField) {
	g.log(slog.LevelDebug, msg, fields)
}

func (g slogLogger) Debug(msg string, fields ...gocql.LogField) {
	g.log(slog.LevelDebug, msg, fields)
}

func (g slogLogger) log(level slog.Level, msg string, fields []gocql.LogField) {
	ctx := context.Background()
	if !g.l.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, len(fields)+1)
	attrs = append(attrs, slog.String("component", "gocql"))
	for _, f := range fields {
		attrs = append(attrs, slog.Any(f.Name, f.Value.Any()))
	}
	g.l.LogAttrs(ctx, level, msg, attrs...)
}

// String describes the store for logs: its hosts, keyspace and table.
func (s *Store) String() string {
	return "cassandra " + strconv.Quote(s.cfg.Keyspace+"."+s.cfg.Table) + " on " + fmt.Sprint(s.cfg.Hosts)
}
