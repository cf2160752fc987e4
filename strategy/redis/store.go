package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	gosync "sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	clustersync "github.com/limiterd/limiterd/sync"
)

// Client is the part of a go-redis client the Store uses: *redis.Client
// (standalone or Sentinel-managed), *redis.ClusterClient and *redis.Ring
// all satisfy it. The Store sends only EVALSHA, EVAL, HMGET and HGET, each
// routed by its (first) key; a synchronous call is one command, sent
// without a pipeline's overhead.
type Client interface {
	Pipeline() redis.Pipeliner
	Process(ctx context.Context, cmd redis.Cmder) error
}

const (
	// rowsPerRoundTrip bounds the rows (or windows) sent in one pipeline,
	// so a batch of n rows costs ⌈n / rowsPerRoundTrip⌉ round trips and
	// one round trip never holds the server for long.
	rowsPerRoundTrip = 1000
	// keysPerScript bounds the keys one script call touches.
	keysPerScript = 100
)

// Store is a clustersync.Store on Redis: standalone, Sentinel or Cluster.
// It also implements clustersync.PushFetcher and clustersync.AtomicAllower.
// It is safe for concurrent use.
//
// Rows are grouped by the hash that holds them (one per window and bucket,
// see keys.go). On a single server (the Client is a *redis.Client) one
// push script call covers up to keysPerScript rows of any hashes; on a
// cluster or ring it covers rows of hashes of one hash tag.
type Store struct {
	c      Client
	closer io.Closer // the client Open made; nil after New
	prefix string
	single bool
	closed atomic.Bool
	// rp caches the row prefix of the last incarnation asked for (a node
	// has one), sparing a synchronous call the allocation.
	rp atomic.Pointer[[2]string]
}

// rowPrefix returns rowPrefix(inc), cached.
func (s *Store) rowPrefix(inc string) string {
	if p := s.rp.Load(); p != nil && p[0] == inc {
		return p[1]
	}
	rp := rowPrefix(inc)
	s.rp.Store(&[2]string{inc, rp})
	return rp
}

// New returns a Store using c, with every Redis key starting with
// keyPrefix (DefaultKeyPrefix when empty; braces are escaped so they
// cannot break the hash tag). Close does not close c: the caller owns it.
//
// The Store honours ctx deadlines only if c does: build c with
// ContextTimeoutEnabled set, as Open does.
func New(c Client, keyPrefix string) *Store {
	if keyPrefix == "" {
		keyPrefix = DefaultKeyPrefix
	}
	_, single := c.(*redis.Client)
	return &Store{c: c, prefix: escapePrefix(keyPrefix), single: single}
}

// Close marks the store closed, so every later call returns
// clustersync.ErrClosed, and closes the client if Open made it.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return fmt.Errorf("redis: close: %w", clustersync.ErrClosed)
	}
	if s.closer != nil {
		if err := s.closer.Close(); err != nil {
			return fmt.Errorf("redis: close: %w", err)
		}
	}
	return nil
}

// Push stores rows for incarnation inc, each only if its version is newer
// than the stored one: ⌈len(rows)/1000⌉ pipelined round trips, at most
// two in flight.
func (s *Store) Push(ctx context.Context, inc string, rows []clustersync.Row) error {
	if s.closed.Load() {
		return fmt.Errorf("redis: push: %w", clustersync.ErrClosed)
	}
	return s.push(ctx, "push", inc, rows, nil)
}

// PushFetch pushes rows like Push and writes into others[i] what Fetch
// would return for rows[i].WindowKey, in the same round trip (one per
// 1000 rows).
func (s *Store) PushFetch(ctx context.Context, inc string, rows []clustersync.Row, others []int64) error {
	if s.closed.Load() {
		return fmt.Errorf("redis: pushfetch: %w", clustersync.ErrClosed)
	}
	if len(others) != len(rows) {
		return fmt.Errorf("redis: pushfetch: %d results for %d rows", len(others), len(rows))
	}
	return s.push(ctx, "pushfetch", inc, rows, others)
}

// Fetch writes into others[i] the sum of every incarnation's total but
// inc's for keys[i] (0 for an unknown window). It reads each hash's sum
// and row fields of its windows with one plain HMGET (no script: plain
// commands cost the server less), ⌈len(keys)/1000⌉ pipelined round trips,
// at most two in flight.
func (s *Store) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	if s.closed.Load() {
		return fmt.Errorf("redis: fetch: %w", clustersync.ErrClosed)
	}
	if len(others) != len(keys) {
		return fmt.Errorf("redis: fetch: %d results for %d keys", len(others), len(keys))
	}
	rp := s.rowPrefix(inc)
	return s.chunks(ctx, "fetch", len(keys), func(ctx context.Context, lo, hi int) error {
		ks := keys[lo:hi]
		g := s.group(len(ks), func(i int) *clustersync.WindowKey { return &ks[i] })
		// Every field name is a substring of one string, and every argument
		// a pointer into fields, so no argument is boxed on its own.
		var fb strings.Builder
		fb.Grow(len(ks) * (2 + len(rp) + 24))
		for _, i := range g.order {
			fb.WriteString(sumPrefix)
			fb.WriteString(ks[i].Key)
			fb.WriteString(rp)
			fb.WriteString(ks[i].Key)
		}
		all := fb.String()
		fields := make([]string, 2*len(ks))
		off := 0
		for j, i := range g.order {
			n := len(sumPrefix) + len(ks[i].Key)
			fields[2*j] = all[off : off+n]
			off += n
			n = len(rp) + len(ks[i].Key)
			fields[2*j+1] = all[off : off+n]
			off += n
		}
		args := make([]any, 0, 2*len(ks)+2*len(g.hashes))
		cmds := make([]*redis.SliceCmd, len(g.hashes))
		pipe := s.c.Pipeline()
		for h := range g.hashes {
			start := len(args)
			args = append(args, "hmget", g.hashes[h])
			for j := g.first[h]; j < g.first[h+1]; j++ {
				args = append(args, &fields[2*j], &fields[2*j+1])
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
				n, err := others1(sum, rowTotal(own))
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
	l := locator{prefix: s.prefix}
	k := l.key(&key)
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

// Allow decides req in one Lua script over the current and previous
// window of every limit, exactly as clustersync.AtomicAllower specifies.
// All rows of req must be windows of one (namespace, key): on a cluster
// they then share a hash slot.
func (s *Store) Allow(ctx context.Context, req clustersync.AllowRequest) (clustersync.AllowResult, error) {
	if s.closed.Load() {
		return clustersync.AllowResult{}, fmt.Errorf("redis: allow: %w", clustersync.ErrClosed)
	}
	n := len(req.Limits)
	if n == 0 {
		return clustersync.AllowResult{Allowed: true}, nil
	}
	// As in pushKey: one string holds the 2n hash keys, the sum and row
	// fields, and per limit the prev row and the hinted cur row; the
	// numbers point into vals.
	first := &req.Limits[0].Cur
	rp := s.rowPrefix(req.Inc)
	e := make([]int, 2*n+2+2*n)
	b := make([]byte, 0, 2*n*hashKeyLen(s.prefix, first.Namespace)+1+2*len(first.Key)+len(rp)+2*n*(3*20+2))
	b = appendKeyHashes(b, s.prefix, first.Namespace, first.Key, e[:2*n], func(i int) (int64, int64) {
		l := &req.Limits[i/2]
		if i%2 == 0 {
			return int64(l.Cur.Size), l.Cur.Start
		}
		return int64(l.Prev.Size), l.Prev.Start
	})
	b = appendFields(b, rp, first.Key, e[2*n:2*n+2])
	vals := make([]int64, 1+11*n)
	for i := range req.Limits {
		l := &req.Limits[i]
		v := vals[1+11*i : 12+11*i : 12+11*i]
		v[0], v[1], v[2] = l.Limit, int64(l.Size), req.At-l.Cur.Start
		v[3], v[4], v[5], v[6] = l.Cur.Total, l.Cur.Total+req.Cost, l.Cur.Version, expireArg(&l.Cur)
		v[7], v[8], v[9] = l.Prev.Total, l.Prev.Version, expireArg(&l.Prev)
		b = appendRow(b, v[7], v[8], v[9])
		e[2*n+2+2*i] = len(b)
		e[2*n+3+2*i] = len(b)
	}
	str := cut(string(b), e)
	args := make([]any, 0, 3+2*n+4+13*n)
	args = append(args, "evalsha", &allowScript.sha, 2*n, str[0]) // routed by the first key, a string
	for i := 1; i < 2*n+2; i++ {
		args = append(args, &str[i])
	}
	countRejected := "0"
	if req.CountRejected {
		countRejected = "1"
	}
	vals[0] = req.Cost
	args = append(args, &vals[0], countRejected)
	for i := range req.Limits {
		v := vals[1+11*i : 12+11*i : 12+11*i]
		for j := range 10 {
			args = append(args, &v[j])
		}
		args = append(args, &str[2*n+2+2*i], &str[2*n+3+2*i], &v[10])
	}
	call := scriptCall{args: args, lo: 0, hi: n, ints: true}
	if err := s.runOne(ctx, allowScript, &call); err != nil {
		return clustersync.AllowResult{}, s.fail("allow", err)
	}
	vals, err := call.cmd.(*redis.IntSliceCmd).Result()
	if err != nil || len(vals) != 1+4*n {
		return clustersync.AllowResult{}, fmt.Errorf("redis: allow: unexpected reply %v (%v)", vals, err)
	}
	res := clustersync.AllowResult{Allowed: vals[0] == 1, Others: make([][2]int64, n)}
	for i := range res.Others {
		v := vals[1+4*i:]
		res.Others[i] = [2]int64{v[0] - v[1], v[2] - v[3]}
	}
	return res, nil
}

// expireArg is r's expiry as the scripts take it: Unix ms, 0 for none.
func expireArg(r *clustersync.Row) int64 {
	if r.ExpireAt.IsZero() {
		return 0
	}
	return expireMs(r)
}

// rowTotal returns the total of a stored row "<total>:<version>:<expiry>"
// ("" for none).
func rowTotal(row string) string {
	t, _, _ := strings.Cut(row, ":")
	return t
}

// others1 returns a window's sum minus one incarnation's total, both
// decimal ("" reads 0).
func others1(sum, own string) (int64, error) {
	s, err1 := parseInt(sum)
	o, err2 := parseInt(own)
	return s - o, errors.Join(err1, err2)
}

func parseInt(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("unexpected stored number %q", s)
	}
	return n, nil
}

// expireMs is r.ExpireAt in Unix milliseconds, rounded up.
func expireMs(r *clustersync.Row) int64 {
	ms := r.ExpireAt.UnixMilli()
	if r.ExpireAt.Nanosecond()%1_000_000 != 0 {
		ms++
	}
	return ms
}

// scriptCall is one script call over windows [lo, hi) of a batch.
type scriptCall struct {
	lo, hi int
	args   []any // "evalsha", sha, numkeys, keys…, argv…
	ints   bool  // the reply is an array of decimal integers
	cmd    redis.Cmder
}

func (c *scriptCall) newCmd(ctx context.Context) redis.Cmder {
	if c.ints {
		return redis.NewIntSliceCmd(ctx, c.args...)
	}
	return redis.NewCmd(ctx, c.args...)
}

// inFlight is the most pipelines one call keeps in flight, so the client
// encodes and decodes one while the server executes the other.
const inFlight = 2

// chunks runs fn over consecutive ranges [lo, hi) of at most
// rowsPerRoundTrip of n items, at most inFlight at once, and returns the
// first error. fn must wrap its errors.
func (s *Store) chunks(ctx context.Context, op string, n int, fn func(ctx context.Context, lo, hi int) error) error {
	if n <= rowsPerRoundTrip {
		if n == 0 {
			return nil
		}
		return fn(ctx, 0, n)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    gosync.Mutex
		first error
		wg    gosync.WaitGroup
		sem   = make(chan struct{}, inFlight)
	)
	for lo := 0; lo < n && cctx.Err() == nil; lo += rowsPerRoundTrip {
		select {
		case sem <- struct{}{}:
		case <-cctx.Done():
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(cctx, lo, min(lo+rowsPerRoundTrip, n)); err != nil {
				mu.Lock()
				if first == nil {
					first = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = s.fail(op, ctx.Err())
	}
	return first
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
	loc := locator{prefix: s.prefix}
	ids := make([]hashID, 0, min(n, buckets))
	var at map[hashID]int // past a few hashes; a scan finds the first ones
	of := make([]int, n)  // window i is in ids[of[i]]
	for i := range n {
		id := loc.id(key(i))
		h := -1
		if at != nil {
			if j, ok := at[id]; ok {
				h = j
			}
		} else {
			for j := range ids {
				if ids[j] == id {
					h = j
					break
				}
			}
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
		buf = loc.appendKey(buf[:0], &ids[h])
		g.hashes[p] = string(buf)
		g.tag[p] = p
		if p > 0 && ids[h].namespace == ids[hs[p-1]].namespace && ids[h].bucket == ids[hs[p-1]].bucket {
			g.tag[p] = g.tag[p-1]
		}
	}
	return g
}

// push runs pushScript over rows in pipelined chunks: on a single server
// up to keysPerScript rows per call, else one call per run of hashes of one
// hash tag. When others is not nil it receives, per row, the others' sum.
func (s *Store) push(ctx context.Context, op, inc string, rows []clustersync.Row, others []int64) error {
	rp := s.rowPrefix(inc)
	if oneKey(rows) {
		return s.pushKey(ctx, op, rp, rows, others)
	}
	return s.chunks(ctx, op, len(rows), func(ctx context.Context, lo, hi int) error {
		rs := rows[lo:hi]
		var o []int64
		if others != nil {
			o = others[lo:hi]
		}
		return s.pushChunk(ctx, op, rp, rs, o)
	})
}

func (s *Store) pushChunk(ctx context.Context, op, rp string, rows []clustersync.Row, others []int64) error {
	const perRow = 5 // hash index, key, total, version, expiry
	n := len(rows)
	g := s.group(n, func(i int) *clustersync.WindowKey { return &rows[i].WindowKey })
	// One call covers whole hashes, up to keysPerScript rows unless one
	// hash has more, of one tag on a cluster and of any tags on one server.
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
	cs = splitRepeats(cs, g, rows)
	vals := make([]int64, 4*n) // per row: hash index in its call (1-based), total, version, expiry
	args := make([]any, 0, 1+perRow*n+5*len(cs))
	calls := make([]scriptCall, len(cs))
	for ci, c := range cs {
		start := len(args)
		args = append(args, "evalsha", &pushScript.sha, c.h1-c.h0, g.hashes[c.h0])
		for h := c.h0 + 1; h < c.h1; h++ {
			args = append(args, &g.hashes[h])
		}
		args = append(args, &rp)
		for h := c.h0; h < c.h1; h++ {
			for j := max(g.first[h], c.j0); j < min(g.first[h+1], c.j1); j++ {
				r := &rows[g.order[j]]
				v := vals[4*j : 4*j+4 : 4*j+4]
				v[0], v[1], v[2] = int64(h-c.h0+1), r.Total, r.Version
				if !r.ExpireAt.IsZero() {
					v[3] = expireMs(r)
				}
				args = append(args, &v[0], &r.Key, &v[1], &v[2], &v[3])
			}
		}
		calls[ci] = scriptCall{args: args[start:len(args):len(args)], lo: c.j0, hi: c.j1, ints: true}
	}
	if err := s.run(ctx, pushScript, calls); err != nil {
		return s.fail(op, err)
	}
	for _, c := range calls {
		vals, err := c.cmd.(*redis.IntSliceCmd).Result()
		if err != nil || len(vals) != 2*(c.hi-c.lo) {
			return fmt.Errorf("redis: %s: unexpected reply %v (%v)", op, vals, err)
		}
		if others == nil {
			continue
		}
		for j := c.lo; j < c.hi; j++ {
			y := 2 * (j - c.lo)
			others[g.order[j]] = vals[y] - vals[y+1]
		}
	}
	return nil
}

// maxKeyRows bounds the rows oneKey looks at: a synchronous call sends
// two per window size.
const maxKeyRows = 16

// oneKey reports whether rows are distinct windows of one (namespace, key),
// as a synchronous call sends them, which keyScript takes in one call.
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

// pushKey pushes the windows of one key with one keyScript call; on a
// cluster they share a slot. The fields and rows go ready-made (see
// keyScript).
func (s *Store) pushKey(ctx context.Context, op, rp string, rows []clustersync.Row, others []int64) error {
	n := len(rows)
	key := rows[0].Key
	// One string holds, in turn, the n hash keys, the sum and row fields,
	// and per window its row, expiry and hinted row.
	var ends [2 + 4*maxKeyRows]int
	e := ends[:2+4*n]
	b := make([]byte, 0, n*(hashKeyLen(s.prefix, rows[0].Namespace)+2*(3*20+2)+20)+1+2*len(key)+len(rp))
	b = appendKeyHashes(b, s.prefix, rows[0].Namespace, key, e[:n], func(i int) (int64, int64) {
		return int64(rows[i].Size), rows[i].Start
	})
	b = appendFields(b, rp, key, e[n:n+2])
	vals := make([]int64, 2*n) // per window: total, hinted total
	for i := range rows {
		r := &rows[i]
		exp := expireArg(r)
		w := e[n+2+3*i : n+5+3*i]
		b = appendRow(b, r.Total, r.Version, exp)
		w[0] = len(b)
		b = strconv.AppendInt(b, exp, 10)
		w[1] = len(b)
		vals[2*i] = r.Total
		w[2] = len(b)
	}
	str := cut(string(b), e)
	args := make([]any, 0, 3+n+2+5*n)
	args = append(args, "evalsha", &keyScript.sha, n, str[0]) // routed by the first key, a string
	for i := 1; i < n+2; i++ {
		args = append(args, &str[i])
	}
	for i := range rows {
		w := str[n+2+3*i : n+5+3*i]
		args = append(args, &w[0], &vals[2*i], &w[1], &w[2], &vals[2*i+1])
	}
	call := scriptCall{args: args, lo: 0, hi: n, ints: true}
	if err := s.runOne(ctx, keyScript, &call); err != nil {
		return s.fail(op, err)
	}
	got, err := call.cmd.(*redis.IntSliceCmd).Result()
	if err != nil || len(got) != 2*n {
		return fmt.Errorf("redis: %s: unexpected reply %v (%v)", op, got, err)
	}
	for i := range others {
		others[i] = got[2*i] - got[2*i+1]
	}
	return nil
}

// hintLimit bounds the totals of a hinted row: keyScript and allowScript
// add them in doubles, exact below 2^53.
const hintLimit = 1e15

// appendFields appends key's sum field and its row field under row
// prefix rp, and sets ends to where each ends in b.
func appendFields(b []byte, rp, key string, ends []int) []byte {
	b = append(append(b, sumPrefix...), key...)
	ends[0] = len(b)
	b = append(append(b, rp...), key...)
	ends[1] = len(b)
	return b
}

// appendRow appends a stored row "<total>:<version>:<expiry>".
func appendRow(b []byte, total, version, exp int64) []byte {
	b = strconv.AppendInt(b, total, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, version, 10)
	b = append(b, ':')
	return strconv.AppendInt(b, exp, 10)
}

// pushCall is one script call of pushChunk: hashes [h0, h1), rows
// order[j0:j1] (the first and last hash may be cut).
type pushCall struct{ h0, h1, j0, j1 int }

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

// run sends calls of sc in one pipeline, then re-sends those that failed
// with NOSCRIPT (the server lost or never had the script) as EVAL in a
// second one. It returns the first error of any call.
func (s *Store) run(ctx context.Context, sc *script, calls []scriptCall) error {
	pipe := s.c.Pipeline()
	for i := range calls {
		calls[i].cmd = calls[i].newCmd(ctx)
		_ = pipe.Process(ctx, calls[i].cmd)
	}
	_, err := pipe.Exec(ctx)
	if err != nil && !redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A connection failure may leave the commands without an error of
		// their own (go-redis sets none once its retries are exhausted).
		return err
	}
	var retry redis.Pipeliner
	for i := range calls {
		if err := calls[i].cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			if retry == nil {
				retry = s.c.Pipeline()
			}
			a := calls[i].args
			a[0], a[1] = "eval", sc.src
			calls[i].cmd = calls[i].newCmd(ctx)
			_ = retry.Process(ctx, calls[i].cmd)
		}
	}
	if retry != nil {
		if _, err := retry.Exec(ctx); err != nil {
			return err
		}
	}
	for i := range calls {
		if err := calls[i].cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// runOne is run for one call, sent as a plain command.
func (s *Store) runOne(ctx context.Context, sc *script, call *scriptCall) error {
	call.cmd = call.newCmd(ctx)
	err := s.c.Process(ctx, call.cmd)
	if err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return err
	}
	call.args[0], call.args[1] = "eval", sc.src
	call.cmd = call.newCmd(ctx)
	return s.c.Process(ctx, call.cmd)
}

// fail wraps err from operation op: clustersync.ErrClosed once the client
// is closed; a reply error of the server that retrying cannot cure (a
// script or type error, refused credentials) as is; anything else — no
// connection, a timeout, ctx done, a server loading, failing over or out
// of memory — with clustersync.ErrUnavailable.
func (s *Store) fail(op string, err error) error {
	if errors.Is(err, redis.ErrClosed) || s.closed.Load() {
		return fmt.Errorf("redis: %s: %w: %w", op, clustersync.ErrClosed, err)
	}
	var re redis.Error
	if errors.As(err, &re) && !transient(re) {
		return fmt.Errorf("redis: %s: %w", op, err)
	}
	return fmt.Errorf("redis: %s: %w: %w", op, clustersync.ErrUnavailable, err)
}

// transient reports whether a server reply error is one a later retry may
// not see: the server is loading, failing over, busy, out of memory, or
// the cluster is reconfiguring.
func transient(err redis.Error) bool {
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	for _, p := range []string{
		"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY",
		"OOM", "NOREPLICAS", "MOVED", "ASK", "NOSCRIPT", "max number of clients",
	} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}
