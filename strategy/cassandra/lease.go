package cassandra

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	clustersync "github.com/limiterd/limiterd/sync"
)

// leaseTableSuffix names the table of leases after the table of
// windows, as bucketTableSuffix does.
const leaseTableSuffix = "_leases"

// leaseTable is the name of cfg's table of leases.
func leaseTable(cfg Config) string { return cfg.Table + leaseTableSuffix }

// Lease statements, built once by newLeaseCQL.
type leaseCQL struct {
	read   string // one partition: id, expiry, released, seq
	put    string // one lease or release, TTL bound
	del    string // one id
	create string // the partition's seq where there is none: IF seq = null, TTL bound
	bump   string // the partition's seq: IF seq = ?, TTL bound
}

func newLeaseCQL(cfg Config) leaseCQL {
	table := cfg.Keyspace + "." + leaseTable(cfg)
	part := " WHERE namespace = ? AND key = ?"
	return leaseCQL{
		read:   "SELECT id, expiry, released, seq FROM " + table + part,
		put:    "INSERT INTO " + table + " (namespace, key, id, expiry, released) VALUES (?, ?, ?, ?, ?) USING TTL ?",
		del:    "DELETE FROM " + table + part + " AND id = ?",
		create: "UPDATE " + table + " USING TTL ? SET seq = ?" + part + " IF seq = null",
		bump:   "UPDATE " + table + " USING TTL ? SET seq = ?" + part + " IF seq = ?",
	}
}

// createLeaseTableCQL is the table of leases: one partition per key of a
// namespace, one row per lease id, live (released = false, expiry: the
// lease's) or a remembered release (released = true, expiry: until when
// it is remembered). The static seq is the partition's version: every
// change is one conditional batch on it, so a key's leases change under
// one lightweight transaction. Rows expire by TTL at their time, seq at
// the partition's latest.
func createLeaseTableCQL(cfg Config) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s.%s (
  namespace text,
  key       blob,
  id        blob,
  expiry    bigint,
  released  boolean,
  seq       bigint static,
  PRIMARY KEY ((namespace, key), id)
) WITH %s`, cfg.Keyspace, leaseTable(cfg), leaseTableOptions)
}

// leaseTableOptions: as the buckets', rows are rewritten in place and
// expire by TTL; released leases are deleted, hence the tombstones that
// leveled compaction purges soonest.
const leaseTableOptions = `compaction = {'class': 'LeveledCompactionStrategy'}
  AND compression = {'class': 'LZ4Compressor', 'chunk_length_in_kb': '4'}
  AND gc_grace_seconds = 10800
  AND comment = 'limiterd concurrency leases, changed under lightweight transactions; rows expire by TTL'`

// leaseKey names one key's lease partition.
type leaseKey struct{ namespace, key string }

// leasePart is a lease partition as read or last written by this call:
// its leases and its seq (0: none).
type leasePart struct {
	set clustersync.LeaseSet
	seq int64
}

// Leases implements clustersync.LeaseStore under lightweight
// transactions, one per run of consecutive ops of one key: it reads the
// key's partition, applies the run's ops in Go with
// clustersync.ApplyLease, and writes what changed in one conditional
// batch on the partition's seq as read. When another caller wrote first
// the batch applies nothing and the run starts again from a read at
// SERIAL, after a short random pause, until ctx ends. Runs are applied
// one after the other, so an error leaves a prefix of the ops applied. A
// key met again later in the call starts from what the call wrote (the
// condition catches a writer in between), unless its run changes
// nothing: its replies then come from a new read.
//
// Two requests per run without contention (the read alone when nothing
// changes). As in Buckets, the first read is at the read consistency: a
// stale one only fails the batch's condition, since seq only grows; a
// run that changes nothing (a count, a refused acquire) answers from it,
// which sees every acknowledged write when reads and writes overlap (as
// LOCAL_QUORUM for both does). A batch whose outcome was unknown (a
// timeout) and that the driver retried fails its condition if it had
// applied, and the run is applied again: the state is as if it were sent
// once, but a Release then answers OK = false.
func (s *Store) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	if s.isClosed() {
		return fmt.Errorf("cassandra: leases: %w", clustersync.ErrClosed)
	}
	if len(replies) != len(ops) {
		return fmt.Errorf("cassandra: leases: len(replies) = %d, want len(ops) = %d", len(replies), len(ops))
	}
	for i := range ops {
		if err := checkNamespace(ops[i].Namespace); err != nil {
			return fmt.Errorf("cassandra: leases: op %d: %w", i, err)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	sess, err := s.session(ctx)
	if err != nil {
		return s.wrap("leases", ctx, err)
	}
	err = s.leases(ctx, sess, now, ops, replies)
	s.observe(sess, err)
	return s.wrap("leases", ctx, err)
}

func (s *Store) leases(ctx context.Context, sess *gocql.Session, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	// Each key's partition as this call last wrote it, so a key met
	// again after another key's run starts from there.
	var known map[leaseKey]leasePart
	for i := 0; i < len(ops); {
		k := leaseKey{ops[i].Namespace, ops[i].Key}
		j := i + 1
		for j < len(ops) && ops[j].Namespace == k.namespace && ops[j].Key == k.key {
			j++
		}
		p, ok := known[k]
		p, err := s.leaseRun(ctx, sess, now, k, p, ok, ops[i:j], replies[i:j])
		if err != nil {
			return err
		}
		if j < len(ops) { // worth remembering only when more ops follow
			if known == nil {
				known = make(map[leaseKey]leasePart)
			}
			known[k] = p
		}
		i = j
	}
	return nil
}

// leaseRun applies ops, all of key k, in one step and returns the
// partition as it then is. p is the partition as this call left it when
// have is true; it is read otherwise.
func (s *Store) leaseRun(ctx context.Context, sess *gocql.Session, now int64, k leaseKey, p leasePart, have bool, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) (leasePart, error) {
	backoff := bucketBackoffMin // the buckets' pause: the same Paxos contention
	cons := s.rcons
	for {
		if !have {
			var err error
			if p, err = s.readLeases(ctx, sess, cons, k); err != nil {
				return p, err
			}
		}
		next := clustersync.LeaseSet{Live: maps.Clone(p.set.Live), Released: maps.Clone(p.set.Released)}
		for i, op := range ops {
			replies[i] = clustersync.ApplyLease(&next, now, op)
		}
		entries := s.leaseChanges(now, k, p.set, next)
		switch {
		case len(entries) == 0 && have:
			// Replies that change nothing come from a read, not from
			// this call's own earlier write, which another caller may
			// have followed.
			have = false
			continue
		case len(entries) == 0:
			return p, nil
		}
		// seq grows with the caller's clock too, so a partition that
		// expired and was made again does not reuse a seq that a slow
		// caller read before.
		q := leasePart{set: next, seq: max(p.seq+1, now)}
		applied, err := s.writeLeases(ctx, sess, now, k, p.seq, q, entries)
		if err != nil || applied {
			return q, err
		}
		// Another caller wrote first: read again at SERIAL, which
		// completes its transaction if still in flight.
		have, cons = false, gocql.Serial
		s.leaseRetries.Add(1)
		if err := sleep(ctx, rand.N(backoff)+1); err != nil {
			return p, err
		}
		backoff = min(2*backoff, bucketBackoffMax)
	}
}

// readLeases reads k's partition at consistency cons.
func (s *Store) readLeases(ctx context.Context, sess *gocql.Session, cons gocql.Consistency, k leaseKey) (leasePart, error) {
	p := leasePart{set: clustersync.LeaseSet{Live: map[string]int64{}, Released: map[string]int64{}}}
	s.leaseTrips.Add(1)
	iter := sess.Query(s.leaseCQL.read, k.namespace, []byte(k.key)).Consistency(cons).Idempotent(true).IterContext(ctx)
	var (
		id       []byte
		expiry   *int64 // null: the partition has its seq only
		released bool
		seq      int64
	)
	for iter.Scan(&id, &expiry, &released, &seq) {
		p.seq = seq
		switch {
		case expiry == nil:
		case released:
			p.set.Released[string(id)] = *expiry
		default:
			p.set.Live[string(id)] = *expiry
		}
		expiry = nil
	}
	return p, iter.Close()
}

// leaseChanges are the statements that turn k's leases from from (as
// read) into to. A row's TTL is its own time on the caller's clock, so
// nothing expires before its time there; a row missing from to (its
// time is past, though Cassandra may still hold it) is deleted.
func (s *Store) leaseChanges(now int64, k leaseKey, from, to clustersync.LeaseSet) []gocql.BatchEntry {
	var entries []gocql.BatchEntry
	ns, key, at := k.namespace, []byte(k.key), time.Unix(0, now)
	put := func(id string, t int64, released bool) {
		entries = append(entries, gocql.BatchEntry{Stmt: s.leaseCQL.put, Idempotent: true,
			Args: []any{ns, key, []byte(id), t, released, ttl(time.Unix(0, t), at)}})
	}
	for id, t := range to.Live {
		if was, ok := from.Live[id]; !ok || was != t {
			put(id, t, false)
		}
	}
	for id, t := range to.Released {
		if was, ok := from.Released[id]; !ok || was != t {
			put(id, t, true)
		}
	}
	for _, m := range []map[string]int64{from.Live, from.Released} {
		for id := range m {
			_, live := to.Live[id]
			_, released := to.Released[id]
			if !live && !released {
				entries = append(entries, gocql.BatchEntry{Stmt: s.leaseCQL.del, Idempotent: true, Args: []any{ns, key, []byte(id)}})
			}
		}
	}
	return entries
}

// writeLeases writes entries in one batch on the condition that k's seq
// is still seq (0: none) and sets it to q's, and reports whether it
// applied. seq lives until q's latest time.
func (s *Store) writeLeases(ctx context.Context, sess *gocql.Session, now int64, k leaseKey, seq int64, q leasePart, entries []gocql.BatchEntry) (bool, error) {
	ns, key, at := k.namespace, []byte(k.key), time.Unix(0, now)
	seqTTL := ttl(time.Unix(0, q.set.Expiry()), at)
	cond := gocql.BatchEntry{Stmt: s.leaseCQL.create, Idempotent: true, Args: []any{seqTTL, q.seq, ns, key}}
	if seq != 0 {
		cond = gocql.BatchEntry{Stmt: s.leaseCQL.bump, Idempotent: true, Args: []any{seqTTL, q.seq, ns, key, seq}}
	}
	b := sess.Batch(gocql.LoggedBatch).Consistency(s.wcons).SerialConsistency(gocql.Serial)
	b.Entries = append(append(b.Entries, cond), entries...)
	s.leaseTrips.Add(1)
	applied, iter, err := b.MapExecCASContext(ctx, make(map[string]any))
	if iter != nil {
		if cerr := iter.Close(); err == nil {
			err = cerr
		}
	}
	return applied, err
}
