package node

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/limiterd/limiterd/ratelimit"
)

// Clock tells the time. It is injected so tests control time.
type Clock interface {
	Now() time.Time
}

// SystemClock reads time.Now (about 20–50 ns per call on virtual machines;
// the explicit-time methods avoid it when the caller already has the time).
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Namespace holds the sliding-window counters of one namespace.
//
// Counting an existing key in a live window takes no lock and does not
// allocate: a lock-free table lookup and an atomic add. A key's first hit
// in a new window allocates that window's pair. All methods are safe for
// concurrent use.
type Namespace struct {
	cfg   Config
	clock Clock
	sizes []int64 // cfg.WindowSizes in ns, ascending
	track bool    // syncing namespace: touching a key marks it for fetch

	keys    atomic.Int64 // active keys
	bytes   atomic.Int64 // their KeyCost, under cfg.MaxBytes
	refused atomic.Int64 // new keys refused at the cap
	dropped atomic.Int64 // unpushed windows reclaimed
	evicted atomic.Int64 // idle keys evicted for new ones at the cap

	// est counts an estimator namespace's windows; nil otherwise, when
	// shards hold one exact entry per key.
	est *estimator

	shards shards

	// buckets holds the namespace's token, leaky and fixed buckets.
	buckets *bucketTable

	// leases holds the namespace's concurrency leases.
	leases *Leases

	// newKey, when set, is told every key inserted (see OnNewKey).
	newKey atomic.Pointer[func(key string)]
}

// NewNamespace validates cfg and returns an empty namespace reading clock.
func NewNamespace(cfg Config, clock Clock) (*Namespace, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if clock == nil {
		clock = SystemClock{}
	}
	cfg.WindowSizes = slices.Clone(cfg.WindowSizes)
	slices.Sort(cfg.WindowSizes)
	cfg.Policies = clonePolicies(cfg.Policies)
	ns := &Namespace{cfg: cfg, clock: clock, track: cfg.Shared}
	for _, s := range cfg.WindowSizes {
		ns.sizes = append(ns.sizes, int64(s))
	}
	ns.shards.init()
	if cfg.Estimator != nil {
		e := *cfg.Estimator
		ns.cfg.Estimator = &e
		ns.est = newEstimator(e, ns.sizes, clock)
	}
	ns.buckets = newBuckets(bucketsConfig{Name: cfg.Name, MaxKeys: cfg.MaxKeys, MaxBytes: cfg.MaxBytes}, clock)
	ns.buckets.unsynced.Store(!cfg.Shared)
	ns.leases = newLeases(cfg.Name, cfg.MaxKeys)
	if ns.cfg.MaxLeaseTTL == 0 {
		ns.cfg.MaxLeaseTTL = DefaultMaxLeaseTTL
	}
	return ns, nil
}

// Config returns the namespace's configuration (window sizes ascending).
func (ns *Namespace) Config() Config { return ns.cfg }

// Name returns the namespace's name.
func (ns *Namespace) Name() string { return ns.cfg.Name }

// Now reads the namespace's clock.
func (ns *Namespace) Now() time.Time { return ns.clock.Now() }

// Stats is what a namespace holds and has refused, for metrics.
type Stats struct {
	// ActiveKeys and ActiveBuckets are the keys and buckets in memory
	// (the buckets hold at most MaxKeys, counted apart from the keys of
	// the windows).
	ActiveKeys, ActiveBuckets int64
	// RefusedKeys and RefusedBuckets count new keys and buckets refused
	// at the key cap; EvictedKeys the keys evicted to make room.
	RefusedKeys, RefusedBuckets, EvictedKeys int64
	// DroppedWindows counts windows reclaimed before their counts could
	// be pushed (only during a long store outage).
	DroppedWindows int64
}

// Stats reads the namespace's counters, each atomically (not together).
func (ns *Namespace) Stats() Stats {
	return Stats{
		ActiveKeys:     ns.keys.Load(),
		ActiveBuckets:  ns.buckets.n.Load(),
		RefusedKeys:    ns.refused.Load(),
		RefusedBuckets: ns.buckets.refused.Load(),
		EvictedKeys:    ns.evicted.Load(),
		DroppedWindows: ns.dropped.Load(),
	}
}

// The parts of KeyCost, measured on amd64 (TestKeyCost): an entry with its
// place in the shard table and the key's bytes, and per window size a slot
// and the windows of a key counted in it. It is the heap a key takes; the
// process's memory is more (the garbage of the calls, up to the heap
// again under GOGC=100 until GOMEMLIMIT).
const (
	keyCostBase    = 88
	keyCostPerSize = 56
)

// MinMaxBytes is the smallest MaxBytes: room for a few hundred keys of
// the longest length.
const MinMaxBytes = 1 << 20

// KeyCost is what a key of keyLen bytes costs under MaxBytes in a
// namespace of sizes window sizes: 88 + 56 per size + its length.
func KeyCost(keyLen, sizes int) int64 {
	return keyCostBase + keyCostPerSize*int64(sizes) + int64(keyLen)
}

// keyCost is KeyCost of key in ns.
func (ns *Namespace) keyCost(key string) int64 { return KeyCost(len(key), len(ns.sizes)) }

// Leases returns the namespace's table of concurrency leases.
func (ns *Namespace) Leases() *Leases { return ns.leases }

// Sleep waits d on the namespace's clock (through its sleeper, when the
// clock has one), or until ctx is done, returning ctx's error then.
func (ns *Namespace) Sleep(ctx context.Context, d time.Duration) error {
	return sleepOn(ctx, ns.clock, d)
}

// Sizes returns the namespace's window sizes, ascending. The caller must
// not modify the slice.
func (ns *Namespace) Sizes() []time.Duration { return ns.cfg.WindowSizes }

// sizeIndex returns the index of size, or -1.
func (ns *Namespace) sizeIndex(size time.Duration) int {
	for i, s := range ns.sizes {
		if s == int64(size) {
			return i
		}
	}
	return -1
}

func (ns *Namespace) unknownWindow(size time.Duration) error {
	return ns.unknownWindowField("window_size", size)
}

// unknownWindowField is the error of a size the namespace does not have,
// given in field.
func (ns *Namespace) unknownWindowField(field string, size time.Duration) error {
	names := make([]string, len(ns.cfg.WindowSizes))
	for i, s := range ns.cfg.WindowSizes {
		names[i] = s.String()
	}
	return fieldErr(field, ErrUnknownWindow, "namespace %q has no window size %s (configured: %s)",
		ns.cfg.Name, size, strings.Join(names, ", "))
}

// SizeRange returns the indexes [lo, hi) in Sizes of the sizes a call with
// size addresses; size 0 means every size.
func (ns *Namespace) SizeRange(size time.Duration) (lo, hi int, err error) {
	if size == 0 {
		return 0, len(ns.sizes), nil
	}
	if i := ns.sizeIndex(size); i >= 0 {
		return i, i + 1, nil
	}
	return 0, 0, ns.unknownWindow(size)
}

// acquire returns the entry of key, creating it if needed. Finding an
// existing key takes no lock. The key has passed checkKeyLen; its UTF-8 is
// checked only when it is new, since only valid keys are ever stored.
//
// A concurrent reclaim may remove the entry at any time: callers that
// write to it lock-free check e.dead afterwards, and callers that lock
// e.mu check it under the lock, and retry on a fresh entry.
func (ns *Namespace) acquire(key string) (*entry, error) {
	h := ns.shards.hash(key)
	if e := ns.shards.find(h, key); e != nil && !e.dead.Load() {
		return e, nil
	}
	return ns.insert(h, key)
}

func (ns *Namespace) insert(h uint64, key string) (*entry, error) {
	if !utf8.ValidString(key) {
		return nil, ratelimit.ValidateKey(key)
	}
	e := ns.insertKey(h, key, false)
	if e == nil {
		ns.refused.Add(1)
		if ns.keys.Load() < int64(ns.cfg.MaxKeys) {
			return nil, fieldErr("key", ErrKeyLimit, "namespace %q holds keys worth its max_bytes of %d bytes (a key of %d bytes costs %d)",
				ns.cfg.Name, ns.cfg.MaxBytes, len(key), ns.keyCost(key))
		}
		return nil, fieldErr("key", ErrKeyLimit, "namespace %q holds its maximum of %d active keys", ns.cfg.Name, ns.cfg.MaxKeys)
	}
	return e, nil
}

// insertKey inserts key, hashed to h, or returns its entry if it is
// there already; it returns nil when there is no room. A key the node
// counts takes a place under max_keys (or an evicted key's) and is told
// to the new-key hook; a learned one (see KeyTotal.Learn) takes a place
// under learnCap and is not told.
func (ns *Namespace) insertKey(h uint64, key string, learned bool) *entry {
	sh := ns.shards.of(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.tab.Load().find(h, key); e != nil {
		return e // inserted meanwhile; under sh.mu it cannot be dead
	}
	cost := ns.keyCost(key)
	if learned && !ns.reserve(ns.learnCap(), ns.cfg.MaxBytes/4*3, cost) || !learned && !ns.reserveKey(h, cost) {
		return nil
	}
	e := newEntry(key, len(ns.sizes))
	ns.shards.insert(sh, h, e)
	if fn := ns.newKey.Load(); fn != nil && !learned {
		(*fn)(e.key)
	}
	return e
}

// reserveKey counts one more active key for a new key hashed to h,
// costing cost bytes, under the caps: below both, at once; at one, by
// taking an evicted key's place (OnFullEvict), which may leave the bytes
// over MaxBytes by the difference of the two keys' costs (at most
// MaxKeyLen). It reports false when the key must be refused. The caller
// holds the key's shard lock.
func (ns *Namespace) reserveKey(h uint64, cost int64) bool {
	if ns.reserve(int64(ns.cfg.MaxKeys), ns.cfg.MaxBytes, cost) {
		return true
	}
	if ns.cfg.OnFull == OnFullEvict && ns.evict(h) {
		ns.bytes.Add(cost) // evict gave back the evicted key's
		return true
	}
	return false
}

// reserve counts one more active key costing cost bytes if there are
// fewer than keys keys and the bytes stay within bytes.
func (ns *Namespace) reserve(keys, bytes, cost int64) bool {
	if !ns.reserveUnder(keys) {
		return false
	}
	if ns.bytes.Add(cost) > bytes {
		ns.bytes.Add(-cost)
		ns.keys.Add(-1)
		return false
	}
	return true
}

// reserveUnder counts one more active key if there are fewer than limit.
func (ns *Namespace) reserveUnder(limit int64) bool {
	for {
		k := ns.keys.Load()
		if k >= limit {
			return false
		}
		if ns.keys.CompareAndSwap(k, k+1) {
			return true
		}
	}
}

// acquireLocked is acquire with e.mu held and e alive, so no reclaim can
// remove it until the caller unlocks.
func (ns *Namespace) acquireLocked(key string) (*entry, error) {
	for {
		e, err := ns.acquire(key)
		if err != nil {
			return nil, err
		}
		e.mu.Lock()
		if !e.dead.Load() {
			return e, nil
		}
		e.mu.Unlock()
	}
}

// keyErrOr returns the key's validation error, if any, else err: a key
// error is reported first, as if the key had been checked before the
// rest of the request.
func keyErrOr(key string, err error) error {
	if kerr := ratelimit.ValidateKey(key); kerr != nil {
		return kerr
	}
	return err
}

// IncrementAt counts value hits for key at t in the window of the given
// size, or in every window size when size is 0, and appends the rates after
// the increment to dst, one per size counted, ascending.
func (ns *Namespace) IncrementAt(t time.Time, key string, size time.Duration, value float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	// The checks of ToMicro, checkKeyLen and SizeRange, written out: this
	// is the hottest path, and each call costs about as much as a check.
	// Errors are built out of line, in the same order.
	if !(math.Abs(value) <= ratelimit.MaxValue) || key == "" || len(key) > ratelimit.MaxKeyLen {
		if _, err := ratelimit.ToMicro(value); err != nil {
			return dst, err
		}
		return dst, checkKeyLen(key)
	}
	x := value * ratelimit.Micro
	m := int64(x)
	if float64(m) != x {
		m = int64(math.Round(x))
	}
	lo, hi := 0, len(ns.sizes)
	if size != 0 {
		for lo = 0; lo < hi && ns.sizes[lo] != int64(size); lo++ {
		}
		if lo == hi {
			return dst, keyErrOr(key, ns.unknownWindow(size))
		}
		hi = lo + 1
	}
	if ns.est != nil {
		if m < 0 {
			return dst, keyErrOr(key, ns.errEstimatorNegative(value))
		}
		return ns.est.rates(t.UnixNano(), key, lo, hi, m, true, dst)
	}
	return ns.incrementMicro(t.UnixNano(), key, lo, hi, m, dst)
}

func (ns *Namespace) incrementMicro(t int64, key string, lo, hi int, m int64, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	n := len(dst)
	h := ns.shards.hash(key)
	sh := ns.shards.of(h)
retry:
	for {
		e := sh.tab.Load().find(h, key) // acquire, without hashing again
		if e == nil || e.dead.Load() {
			var err error
			if e, err = ns.insert(h, key); err != nil {
				return dst, err
			}
		}
		dst = dst[:n]
		for i := lo; i < hi; i++ {
			size := ns.sizes[i]
			s := e.slot(i)
			var r float64
			// The common case: t is in the slot's current window, known
			// without dividing; a lock-free add.
			if p := s.p.Load(); p != nil && uint64(t-p.start) < uint64(size) {
				own := p.cur.own.Add(m)
				ns.dirtied(e)
				r = ratelimit.SlidingRate(own+p.cur.others.Load(), total(p.prev.Load()), time.Duration(size), t-p.start)
			} else {
				var err error
				if r, err = ns.addLocked(e, s, t, size, m); err != nil {
					continue retry
				}
			}
			dst = append(dst, ratelimit.Rate{Size: time.Duration(size), Rate: r / ratelimit.Micro})
		}
		if !e.dead.Load() {
			return dst, nil
		}
		// Reclaimed while counting: the adds went to an entry no one reads
		// any more; count again on a fresh one.
	}
}

// errDead reports that an entry was reclaimed under a caller; it never
// leaves the package.
var errDead = errors.New("node: entry reclaimed")

// addLocked counts m in slot s of e at t under e.mu, rolling the slot
// forward when needed, and returns the slot's rate at t in micro-hits.
func (ns *Namespace) addLocked(e *entry, s *slot, t, size, m int64) (float64, error) {
	ws := ratelimit.WindowStart(t, time.Duration(size))
	e.mu.Lock()
	if e.dead.Load() {
		e.mu.Unlock()
		return 0, errDead
	}
	if b := s.bucketFor(ws, size); b != nil {
		b.own.Add(m)
		ns.dirtied(e)
	}
	e.mu.Unlock()
	return ns.rate(s, t, ws, size, 0), nil
}

// rate returns the sliding rate of slot s at t in micro-hits, plus extra
// counted in the current window.
func (ns *Namespace) rate(s *slot, t, ws, size, extra int64) float64 {
	cur, prev := s.buckets(ws, size)
	return ratelimit.SlidingRate(total(cur)+extra, total(prev), time.Duration(size), t-ws)
}

func total(b *bucket) int64 {
	if b == nil {
		return 0
	}
	return b.own.Load() + b.others.Load()
}

// RateAt appends to dst the sliding rate of key at t for the given size (0 =
// every size) as if curDiff more hits were counted in the current window
// now; it counts nothing. In a syncing namespace it marks the key as
// interesting, so the next sync fetches the other nodes' counts for it.
func (ns *Namespace) RateAt(t time.Time, key string, size time.Duration, curDiff float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	m, err := ratelimit.ToMicroField("cur_diff", curDiff)
	if err != nil {
		return dst, err
	}
	if err := checkKeyLen(key); err != nil {
		return dst, err
	}
	lo, hi, err := ns.SizeRange(size)
	if err != nil {
		return dst, keyErrOr(key, err)
	}
	tn := t.UnixNano()
	if ns.est != nil {
		return ns.est.rates(tn, key, lo, hi, m, false, dst)
	}
	n := len(dst)
retry:
	for {
		var e *entry
		if ns.track {
			if e, err = ns.acquire(key); err != nil {
				return dst, err
			}
		} else if e = ns.shards.find(ns.shards.hash(key), key); e == nil && !utf8.ValidString(key) {
			return dst, ratelimit.ValidateKey(key)
		}
		dst = dst[:n]
		for i := lo; i < hi; i++ {
			size := ns.sizes[i]
			ws := ratelimit.WindowStart(tn, time.Duration(size))
			r := ratelimit.SlidingRate(m, 0, time.Duration(size), tn-ws)
			if e != nil {
				s := e.slot(i)
				if ns.track && !ns.touch(e, s, ws, size) {
					continue retry
				}
				r = ns.rate(s, tn, ws, size, m)
			}
			dst = append(dst, ratelimit.Rate{Size: time.Duration(size), Rate: r / ratelimit.Micro})
		}
		return dst, nil
	}
}

// touch makes sure slot s has a bucket for the window ws, so the key belongs
// to the interest set. It reports false if e was reclaimed meanwhile.
func (ns *Namespace) touch(e *entry, s *slot, ws, size int64) bool {
	if p := s.p.Load(); p != nil && p.start >= ws {
		return true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.dead.Load() {
		return false
	}
	s.bucketFor(ws, size)
	return true
}

// String describes the namespace for logs.
func (ns *Namespace) String() string {
	return fmt.Sprintf("namespace %q (windows %v)", ns.cfg.Name, ns.cfg.WindowSizes)
}
