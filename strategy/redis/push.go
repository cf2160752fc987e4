package redis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	clustersync "github.com/limiterd/limiterd/sync"
)

const (
	// rowsPerRoundTrip bounds the rows (or windows) sent in one pipeline,
	// so a batch of n rows costs ⌈n / rowsPerRoundTrip⌉ round trips and
	// one round trip never holds the server for long.
	rowsPerRoundTrip = 1000
	// keysPerScript bounds the rows one push script call takes.
	keysPerScript = 100
	// inFlight is the most pipelines one call keeps in flight, so the
	// client encodes and decodes one while the server executes the other.
	inFlight = 2
	// maxKeyRows bounds the rows oneKey looks at: a synchronous call sends
	// two per window size.
	maxKeyRows = 16
)

// Push stores rows for incarnation inc, each only if its version is newer
// than the stored one: ⌈len(rows)/1000⌉ pipelined round trips, at most
// two in flight.
func (s *Store) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	return s.push(ctx, "push", inc, rows, nil)
}

// PushFetch pushes rows like Push and writes into others[i] what Fetch
// would return for rows[i].WindowKey, in the same round trip (one per
// 1000 rows).
func (s *Store) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	if len(others) != len(rows) {
		return fmt.Errorf("redis: pushfetch: %d results for %d rows", len(others), len(rows))
	}
	return s.push(ctx, "pushfetch", inc, rows, others)
}

// Fetch writes into others[i] the sum of every incarnation's total but
// inc's for keys[i] (0 for an unknown window): ⌈len(keys)/1000⌉
// pipelined round trips, at most two in flight. It reads each hash's sum
// and row fields of its windows with one plain HMGET: plain commands cost
// the server less than a script.
func (s *Store) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	if s.closed.Load() {
		return fmt.Errorf("redis: fetch: %w", clustersync.ErrClosed)
	}
	if len(others) != len(keys) {
		return fmt.Errorf("redis: fetch: %d results for %d keys", len(others), len(keys))
	}
	rp := s.rowPrefix(inc)
	return s.chunks(ctx, "fetch", len(keys), rowsPerRoundTrip, func(ctx context.Context, lo, hi int) error {
		ks := keys[lo:hi]
		g := s.group(len(ks), func(i int) *clustersync.WindowKey { return &ks[i] })
		// Per window its sum and row field, in g's order: hash h's are
		// fields[2*first[h] : 2*first[h+1]].
		fields := make([]string, 2*len(ks))
		fs := newStrs(len(ks)*(len(sumPrefix)+len(rp)+2*24), len(fields))
		for j, i := range g.order {
			fs.appendFields(rp, ks[i].Key, &fields[2*j], &fields[2*j+1])
		}
		fs.done()
		args := make([]any, 0, len(fields)+2*len(g.hashes))
		cmds := make([]*redis.SliceCmd, len(g.hashes))
		pipe := s.c.Pipeline()
		for h := range g.hashes {
			start := len(args)
			args = append(args, "hmget", g.hashes[h])
			for f := 2 * g.first[h]; f < 2*g.first[h+1]; f++ {
				args = append(args, &fields[f])
			}
			cmds[h] = redis.NewSliceCmd(ctx, args[start:len(args):len(args)]...)
			_ = pipe.Process(ctx, cmds[h])
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return s.fail("fetch", err)
		}
		for h, cmd := range cmds {
			v := cmd.Val()
			if len(v) != 2*(g.first[h+1]-g.first[h]) {
				return fmt.Errorf("redis: fetch: unexpected reply %v", v)
			}
			for j := g.first[h]; j < g.first[h+1]; j++ {
				y := 2 * (j - g.first[h])
				sum, _ := v[y].(string)
				own, _ := v[y+1].(string)
				n, err := others1(sum, own)
				if err != nil {
					return fmt.Errorf("redis: fetch: %w", err)
				}
				others[lo+g.order[j]] = n
			}
		}
		return nil
	})
}

// Window returns the sum of every incarnation's total for key (0 for an
// unknown window).
func (s *Store) Window(ctx context.Context, key clustersync.WindowKey) (int64, error) {
	if s.closed.Load() {
		return 0, fmt.Errorf("redis: window: %w", clustersync.ErrClosed)
	}
	k := redisKey(s.prefix, &key)
	pipe := s.c.Pipeline()
	cmd := pipe.HGet(ctx, k, sumPrefix+key.Key)
	_, err := pipe.Exec(ctx)
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, s.fail("window", err)
	}
	n, err := parseInt(cmd.Val())
	if err != nil {
		return 0, fmt.Errorf("redis: window: key %q: %w", k, err)
	}
	return n, nil
}

// chunks runs fn over consecutive ranges [lo, hi) of at most per of n
// items, at most inFlight at once, and returns the first error. fn must
// wrap its errors.
func (s *Store) chunks(ctx context.Context, op string, n, per int, fn func(ctx context.Context, lo, hi int) error) error {
	if n <= per {
		if n == 0 {
			return nil
		}
		return fn(ctx, 0, n)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(inFlight)
	for lo := 0; lo < n && gctx.Err() == nil; lo += per {
		g.Go(func() error { return fn(gctx, lo, min(lo+per, n)) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return s.fail(op, err)
	}
	return nil
}

// grouping is a batch of windows ordered by the hash holding them.
type grouping struct {
	order  []int    // window indices, grouped by hash
	hashes []string // the Redis keys of the hashes, in order
	first  []int    // hash h holds order[first[h]:first[h+1]]
	tag    []int    // per hash, a number equal for hashes of one hash tag
}

// group orders n windows (key(i) is window i) by the hash holding them,
// hashes of one hash tag next to each other, each hash's windows in their
// original order.
func (s *Store) group(n int, key func(i int) *clustersync.WindowKey) grouping {
	ids := make([]hashID, 0, min(n, buckets))
	var at map[hashID]int // past a few hashes; a scan finds the first ones
	of := make([]int, n)  // window i is in ids[of[i]]
	for i := range n {
		id := hashOf(key(i))
		h := -1
		if at != nil {
			if j, ok := at[id]; ok {
				h = j
			}
		} else {
			h = slices.Index(ids, id)
		}
		if h < 0 {
			h = len(ids)
			ids = append(ids, id)
			if at == nil && len(ids) > 8 {
				at = make(map[hashID]int, min(n, 4*buckets))
				for j := range ids {
					at[ids[j]] = j
				}
			} else if at != nil {
				at[id] = h
			}
		}
		of[i] = h
	}
	// Hashes by (namespace, bucket): one hash tag per run.
	hs := make([]int, len(ids))
	for h := range hs {
		hs[h] = h
	}
	slices.SortStableFunc(hs, func(a, b int) int {
		if c := strings.Compare(ids[a].namespace, ids[b].namespace); c != 0 {
			return c
		}
		return ids[a].bucket - ids[b].bucket
	})
	pos := make([]int, len(ids)) // hash h is the pos[h]-th in order
	for p, h := range hs {
		pos[h] = p
	}
	g := grouping{order: make([]int, n), hashes: make([]string, len(ids)), first: make([]int, len(ids)+1), tag: make([]int, len(ids))}
	for _, h := range of {
		g.first[pos[h]+1]++
	}
	for p := range hs {
		g.first[p+1] += g.first[p]
	}
	next := slices.Clone(g.first[:len(ids)])
	for i, h := range of {
		g.order[next[pos[h]]] = i
		next[pos[h]]++
	}
	var buf []byte
	for p, h := range hs {
		buf = appendKey(buf[:0], s.prefix, &ids[h])
		g.hashes[p] = string(buf)
		g.tag[p] = p
		if p > 0 && ids[h].namespace == ids[hs[p-1]].namespace && ids[h].bucket == ids[hs[p-1]].bucket {
			g.tag[p] = g.tag[p-1]
		}
	}
	return g
}

// push runs the push script over rows, grouped by hash across the whole
// batch (so a hash's rows, and a change log's, go in as few calls as
// they can): on a single server up to keysPerScript rows per call, else
// one call per run of hashes of one hash tag; the windows of one key go
// in one call of the key script. The calls go in pipelines of about
// rowsPerRoundTrip rows, at most inFlight at once. When others is not
// nil it receives, per row, the others' sum.
func (s *Store) push(ctx context.Context, op, inc string, rows []clustersync.Row, others []int64) error {
	if s.closed.Load() {
		return fmt.Errorf("redis: %s: %w", op, clustersync.ErrClosed)
	}
	rp := s.rowPrefix(inc)
	if oneKey(rows) {
		return s.pushKey(ctx, op, rp, rows, others)
	}
	if len(rows) == 0 {
		return nil
	}
	g := s.group(len(rows), func(i int) *clustersync.WindowKey { return &rows[i].WindowKey })
	cs := splitRepeats(s.pushCalls(&g), g, rows)
	// Pipelines: runs of calls of about rowsPerRoundTrip rows.
	var runs [][]pushCall
	for lo := 0; lo < len(cs); {
		hi, n := lo, 0
		for hi < len(cs) && (hi == lo || n+cs[hi].j1-cs[hi].j0 <= rowsPerRoundTrip) {
			n += cs[hi].j1 - cs[hi].j0
			hi++
		}
		runs = append(runs, cs[lo:hi])
		lo = hi
	}
	return s.chunks(ctx, op, len(runs), 1, func(ctx context.Context, lo, _ int) error {
		return s.pushRun(ctx, op, rp, &g, runs[lo], rows, others)
	})
}

// pushCalls splits grouped rows into push script calls: each covers
// whole hashes, up to keysPerScript rows unless one hash has more, of one
// tag on a cluster and of any tags on one server.
func (s *Store) pushCalls(g *grouping) []pushCall {
	var cs []pushCall
	for h := 0; h < len(g.hashes); {
		c := pushCall{h0: h, h1: h, j0: g.first[h], j1: g.first[h]}
		for h < len(g.hashes) && (c.h1 == c.h0 || s.single || g.tag[h] == g.tag[c.h0]) {
			if c.h1 > c.h0 && c.j1-c.j0+(g.first[h+1]-g.first[h]) > keysPerScript {
				break
			}
			c.h1, c.j1 = h+1, g.first[h+1]
			h++
			if c.j1-c.j0 >= keysPerScript {
				break
			}
		}
		cs = append(cs, c)
	}
	return cs
}

// pushRun runs calls cs in one pipeline.
func (s *Store) pushRun(ctx context.Context, op, rp string, g *grouping, cs []pushCall, rows []clustersync.Row, others []int64) error {
	calls := make([]scriptCall, len(cs))
	for i, c := range cs {
		calls[i] = encodePush(g, c, &rp, rows, others != nil)
	}
	if err := runScripts(ctx, s.c, pushScript, calls); err != nil {
		return s.fail(op, err)
	}
	if others == nil {
		// A plain push: the script replied only its number of rows.
		for i, c := range cs {
			if n, err := calls[i].cmd.Int64(); err != nil || n != int64(c.j1-c.j0) {
				return fmt.Errorf("redis: %s: unexpected reply %v for %d rows", op, calls[i].cmd.Val(), c.j1-c.j0)
			}
		}
		return nil
	}
	var o []int64
	for i, c := range cs {
		reply, err := calls[i].cmd.Int64Slice()
		o = slices.Grow(o[:0], c.j1-c.j0)[:c.j1-c.j0]
		if err == nil {
			err = decodeRows(reply, len(o), o)
		}
		if err != nil {
			return fmt.Errorf("redis: %s: %w", op, err)
		}
		for j := c.j0; j < c.j1; j++ {
			others[g.order[j]] = o[j-c.j0]
		}
	}
	return nil
}

// oneKey reports whether rows are distinct windows of one (namespace, key),
// as a synchronous call sends them, which the key script takes in one call.
func oneKey(rows []clustersync.Row) bool {
	if len(rows) == 0 || len(rows) > maxKeyRows {
		return false
	}
	for i := range rows {
		r := &rows[i]
		if r.Namespace != rows[0].Namespace || r.Key != rows[0].Key {
			return false
		}
		for j := range i {
			if rows[j].Size == r.Size && rows[j].Start == r.Start {
				return false
			}
		}
	}
	return true
}

// pushKey pushes the windows of one key with one key script call; on a
// cluster they share a slot.
func (s *Store) pushKey(ctx context.Context, op, rp string, rows []clustersync.Row, others []int64) error {
	call := encodeKey(s.prefix, rp, rows)
	reply, err := keyScript.Run(ctx, scripter{s.c}, call.keys, call.args...).Int64Slice()
	if err != nil {
		return s.fail(op, err)
	}
	if err := decodeRows(reply, len(rows), others); err != nil {
		return fmt.Errorf("redis: %s: %w", op, err)
	}
	return nil
}

// splitRepeats splits calls so that no call holds one window twice: the
// script reads every row of a hash before it writes, so a repeated window
// must go in a later call (the pipeline keeps the order). The Syncer never
// repeats a window; other callers may.
func splitRepeats(cs []pushCall, g grouping, rows []clustersync.Row) []pushCall {
	var seen map[string]struct{}
	out := cs[:0:0]
	for _, c := range cs {
		for h := c.h0; h < c.h1; h++ {
			lo, hi := max(g.first[h], c.j0), min(g.first[h+1], c.j1)
			if hi-lo < 2 {
				continue
			}
			if seen == nil {
				seen = make(map[string]struct{}, hi-lo)
			}
			clear(seen)
			for j := lo; j < hi; j++ {
				k := rows[g.order[j]].Key
				if _, ok := seen[k]; ok {
					// Row j starts the next call.
					out = append(out, pushCall{c.h0, h + 1, c.j0, j})
					c.h0, c.j0 = h, j
					clear(seen)
				}
				seen[k] = struct{}{}
			}
		}
		out = append(out, c)
	}
	return out
}
