package cassandra

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	clustersync "github.com/limiterd/limiterd/sync"
)

// bucketTableSuffix names the table of buckets after the table of
// windows, so limiterd clusters sharing a keyspace keep theirs apart.
const bucketTableSuffix = "_buckets"

// bucketTable is the name of cfg's table of buckets.
func bucketTable(cfg Config) string { return cfg.Table + bucketTableSuffix }

// Bucket statements, built once by newBucketCQL.
type bucketCQL struct {
	read   string // bucket IN ?: bucket, level, mark, waste, seq, expire_ns, incs
	insert string // a new row: IF NOT EXISTS, TTL bound
	update string // an existing row: IF seq = ?, TTL bound
}

func newBucketCQL(cfg Config) bucketCQL {
	table := cfg.Keyspace + "." + bucketTable(cfg)
	return bucketCQL{
		read: "SELECT bucket, level, mark, waste, seq, expire_ns, incs FROM " + table +
			" WHERE namespace = ? AND key = ? AND bucket IN ?",
		insert: "INSERT INTO " + table + " (namespace, key, bucket, level, mark, waste, seq, expire_ns, incs)" +
			" VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS USING TTL ?",
		update: "UPDATE " + table + " USING TTL ? SET level = ?, mark = ?, waste = ?, seq = ?, expire_ns = ?, incs = ?" +
			" WHERE namespace = ? AND key = ? AND bucket = ? IF seq = ?",
	}
}

// createBucketTableCQL is the table of buckets: one partition per key of
// a namespace, one row per bucket of that key (kind and parameters, as
// ratelimit.BucketSpec.StoreKey names it), so a call's buckets are one
// partition, which one lightweight transaction reads and writes. incs
// holds each incarnation's record (life, applied, version); frozen, so
// that rewriting it leaves no tombstones. Rows are overwritten in place
// by every call and expire by TTL: leveled compaction keeps a row's
// versions few, where time-window compaction (the windows') would keep
// every overwritten version until its window is dropped.
func createBucketTableCQL(cfg Config) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
  namespace text,
  key       blob,
  bucket    blob,
  level     bigint,
  mark      bigint,
  waste     bigint,
  seq       bigint,
  expire_ns bigint,
  incs      frozen<map<text, frozen<tuple<bigint, bigint, bigint>>>>,
  PRIMARY KEY ((namespace, key), bucket)
) WITH %s`, cfg.Keyspace, bucketTable(cfg), bucketTableOptions)
}

// addBucketWasteCQL gives a table of buckets made by an earlier release
// the waste column (ratelimit.BucketState.Waste; null reads as 0, none
// known).
func addBucketWasteCQL(cfg Config) string {
	return fmt.Sprintf("ALTER TABLE %s.%s ADD IF NOT EXISTS waste bigint", cfg.Keyspace, bucketTable(cfg))
}

const bucketTableOptions = `compaction = {'class': 'LeveledCompactionStrategy'}
  AND compression = {'class': 'LZ4Compressor', 'chunk_length_in_kb': '4'}
  AND gc_grace_seconds = 10800
  AND comment = 'limiterd token, leaky and fixed buckets, decided under lightweight transactions; rows expire by TTL'`

// Backoff between attempts whose condition failed: another caller wrote
// one of the rows between the read and the write.
const (
	bucketBackoffMin = 500 * time.Microsecond
	bucketBackoffMax = 16 * time.Millisecond
)

// Buckets implements clustersync.BucketStore under a lightweight
// transaction: it reads the call's rows (one partition), decides in Go
// with clustersync.ApplyBuckets, and writes every changed row in one
// conditional batch, each row on the seq it was read with (IF NOT EXISTS
// for a new row). When another caller wrote first, the batch applies
// nothing and the call starts again from a new read, after a short random
// pause, until ctx ends. Two round trips per call without contention: the
// read and the batch (the read alone when nothing changed: a replay).
//
// The first read is at the read consistency, not SERIAL: it saves a
// Paxos round (a third of an uncontended call), and a stale read only
// fails the batch's conditions, since a row's seq only grows while it
// lives and its TTL only grows (a stale replica cannot show an old row
// under the seq of a newer one). The reads after a failed batch are at
// SERIAL, which completes any transaction in flight on the partition.
func (s *Store) Buckets(ctx context.Context, inc string, at, take int64, calls []clustersync.BucketCall, replies []clustersync.BucketReply) (bool, error) {
	if err := s.precheck(inc); err != nil {
		return false, err
	}
	if len(replies) != len(calls) {
		return false, fmt.Errorf("cassandra: buckets: len(replies) = %d, want len(calls) = %d", len(replies), len(calls))
	}
	if len(calls) == 0 {
		return clustersync.ApplyBuckets(inc, at, take, calls, nil, replies, nil), nil
	}
	ns, key := calls[0].Namespace, calls[0].Bucket.Key
	if err := checkNamespace(ns); err != nil {
		return false, err
	}
	names := make([][]byte, len(calls))
	for i := range calls {
		c := &calls[i]
		if c.Namespace != ns || c.Bucket.Key != key {
			return false, fmt.Errorf("cassandra: buckets: call %d is of %q %q, call 0 of %q %q: want one namespace and key", i, c.Namespace, c.Bucket.Key, ns, key)
		}
		names[i] = []byte(c.Bucket.StoreKey())
		for j := range i {
			if string(names[j]) == string(names[i]) {
				return false, fmt.Errorf("cassandra: buckets: bucket %q twice in one call", names[i])
			}
		}
	}
	sess, err := s.session(ctx)
	if err != nil {
		return false, s.wrap("buckets", ctx, err)
	}
	allowed, err := s.buckets(ctx, sess, inc, at, take, calls, names, replies)
	s.observe(sess, err)
	return allowed, s.wrap("buckets", ctx, err)
}

func (s *Store) buckets(ctx context.Context, sess *gocql.Session, inc string, at, take int64, calls []clustersync.BucketCall, names [][]byte, replies []clustersync.BucketReply) (bool, error) {
	n := len(calls)
	ns, key := calls[0].Namespace, []byte(calls[0].Bucket.Key)
	rows := make([]*clustersync.BucketRow, n)
	seqs := make([]int64, n) // as read; -1: no row
	changed := make([]bool, n)
	cas := make(map[string]any)
	backoff := bucketBackoffMin
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			s.bucketRetries.Add(1)
			// Full jitter: callers that collided spread out.
			if err := sleep(ctx, rand.N(backoff)+1); err != nil {
				return false, err
			}
			backoff = min(2*backoff, bucketBackoffMax)
		}
		cons := s.rcons
		if attempt > 0 {
			cons = gocql.Serial
		}
		if err := s.readBuckets(ctx, sess, cons, ns, key, names, rows, seqs); err != nil {
			return false, err
		}
		allowed := clustersync.ApplyBuckets(inc, at, take, calls, rows, replies, changed)
		if !slices.Contains(changed, true) {
			return allowed, nil
		}
		applied, err := s.writeBuckets(ctx, sess, ns, key, names, rows, seqs, changed, cas)
		if err != nil {
			return false, err
		}
		if applied {
			return allowed, nil
		}
	}
}

// readBuckets reads the rows of names at consistency cons: rows[i] is
// names[i]'s row (nil when there is none) and seqs[i] its seq (-1).
func (s *Store) readBuckets(ctx context.Context, sess *gocql.Session, cons gocql.Consistency, ns string, key []byte, names [][]byte, rows []*clustersync.BucketRow, seqs []int64) error {
	clear(rows)
	for i := range seqs {
		seqs[i] = -1
	}
	s.bucketTrips.Add(1)
	iter := sess.Query(s.bucketCQL.read, ns, key, names).Consistency(cons).Idempotent(true).IterContext(ctx)
	var (
		name     []byte
		r        clustersync.BucketRow
		expireNS int64
		incs     incRecords
	)
	for iter.Scan(&name, &r.State.Level, &r.State.Mark, &r.State.Waste, &r.Seq, &expireNS, &incs) {
		i := slices.IndexFunc(names, func(b []byte) bool { return string(b) == string(name) })
		if i < 0 {
			continue
		}
		row := r
		row.Incs = incs.m
		incs.m = nil
		if expireNS != 0 {
			row.ExpireAt = time.Unix(0, expireNS)
		}
		rows[i], seqs[i] = &row, r.Seq
	}
	return iter.Close()
}

// writeBuckets writes the changed rows in one conditional batch and
// reports whether it applied. Each row keeps the TTL of its latest
// ExpireAt: every column is written, so no cell outlives or predeceases
// the others. The statements are idempotent for the driver's retries: a
// batch that went through changed the seqs, so its retry applies nothing
// and the call reads again.
func (s *Store) writeBuckets(ctx context.Context, sess *gocql.Session, ns string, key []byte, names [][]byte, rows []*clustersync.BucketRow, seqs []int64, changed []bool, cas map[string]any) (bool, error) {
	now := time.Now()
	b := sess.Batch(gocql.LoggedBatch).Consistency(s.wcons).SerialConsistency(gocql.Serial)
	for i, r := range rows {
		if !changed[i] {
			continue
		}
		var expireNS int64
		if !r.ExpireAt.IsZero() {
			expireNS = r.ExpireAt.UnixNano()
		}
		ttl := ttl(r.ExpireAt, now)
		incs := incRecords{m: r.Incs}
		if seqs[i] < 0 {
			b.Entries = append(b.Entries, gocql.BatchEntry{Stmt: s.bucketCQL.insert, Idempotent: true,
				Args: []any{ns, key, names[i], r.State.Level, r.State.Mark, r.State.Waste, r.Seq, expireNS, incs, ttl}})
		} else {
			b.Entries = append(b.Entries, gocql.BatchEntry{Stmt: s.bucketCQL.update, Idempotent: true,
				Args: []any{ttl, r.State.Level, r.State.Mark, r.State.Waste, r.Seq, expireNS, incs, ns, key, names[i], seqs[i]}})
		}
	}
	clear(cas)
	s.bucketTrips.Add(1)
	applied, iter, err := b.MapExecCASContext(ctx, cas)
	if iter != nil {
		if cerr := iter.Close(); err == nil {
			err = cerr
		}
	}
	return applied, err
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// incRecords is a row's incs column: per incarnation a tuple of its
// life, applied and version. It encodes and decodes the frozen map
// itself, which spares the driver's reflection over map and tuple.
type incRecords struct {
	m map[string]clustersync.BucketInc
}

// MarshalCQL encodes the map as the native protocol's collection: a
// count, then each key and value as [bytes]; a tuple is its elements as
// [bytes]. Keys go in order: Cassandra keeps a frozen map sorted.
func (r incRecords) MarshalCQL(gocql.TypeInfo) ([]byte, error) {
	keys := make([]string, 0, len(r.m))
	size := 4
	for k := range r.m {
		keys = append(keys, k)
		size += 4 + len(k) + 4 + 3*(4+8)
	}
	slices.Sort(keys)
	buf := make([]byte, 0, size)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(keys)))
	for _, k := range keys {
		v := r.m[k]
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(k)))
		buf = append(buf, k...)
		buf = binary.BigEndian.AppendUint32(buf, 3*(4+8))
		for _, x := range [...]int64{v.Life, v.Applied, v.Version} {
			buf = binary.BigEndian.AppendUint32(buf, 8)
			buf = binary.BigEndian.AppendUint64(buf, uint64(x))
		}
	}
	return buf, nil
}

var errIncRecords = errors.New("cassandra: malformed incs column")

// UnmarshalCQL decodes what MarshalCQL encodes (null: an empty map).
func (r *incRecords) UnmarshalCQL(_ gocql.TypeInfo, data []byte) error {
	r.m = map[string]clustersync.BucketInc{}
	if len(data) == 0 {
		return nil
	}
	next := func() ([]byte, bool) {
		if len(data) < 4 {
			return nil, false
		}
		n := int32(binary.BigEndian.Uint32(data))
		data = data[4:]
		if n < 0 || int(n) > len(data) {
			return nil, false
		}
		b := data[:n]
		data = data[n:]
		return b, true
	}
	if len(data) < 4 {
		return errIncRecords
	}
	count := int(binary.BigEndian.Uint32(data))
	data = data[4:]
	for range count {
		k, ok1 := next()
		v, ok2 := next()
		if !ok1 || !ok2 {
			return errIncRecords
		}
		var rec [3]int64
		for j := range rec {
			if len(v) < 12 || binary.BigEndian.Uint32(v) != 8 {
				return errIncRecords
			}
			rec[j] = int64(binary.BigEndian.Uint64(v[4:]))
			v = v[12:]
		}
		r.m[string(k)] = clustersync.BucketInc{Life: rec[0], Applied: rec[1], Version: rec[2]}
	}
	return nil
}
