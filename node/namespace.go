package node

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
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

// Rate is the sliding rate of one window size, in hits.
type Rate struct {
	Size time.Duration
	Rate float64
}

// Namespace holds the sliding-window counters of one namespace.
//
// Counting an existing key in a live window takes a shard read lock and
// atomic adds only: no allocation, no exclusive lock. A key's first hit in
// a new window allocates that window's bucket. All methods are safe for
// concurrent use.
type Namespace struct {
	cfg   Config
	clock Clock
	sizes []int64 // cfg.WindowSizes in ns, ascending
	track bool    // syncing namespace: touching a key marks it for fetch

	keys    atomic.Int64 // active keys
	refused atomic.Int64 // new keys refused at the cap
	dropped atomic.Int64 // unpushed windows reclaimed

	shards shards
}

// NewNamespace validates cfg and returns an empty namespace reading clock.
func NewNamespace(cfg Config, clock Clock) (*Namespace, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if clock == nil {
		clock = SystemClock{}
	}
	cfg.WindowSizes = slices.Clone(cfg.WindowSizes)
	slices.Sort(cfg.WindowSizes)
	ns := &Namespace{cfg: cfg, clock: clock, track: cfg.Mode() != LocalOnly}
	for _, s := range cfg.WindowSizes {
		ns.sizes = append(ns.sizes, int64(s))
	}
	ns.shards.init()
	return ns, nil
}

// Config returns the namespace's configuration (window sizes ascending).
func (ns *Namespace) Config() Config { return ns.cfg }

// Name returns the namespace's name.
func (ns *Namespace) Name() string { return ns.cfg.Name }

// Now reads the namespace's clock.
func (ns *Namespace) Now() time.Time { return ns.clock.Now() }

// ActiveKeys returns the number of keys held in memory.
func (ns *Namespace) ActiveKeys() int64 { return ns.keys.Load() }

// RefusedKeys returns how many new keys were refused at the key cap.
func (ns *Namespace) RefusedKeys() int64 { return ns.refused.Load() }

// DroppedWindows returns how many windows were reclaimed before their
// counts could be pushed (only during a long store outage).
func (ns *Namespace) DroppedWindows() int64 { return ns.dropped.Load() }

// sizeIndex returns the index of size, or an error listing the sizes.
func (ns *Namespace) sizeIndex(size time.Duration) (int, error) {
	for i, s := range ns.sizes {
		if s == int64(size) {
			return i, nil
		}
	}
	return -1, ns.unknownWindow(size)
}

func (ns *Namespace) unknownWindow(size time.Duration) error {
	names := make([]string, len(ns.cfg.WindowSizes))
	for i, s := range ns.cfg.WindowSizes {
		names[i] = s.String()
	}
	return fieldErr("window_size", ErrUnknownWindow, "namespace %q has no window size %s (configured: %s)",
		ns.cfg.Name, size, strings.Join(names, ", "))
}

// sizeRange returns the slot indexes [lo, hi) a call with size counts in;
// size 0 means every size.
func (ns *Namespace) sizeRange(size time.Duration) (int, int, error) {
	if size == 0 {
		return 0, len(ns.sizes), nil
	}
	i, err := ns.sizeIndex(size)
	return i, i + 1, err
}

// lookup returns the entry of key with its shard read-locked; the caller
// must RUnlock sh. It returns nil (and no lock held) when the key is absent.
func (ns *Namespace) lookup(key string) (*entry, *shard) {
	sh := ns.shards.of(key)
	sh.mu.RLock()
	if e := sh.m[key]; e != nil {
		return e, sh
	}
	sh.mu.RUnlock()
	return nil, sh
}

// acquire returns the entry of key, creating it if needed, with its shard
// read-locked (so a concurrent reclaim cannot remove it while in use).
func (ns *Namespace) acquire(key string) (*entry, *shard, error) {
	if e, sh := ns.lookup(key); e != nil {
		return e, sh, nil
	}
	sh := ns.shards.of(key)
	sh.mu.Lock()
	e := sh.m[key]
	if e == nil {
		if ns.keys.Load() >= int64(ns.cfg.MaxKeys) {
			sh.mu.Unlock()
			ns.refused.Add(1)
			return nil, nil, fieldErr("key", ErrKeyLimit, "namespace %q holds its maximum of %d active keys", ns.cfg.Name, ns.cfg.MaxKeys)
		}
		e = &entry{slots: make([]slot, len(ns.sizes))}
		// Clone so the map never pins a caller's larger buffer.
		sh.m[strings.Clone(key)] = e
		ns.keys.Add(1)
	}
	sh.mu.Unlock()
	// Reacquire as a reader; the entry can only be removed by a reclaim,
	// which needs the write lock and skips entries touched this window.
	return ns.acquireExisting(key, e, sh)
}

func (ns *Namespace) acquireExisting(key string, e *entry, sh *shard) (*entry, *shard, error) {
	sh.mu.RLock()
	if cur := sh.m[key]; cur != nil {
		return cur, sh, nil
	}
	sh.mu.RUnlock()
	// Reclaimed between the two locks (only possible for an entry that
	// no window kept alive); start again.
	return ns.acquire(key)
}

// IncrementAt counts value hits for key at t in the window of the given
// size, or in every window size when size is 0, and appends the rates after
// the increment to dst, one per size counted, ascending.
func (ns *Namespace) IncrementAt(t time.Time, key string, size time.Duration, value float64, dst []Rate) ([]Rate, error) {
	m, err := ToMicro(value)
	if err != nil {
		return dst, err
	}
	if err := ValidateKey(key); err != nil {
		return dst, err
	}
	lo, hi, err := ns.sizeRange(size)
	if err != nil {
		return dst, err
	}
	return ns.incrementMicro(t.UnixNano(), key, lo, hi, m, dst)
}

// Increment is IncrementAt at the namespace clock's time.
func (ns *Namespace) Increment(key string, size time.Duration, value float64, dst []Rate) ([]Rate, error) {
	return ns.IncrementAt(ns.clock.Now(), key, size, value, dst)
}

func (ns *Namespace) incrementMicro(t int64, key string, lo, hi int, m int64, dst []Rate) ([]Rate, error) {
	e, sh, err := ns.acquire(key)
	if err != nil {
		return dst, err
	}
	for i := lo; i < hi; i++ {
		size := ns.sizes[i]
		ws := WindowStart(t, time.Duration(size))
		s := &e.slots[i]
		if p := s.p.Load(); p != nil && p.start == ws {
			p.cur.own.Add(m) // the common case: lock-free
		} else {
			e.mu.Lock()
			if b := s.bucketFor(ws, size); b != nil {
				b.own.Add(m)
			}
			e.mu.Unlock()
		}
		dst = append(dst, Rate{Size: time.Duration(size), Rate: ns.rate(s, t, ws, size, 0) / Micro})
	}
	sh.mu.RUnlock()
	return dst, nil
}

// rate returns the sliding rate of slot s at t in micro-hits, plus extra
// counted in the current window.
func (ns *Namespace) rate(s *slot, t, ws, size, extra int64) float64 {
	cur, prev := s.buckets(ws, size)
	return SlidingRate(total(cur)+extra, total(prev), time.Duration(size), t-ws)
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
func (ns *Namespace) RateAt(t time.Time, key string, size time.Duration, curDiff float64, dst []Rate) ([]Rate, error) {
	m, err := ToMicro(curDiff)
	if err != nil {
		if fe, ok := err.(*FieldError); ok {
			fe.Field = "cur_diff"
		}
		return dst, err
	}
	if err := ValidateKey(key); err != nil {
		return dst, err
	}
	lo, hi, err := ns.sizeRange(size)
	if err != nil {
		return dst, err
	}
	tn := t.UnixNano()
	var e *entry
	var sh *shard
	if ns.track {
		if e, sh, err = ns.acquire(key); err != nil {
			return dst, err
		}
	} else {
		e, sh = ns.lookup(key)
	}
	for i := lo; i < hi; i++ {
		size := ns.sizes[i]
		ws := WindowStart(tn, time.Duration(size))
		r := SlidingRate(m, 0, time.Duration(size), tn-ws)
		if e != nil {
			s := &e.slots[i]
			if ns.track {
				ns.touch(e, s, ws, size)
			}
			r = ns.rate(s, tn, ws, size, m)
		}
		dst = append(dst, Rate{Size: time.Duration(size), Rate: r / Micro})
	}
	if e != nil {
		sh.mu.RUnlock()
	}
	return dst, nil
}

// Rate is RateAt at the namespace clock's time.
func (ns *Namespace) Rate(key string, size time.Duration, curDiff float64, dst []Rate) ([]Rate, error) {
	return ns.RateAt(ns.clock.Now(), key, size, curDiff, dst)
}

// touch makes sure slot s has a bucket for the window ws, so the key belongs
// to the interest set.
func (ns *Namespace) touch(e *entry, s *slot, ws, size int64) {
	if p := s.p.Load(); p != nil && p.start >= ws {
		return
	}
	e.mu.Lock()
	s.bucketFor(ws, size)
	e.mu.Unlock()
}

// String describes the namespace for logs.
func (ns *Namespace) String() string {
	return fmt.Sprintf("namespace %q (%s, windows %v)", ns.cfg.Name, ns.cfg.Mode(), ns.cfg.WindowSizes)
}
