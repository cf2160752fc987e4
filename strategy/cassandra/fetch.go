package cassandra

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	clustersync "github.com/limiterd/limiterd/sync"
)

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
