package node

import (
	"context"
	"hash/maphash"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/limiterd/limiterd/ratelimit"
)

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

// bucketID is a bucket's identity: kind, key and validated parameters,
// a spec whose Strict is always false (Strict is the call's).
type bucketID = ratelimit.BucketSpec

type bucketEntry struct {
	mu  gosync.Mutex
	val ratelimit.BucketState
	// id is the entry's bucket (its Key the table's own copy), set before
	// the entry is shared and never changed. next is the next entry of
	// the same hash in its shard, under the shard's lock.
	id   bucketID
	next *bucketEntry
	// gone is set by reclaim when it removes the entry: a caller that
	// locked it meanwhile looks the bucket up again.
	gone bool
	// synced: the store's state was read at least once (bucketsync.go).
	// (Next to gone: the entry fits in 96 bytes.)
	synced bool

	// The cluster's bookkeeping (periodic and synchronous namespaces;
	// see bucketsync.go). life tells this entry from an earlier one of
	// the same bucket (reclaim, then a new call); own is this
	// incarnation's consumption in that life, acked the part of it the
	// store has confirmed, seq the store's write count of the state last
	// taken from it (at seqAt, on the node's clock), applyAt the time the
	// store counts the unconfirmed consumption at (noteConsumed).
	life, own, acked, seq, seqAt, applyAt int64

	// The bucket's recent consumption, which sets how near its capacity
	// a periodic namespace asks the store (bucketmargin.go): seen is what
	// the store's answers showed of the other nodes' since the rate was
	// last learned, ownAt this incarnation's consumption then, and rate
	// the larger of their rate and this node's, in micro-hits per ns.
	ownAt      int64
	seen, rate float32
}

// dirty reports whether some of this incarnation's consumption has not
// reached the store.
func (e *bucketEntry) dirty() bool { return e.own != e.acked }

// bucketShard is one part of the table. Its lock guards the map and
// the entries' chains only: calls look an entry up under it and then lock
// the entry alone, so a slow call (a store's round trip, in a synchronous
// namespace) never holds up the shard. reclaim removes only entries it can
// lock, and marks them gone.
//
// The map is keyed by the bucket's hash (bucketRef), so a lookup hashes
// the key's bytes once, for the shard and the map both, and compares one
// entry's identity field by field; entries of equal hashes are chained.
type bucketShard struct {
	mu gosync.RWMutex
	m  map[uint64]*bucketEntry
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
		b.shards[i].m = make(map[uint64]*bucketEntry)
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

// keyHash is the hash of key, whose shard holds all of key's buckets.
func (b *bucketTable) keyHash(key string) uint64 { return maphash.String(b.seed, key) }

func (b *bucketTable) shardOf(kh uint64) *bucketShard { return &b.shards[kh%bucketShards] }

// bucketHash is the map key of bucket id, of key hash kh: the parameters
// are hashed with the seed too, so that no caller can chain many buckets
// of one key under one hash. (An array of words, without padding, hashes
// in one call.)
func (b *bucketTable) bucketHash(kh uint64, id *bucketID) uint64 {
	return kh ^ maphash.Comparable(b.seed, [4]int64{int64(id.Kind), id.A, id.B, id.C})
}

// bucketRef returns the shard of id and its hash there.
func (b *bucketTable) bucketRef(id *bucketID) (*bucketShard, uint64) {
	kh := b.keyHash(id.Key)
	return b.shardOf(kh), b.bucketHash(kh, id)
}

// find returns the entry of id, of hash h, or nil. The caller holds the
// shard's lock.
func (sh *bucketShard) find(h uint64, id *bucketID) *bucketEntry {
	for e := sh.m[h]; e != nil; e = e.next {
		if sameBucket(&e.id, id) {
			return e
		}
	}
	return nil
}

// sameBucket reports whether id and o are one bucket (Strict aside).
func sameBucket(id, o *bucketID) bool {
	return id.Kind == o.Kind && id.A == o.A && id.B == o.B && id.C == o.C && id.Key == o.Key
}

// apply runs step on the state of id under its lock; found is false for a
// bucket not held yet, whose state step initialises. With write, a missing
// bucket is created (within the cap) and the state step returns is
// stored; without, nothing is stored. (step takes and returns values, not
// a pointer, so a read's copy stays on the stack.)
func (b *bucketTable) apply(id *bucketID, write bool, step func(s ratelimit.BucketState, found bool) ratelimit.BucketState) error {
	if err := checkKeyLen(id.Key); err != nil {
		return err
	}
	sh, h := b.bucketRef(id)
	for {
		sh.mu.RLock()
		e := sh.find(h, id)
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
	if !utf8.ValidString(id.Key) {
		return ratelimit.ValidateKey(id.Key)
	}
	if !write {
		step(ratelimit.BucketState{}, false)
		return nil
	}
	return b.insert(sh, h, id, step)
}

// insert creates id's bucket, of hash h in sh, under the shard's write
// lock and runs step on it, unless another call created it meanwhile.
func (b *bucketTable) insert(sh *bucketShard, h uint64, id *bucketID, step func(s ratelimit.BucketState, found bool) ratelimit.BucketState) error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.find(h, id); e != nil {
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
	if cost, max := bucketCost(len(id.Key)), b.maxBytes.Load(); b.bytes.Add(cost) > max {
		b.bytes.Add(-cost)
		b.n.Add(-1)
		b.refused.Add(1)
		return fieldErr("key", ErrKeyLimit, "namespace %q holds buckets worth its max_bytes of %d bytes (a bucket of a key of %d bytes costs %d)",
			b.cfg.Name, max, len(id.Key), cost)
	}
	e := newBucketEntry(id.Key)
	key := e.id.Key
	e.val, e.life, e.id, e.next = step(ratelimit.BucketState{}, false), b.newLife(), *id, sh.m[h]
	e.id.Key, e.id.Strict = key, false
	sh.m[h] = e
	return nil
}

// newBucketEntry returns an empty entry holding a copy of key: for a key
// of up to 64 bytes, in the entry's own allocation, just before it, so that
// a lookup comparing the key reads no other cache line.
func newBucketEntry(key string) *bucketEntry {
	switch {
	case len(key) <= 16:
		return entryWithKey[[16]byte](key)
	case len(key) <= 32:
		return entryWithKey[[32]byte](key)
	case len(key) <= 64:
		return entryWithKey[[64]byte](key)
	}
	return &bucketEntry{id: bucketID{Key: strings.Clone(key)}}
}

func entryWithKey[K any](key string) *bucketEntry {
	p := new(struct {
		k K
		e bucketEntry
	})
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&p.k)), unsafe.Sizeof(p.k))
	p.e.id.Key = unsafe.String(&buf[0], copy(buf, key))
	return &p.e
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
		for h, head := range sh.m {
			kept := head
			for link := &kept; *link != nil; {
				e := *link
				if !e.mu.TryLock() {
					link = &e.next // in use: alive
					continue
				}
				// A bucket whose consumption has not reached the store
				// stays until it has.
				if (!e.dirty() || b.unsynced.Load()) && bucketIdle(&e.id, e.val, tn) {
					e.gone = true
					*link, e.next = e.next, nil
					removed++
					freed += bucketCost(len(e.id.Key))
				} else {
					link = &e.next
				}
				e.mu.Unlock()
			}
			switch {
			case kept == nil:
				delete(sh.m, h)
			case kept != head:
				sh.m[h] = kept
			}
		}
		sh.mu.Unlock()
	}
	b.n.Add(-int64(removed))
	b.bytes.Add(-freed)
	return removed
}

// bucketIdle reports whether s, the state of bucket id, is a new
// bucket's at t.
func bucketIdle(id *bucketID, s ratelimit.BucketState, t int64) bool {
	return id.Idle(s, t)
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

// bucketTake converts a take to micro-hits: a finite number in
// [0, MaxValue].
func bucketTake(v float64) (int64, error) {
	m, err := ratelimit.ToMicro(v)
	if err != nil || m < 0 {
		return 0, fieldErr("take", ratelimit.ErrInvalidValue, "must be a number between 0 and %g, got %g", float64(ratelimit.MaxValue), v)
	}
	return m, nil
}

// bucketErr returns key's validation error, if any, else err: a bad key is
// reported first, as if checked before the rest of the request.
func bucketErr(key string, err error) error {
	if kerr := ratelimit.ValidateKey(key); kerr != nil {
		return kerr
	}
	return err
}
