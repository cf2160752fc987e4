package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
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
// routed by its (first) key.
type Client interface {
	Pipeline() redis.Pipeliner
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
// On a single server (the Client is a *redis.Client) one push script call
// covers up to keysPerScript windows of any keys; on a cluster or ring
// (any other Client) one call covers consecutive windows of one
// (namespace, key), which share a hash slot.
type Store struct {
	c      Client
	closer io.Closer // the client Open made; nil after New
	prefix string
	single bool
	closed atomic.Bool
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
	f := field(inc)
	return s.chunks(ctx, "push", len(rows), func(ctx context.Context, lo, hi int) error {
		return s.scripts(ctx, "push", pushScript, f, rows[lo:hi], nil)
	})
}

// Fetch writes into others[i] the sum of every incarnation's total but
// inc's for keys[i] (0 for an unknown window). It reads each window's sum
// field and inc's row with one HMGET per window, ⌈len(keys)/1000⌉
// pipelined round trips, at most two in flight. Plain pipelined commands
// cost the server less than a script reading the same windows, whose every
// redis.call carries the scripting layer's overhead.
func (s *Store) Fetch(ctx context.Context, inc string, keys []clustersync.WindowKey, others []int64) error {
	if s.closed.Load() {
		return fmt.Errorf("redis: fetch: %w", clustersync.ErrClosed)
	}
	if len(others) != len(keys) {
		return fmt.Errorf("redis: fetch: %d results for %d keys", len(others), len(keys))
	}
	var f any = field(inc) // boxed once for every command
	return s.chunks(ctx, "fetch", len(keys), func(ctx context.Context, lo, hi int) error {
		n := hi - lo
		kb := keyBuilder{prefix: s.prefix}
		buf := make([]byte, 0, n*(len(s.prefix)+64))
		args := make([]any, 4*n)
		cmds := make([]*redis.SliceCmd, n)
		pipe := s.c.Pipeline()
		for i := range n {
			start := len(buf)
			buf, _ = kb.append(buf, &keys[lo+i])
			a := args[4*i : 4*i+4 : 4*i+4]
			a[0], a[1], a[2], a[3] = "hmget", buf[start:len(buf):len(buf)], sumField, f
			cmds[i] = redis.NewSliceCmd(ctx, a...)
			_ = pipe.Process(ctx, cmds[i])
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return s.fail("fetch", err)
		}
		for j, cmd := range cmds {
			v := cmd.Val()
			if len(v) != 2 {
				return fmt.Errorf("redis: fetch: unexpected reply %v", v)
			}
			sum, _ := v[0].(string)
			own, _ := v[1].(string)
			n, err := others1(sum, rowTotal(own))
			if err != nil {
				return fmt.Errorf("redis: fetch: %w", err)
			}
			others[lo+j] = n
		}
		return nil
	})
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
	f := field(inc)
	return s.chunks(ctx, "pushfetch", len(rows), func(ctx context.Context, lo, hi int) error {
		return s.scripts(ctx, "pushfetch", pushFetchScript, f, rows[lo:hi], others[lo:hi])
	})
}

// Window returns the sum of every incarnation's total for key (0 for an
// unknown window).
func (s *Store) Window(ctx context.Context, key clustersync.WindowKey) (int64, error) {
	if s.closed.Load() {
		return 0, fmt.Errorf("redis: window: %w", clustersync.ErrClosed)
	}
	kb := keyBuilder{prefix: s.prefix}
	k, _ := kb.build(&key)
	pipe := s.c.Pipeline()
	cmd := pipe.HGet(ctx, k, sumField)
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
	kb := keyBuilder{prefix: s.prefix}
	// As in scripts: arguments point into keys and vals, not boxed one by one.
	keys := make([]string, 2*n+1)
	vals := make([]int64, 1+10*n)
	args := make([]any, 0, 3+2*n+3+10*n)
	args = append(args, "evalsha", &allowScript.sha, 2*n)
	for i := range req.Limits {
		l := &req.Limits[i]
		keys[2*i], _ = kb.build(&l.Cur.WindowKey)
		keys[2*i+1], _ = kb.build(&l.Prev.WindowKey)
		if i == 0 {
			args = append(args, keys[0], &keys[1]) // routed by the first key, a string
		} else {
			args = append(args, &keys[2*i], &keys[2*i+1])
		}
	}
	countRejected := "0"
	if req.CountRejected {
		countRejected = "1"
	}
	keys[2*n] = field(req.Inc)
	vals[0] = req.Cost
	args = append(args, &keys[2*n], &vals[0], countRejected)
	for i := range req.Limits {
		l := &req.Limits[i]
		v := vals[1+10*i : 11+10*i : 11+10*i]
		v[0], v[1], v[2] = l.Limit, int64(l.Size), req.At-l.Cur.Start
		v[3], v[4], v[5], v[6] = l.Cur.Total, l.Cur.Total+req.Cost, l.Cur.Version, expireArg(&l.Cur)
		v[7], v[8], v[9] = l.Prev.Total, l.Prev.Version, expireArg(&l.Prev)
		for j := range v {
			args = append(args, &v[j])
		}
	}
	calls := []scriptCall{{args: args, lo: 0, hi: n, ints: true}}
	if err := s.run(ctx, allowScript, calls); err != nil {
		return clustersync.AllowResult{}, s.fail("allow", err)
	}
	vals, err := calls[0].cmd.(*redis.IntSliceCmd).Result()
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

// sumField is the hash field holding the sum of a window's totals; the
// rows of incarnations are in fields "+" + inc, so no row can take it.
const sumField = "="

// field returns the hash field of incarnation inc's rows.
func field(inc string) string { return "+" + inc }

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

// scripts runs sc over rows in one pipeline: on a single server up to
// keysPerScript windows per call, else one call per run of windows of one
// (namespace, key). ARGV is field, then each row's total, version and
// expiry (Unix ms, 0 for none). When others is not nil the script returns
// (window sum, own total) per window and others receives their difference.
//
// The keys are substrings of one string and every argument is a pointer
// into keys, vals or the script, so building the pipeline allocates a few
// slices, not one boxed value per argument; replies are read as integers.
func (s *Store) scripts(ctx context.Context, op string, sc *script, field string, rows []clustersync.Row, others []int64) error {
	const perRow = 3 // total, version, expiry
	n := len(rows)
	kb := keyBuilder{prefix: s.prefix}
	buf := make([]byte, 0, n*(len(s.prefix)+64))
	ends := make([]int, n)
	same := make([]bool, n)
	for i := range rows {
		buf, same[i] = kb.append(buf, &rows[i].WindowKey)
		ends[i] = len(buf)
	}
	all := string(buf)
	keys := make([]string, n)
	vals := make([]int64, perRow*n)
	for i := range rows {
		r := &rows[i]
		lo := 0
		if i > 0 {
			lo = ends[i-1]
		}
		keys[i] = all[lo:ends[i]]
		vals[perRow*i], vals[perRow*i+1] = r.Total, r.Version
		if !r.ExpireAt.IsZero() {
			vals[perRow*i+2] = expireMs(r)
		}
	}
	var calls []scriptCall
	for lo := 0; lo < n; {
		hi := lo + 1
		for hi < n && hi-lo < keysPerScript && (s.single || same[hi]) {
			hi++
		}
		calls = append(calls, scriptCall{lo: lo, hi: hi, ints: others != nil})
		lo = hi
	}
	args := make([]any, 0, (1+perRow)*n+4*len(calls))
	for i := range calls {
		c := &calls[i]
		start := len(args)
		// The first key goes as a string: a cluster or ring client routes by
		// it and reads no pointer.
		args = append(args, "evalsha", &sc.sha, c.hi-c.lo, keys[c.lo])
		for j := c.lo + 1; j < c.hi; j++ {
			args = append(args, &keys[j])
		}
		args = append(args, &field)
		for j := perRow * c.lo; j < perRow*c.hi; j++ {
			args = append(args, &vals[j])
		}
		c.args = args[start:len(args):len(args)]
	}
	if err := s.run(ctx, sc, calls); err != nil {
		return s.fail(op, err)
	}
	if others == nil {
		return nil
	}
	for _, c := range calls {
		vals, err := c.cmd.(*redis.IntSliceCmd).Result()
		if err != nil || len(vals) != 2*(c.hi-c.lo) {
			return fmt.Errorf("redis: %s: unexpected reply %v (%v)", op, vals, err)
		}
		for j := 0; j+1 < len(vals); j += 2 {
			others[c.lo+j/2] = vals[j] - vals[j+1]
		}
	}
	return nil
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
