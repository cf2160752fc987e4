package node

import (
	"context"
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/limiterd/limiterd/ratelimit"
)

// MaxBucketDuration is the longest refill time, leak interval, drip or
// fixed period a bucket may have: the longest window size.
const MaxBucketDuration = MaxWindowSize

// bucketsConfig configures a bucketTable.
type bucketsConfig struct {
	// Name names the table's namespace in errors.
	Name string
	// MaxKeys caps the buckets held (one per kind, key and parameters);
	// 0 means DefaultMaxKeys.
	MaxKeys int
	// MaxBytes is the byte budget of the buckets held, each costing
	// bucketCost; 0 means DefaultMaxBytes.
	MaxBytes int64
}

// bucketCostBase is what a bucket costs beside its key's bytes: its map
// entry and its state, measured on amd64 (TestBucketCost).
const bucketCostBase = 240

// bucketCost is what a bucket of a key of keyLen bytes costs under
// MaxBytes: 240 bytes + its key's length, the heap it takes.
func bucketCost(keyLen int) int64 { return bucketCostBase + int64(keyLen) }

// bucketStatus is the answer of a bucket call: what a LimitStatus needs.
// Amounts are in hits (tokens, drops or counts); durations are measured
// from the call's time.
type bucketStatus struct {
	// Allowed reports whether the take was admitted (always true for a
	// read or a take of 0).
	Allowed bool
	// Never is set when the take exceeds the bucket's capacity (max, size
	// or limit): waiting cannot help, and RetryAfter is 0.
	Never bool
	// Limit is the bucket's capacity: max tokens, size in drops, or limit
	// per period.
	Limit float64
	// Before is the level before the take: tokens in a token bucket (what
	// Smyte's RL.REDUCE replies), drops in a leaky bucket, the period's
	// count in a fixed bucket.
	Before float64
	// Remaining is what is left to take after the call: tokens, free
	// drops (size − drops), or limit − count.
	Remaining float64
	// ResetAfter is the time until the bucket's next change by time alone:
	// the next refill (0 when full), the next drip (0 when empty), or the
	// end of the period.
	ResetAfter time.Duration
	// RetryAfter, when refused and not Never, is the least wait after
	// which the same take is admitted if nothing else is taken.
	RetryAfter time.Duration

	used int64 // the take's consumption, in micro-hits (see bucketEntry.own)
}

// wait reports whether a refused take may be retried after waiting at most
// maxWait (Sidekiq's wait_timeout), and how long to wait. It never says so
// for an admitted take or a Never.
func (s bucketStatus) wait(maxWait time.Duration) (time.Duration, bool) {
	if s.Allowed || s.Never || s.RetryAfter > maxWait {
		return 0, false
	}
	return s.RetryAfter, true
}

// sleeper is an optional ability of a Clock: waiting d on that clock's
// time, or until ctx is done. The waiting forms (takeLeakyWait) use it when
// the clock has it, and a time.Timer otherwise.
type sleeper interface {
	Sleep(ctx context.Context, d time.Duration) error
}

// bucketTable holds the state of token, leaky and fixed buckets of one
// namespace, one per (kind, key, parameters): the same key with other
// parameters is another bucket.
//
// A call on an existing bucket takes its shard's read lock and the
// bucket's own mutex, and does not allocate; only a new bucket takes the
// shard's write lock. Node.Run removes buckets back at their idle state.
// The explicit-time methods read no clock; the short forms read the
// injected Clock. All methods are safe for concurrent use.
type bucketTable struct {
	cfg     bucketsConfig
	clock   Clock
	seed    maphash.Seed
	n       atomic.Int64 // buckets held
	bytes   atomic.Int64 // their bucketCost, under maxBytes
	refused atomic.Int64 // new buckets refused at the cap
	// maxKeys and maxBytes cap the table (its namespace's max_keys and
	// max_bytes, which a change of its config may move: setCaps).
	maxKeys, maxBytes atomic.Int64
	lives             atomic.Int64 // the last life given to a new bucket
	// unsynced: no store receives the table's consumption (a local
	// namespace's), so reclaim does not keep a bucket back for it.
	unsynced atomic.Bool
	shards   [bucketShards]bucketShard
}

// bucketKind tells the kinds apart in a bucket's identity.
type bucketKind uint8

const (
	kindToken bucketKind = iota + 1
	kindLeaky
	kindFixed
)

// bucketID is a bucket's identity: kind, key and validated parameters.
type bucketID struct {
	key     string
	kind    bucketKind
	a, b, c int64
}

// bucketVal is a bucket's state: a level in micro-hits (tokens, drops or
// count) and an instant in Unix ns (last refill mark, last drip mark or
// period start).
type bucketVal struct {
	v, last int64
}

type bucketEntry struct {
	mu  gosync.Mutex
	val bucketVal
	// gone is set by reclaim when it removes the entry: a caller that
	// locked it meanwhile looks the bucket up again.
	gone bool

	// The cluster's bookkeeping (periodic and synchronous namespaces;
	// see bucketsync.go). life tells this entry from an earlier one of
	// the same bucket (reclaim, then a new call); own is this
	// incarnation's consumption in that life, acked the part of it the
	// store has confirmed, seq the store's write count of the state last
	// taken from it (at seqAt, on the node's clock), lastAt the time of
	// the last consumption.
	life, own, acked, seq, seqAt, lastAt int64
	synced                               bool // the store's state was read at least once
}

// dirty reports whether some of this incarnation's consumption has not
// reached the store.
func (e *bucketEntry) dirty() bool { return e.own != e.acked }

// bucketShard is one part of the table. Its lock guards the map only:
// calls look an entry up under it and then lock the entry alone, so a
// slow call (a store's round trip, in a synchronous namespace) never
// holds up the shard. reclaim removes only entries it can lock, and marks
// them gone.
type bucketShard struct {
	mu gosync.RWMutex
	m  map[bucketID]*bucketEntry
	// Pad to a whole 64-byte cache line, so neighbouring shards do not
	// share one.
	_ [64 - (unsafe.Sizeof(gosync.RWMutex{})+unsafe.Sizeof(map[int]int(nil)))%64]byte
}

const bucketShards = 256

// newBuckets returns an empty table reading clock (nil: SystemClock).
func newBuckets(cfg bucketsConfig, clock Clock) *bucketTable {
	if clock == nil {
		clock = SystemClock{}
	}
	b := &bucketTable{cfg: cfg, clock: clock, seed: maphash.MakeSeed()}
	b.setCaps(cfg.MaxKeys, cfg.MaxBytes)
	for i := range b.shards {
		b.shards[i].m = make(map[bucketID]*bucketEntry)
	}
	return b
}

// setCaps sets the table's caps (0: the defaults). Buckets held beyond
// lowered caps stay until reclaimed; new ones are refused meanwhile.
func (b *bucketTable) setCaps(maxKeys int, maxBytes int64) {
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	b.maxKeys.Store(int64(maxKeys))
	b.maxBytes.Store(maxBytes)
}

func (b *bucketTable) shard(key string) *bucketShard {
	return &b.shards[maphash.String(b.seed, key)%bucketShards]
}

// apply runs step on the state of id under its lock; found is false for a
// bucket not held yet, whose state step initialises. With write, a missing
// bucket is created (within the cap) and the state step returns is
// stored; without, nothing is stored. (step takes and returns values, not
// a pointer, so a read's copy stays on the stack.)
func (b *bucketTable) apply(id *bucketID, write bool, step func(s bucketVal, found bool) bucketVal) error {
	if err := checkKeyLen(id.key); err != nil {
		return err
	}
	sh := b.shard(id.key)
	for {
		sh.mu.RLock()
		e := sh.m[*id]
		sh.mu.RUnlock()
		if e == nil {
			break
		}
		e.mu.Lock()
		if !e.gone {
			if v := step(e.val, true); write {
				e.val = v
			}
			e.mu.Unlock()
			return nil
		}
		e.mu.Unlock()
	}
	if !utf8.ValidString(id.key) {
		return ratelimit.ValidateKey(id.key)
	}
	if !write {
		step(bucketVal{}, false)
		return nil
	}
	return b.insert(sh, id, step)
}

// insert creates id's bucket under the shard's write lock and runs step
// on it, unless another call created it meanwhile.
func (b *bucketTable) insert(sh *bucketShard, id *bucketID, step func(s bucketVal, found bool) bucketVal) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[*id]; e != nil {
		e.mu.Lock()
		e.val = step(e.val, true)
		e.mu.Unlock()
		return nil
	}
	for {
		n := b.n.Load()
		if max := b.maxKeys.Load(); n >= max {
			b.refused.Add(1)
			return fieldErr("key", ErrKeyLimit, "namespace %q holds its maximum of %d buckets", b.cfg.Name, max)
		}
		if b.n.CompareAndSwap(n, n+1) {
			break
		}
	}
	if cost, max := bucketCost(len(id.key)), b.maxBytes.Load(); b.bytes.Add(cost) > max {
		b.bytes.Add(-cost)
		b.n.Add(-1)
		b.refused.Add(1)
		return fieldErr("key", ErrKeyLimit, "namespace %q holds buckets worth its max_bytes of %d bytes (a bucket of a key of %d bytes costs %d)",
			b.cfg.Name, max, len(id.key), cost)
	}
	e := &bucketEntry{val: step(bucketVal{}, false), life: b.newLife()}
	nid := *id
	nid.key = strings.Clone(id.key)
	sh.m[nid] = e
	return nil
}

// newLife returns a life greater than every one given before: the
// clock's time in ns, or one more than the last.
func (b *bucketTable) newLife() int64 {
	n := b.clock.Now().UnixNano()
	for {
		last := b.lives.Load()
		next := max(n, last+1)
		if b.lives.CompareAndSwap(last, next) {
			return next
		}
	}
}

// reclaim removes the buckets that are back at their idle state at now: a
// token bucket refilled to its max, a leaky bucket drained to 0, a fixed
// bucket whose period ended (or that counted nothing in it). A bucket created again later starts from that
// state (a token bucket's refill marks then count from its new first
// call). It returns the number of buckets removed.
func (b *bucketTable) reclaim(now time.Time) int {
	tn := now.UnixNano()
	removed, freed := 0, int64(0)
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		for id, e := range sh.m {
			if !e.mu.TryLock() {
				continue // in use: alive
			}
			// A bucket whose consumption has not reached the store stays
			// until it has.
			if (!e.dirty() || b.unsynced.Load()) && bucketIdle(id, e.val, tn) {
				e.gone = true
				delete(sh.m, id)
				removed++
				freed += bucketCost(len(id.key))
			}
			e.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	b.n.Add(-int64(removed))
	b.bytes.Add(-freed)
	return removed
}

func bucketIdle(id bucketID, s bucketVal, t int64) bool {
	switch id.kind {
	case kindToken:
		return tokenParams{max: id.a, refill: id.b, amount: id.c}.idle(s, t)
	case kindLeaky:
		return leakyParams{size: id.a, interval: id.b, drip: id.c}.idle(s, t)
	case kindFixed:
		return fixedParams{period: id.a, limit: id.b}.idle(s, t)
	}
	return false
}

// sleep waits d on the table's clock, or until ctx is done.
func (b *bucketTable) sleep(ctx context.Context, d time.Duration) error {
	return sleepOn(ctx, b.clock, d)
}

// sleepOn waits d on clock, or until ctx is done.
func sleepOn(ctx context.Context, clock Clock, d time.Duration) error {
	if s, ok := clock.(sleeper); ok {
		return s.Sleep(ctx, d)
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// ---- parameter checks and arithmetic shared by the kinds ----------------

// bucketAmount converts a capacity or refill amount to micro-hits: a
// finite number in [0.000001, MaxValue] after rounding.
func bucketAmount(field string, v float64) (int64, error) {
	m, err := ratelimit.ToMicro(v)
	if err != nil || m < 1 {
		return 0, fieldErr(field, ErrInvalidLimit, "must be a number between 0.000001 and %g, got %g", float64(ratelimit.MaxValue), v)
	}
	return m, nil
}

// bucketTake converts a take to micro-hits: a finite number in
// [0, MaxValue].
func bucketTake(v float64) (int64, error) {
	m, err := ratelimit.ToMicro(v)
	if err != nil || m < 0 {
		return 0, fieldErr("take", ratelimit.ErrInvalidValue, "must be a number between 0 and %g, got %g", float64(ratelimit.MaxValue), v)
	}
	return m, nil
}

// bucketDuration checks a refill time, interval or period.
func bucketDuration(field string, d time.Duration) (int64, error) {
	if d <= 0 || d > MaxBucketDuration {
		return 0, fieldErr(field, ErrInvalidLimit, "must be between 1ns and %s, got %s", MaxBucketDuration, d)
	}
	return int64(d), nil
}

// bucketCeilDiv is ⌈a/b⌉ for a >= 0, b > 0.
func bucketCeilDiv(a, b int64) int64 { return (a + b - 1) / b }

// bucketMulSat is a×b for a, b >= 0, saturated at math.MaxInt64.
func bucketMulSat(a, b int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(lo)
}

// bucketAddSat is a+b for a, b >= 0, saturated at math.MaxInt64.
func bucketAddSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// bucketErr returns key's validation error, if any, else err: a bad key is
// reported first, as if checked before the rest of the request.
func bucketErr(key string, err error) error {
	if kerr := ratelimit.ValidateKey(key); kerr != nil {
		return kerr
	}
	return err
}
