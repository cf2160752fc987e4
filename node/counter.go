package node

import (
	"encoding/binary"
	"hash/maphash"
	"strings"
	gosync "sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// bucket holds one window's counts for one (key, window size).
type bucket struct {
	own    atomic.Int64 // this node's exact total, micro-hits
	others atomic.Int64 // the other incarnations' sum as of the last fetch
	pushed atomic.Int64 // own as of the newest successful push
	// pushedVer is the version of that push; guarded by entry.mu.
	pushedVer int64
}

// pair is a slot's state: the window starting at start with its bucket held
// inline (one allocation, one cache miss), and the bucket of the window just
// before it. A pair's start never changes, so one atomic load of the slot
// tells a reader which window cur counts, with no lock; a rollover replaces
// the whole pair.
type pair struct {
	start int64 // Unix ns
	cur   bucket
	// prev is the bucket of window start-size, nil if nothing was counted
	// there. It is written under entry.mu only: set at rollover or when that
	// window is first counted late, cleared when it stops counting.
	prev atomic.Pointer[bucket]
}

// slot is one window size of one key.
type slot struct {
	p atomic.Pointer[pair]
}

// entry is one key. Its fields are written under mu only on rollover, on
// Allow and by sync; Increment of a live window is lock-free.
//
// Its slots, one per window size in the namespace's order, follow it in the
// same allocation (see newEntry) and are reached with slot(i): no slice
// header, and for keys up to 16 bytes with two sizes the whole entry,
// slots and key bytes fill one 64-byte cache line.
type entry struct {
	key string
	mu  gosync.Mutex
	// dead is set, under mu, when a reclaim removes the entry from its
	// shard. A lock-free writer that finds it set after its add retries on
	// a fresh entry: its add went to memory no one reads any more.
	dead atomic.Bool
	// flags is one word so that the entry keeps its size: flagOver, set
	// when the last Allow that checked the key refused it (a key over its
	// limit is never evicted for a new one, see evict); flagFetched, set
	// once the other nodes' totals of the key were stored in it
	// (a Tick): until then the node knows only its own hits;
	// flagDirty, set while the entry is on its shard's dirty list (a
	// syncing namespace's keys whose own totals may need a push, see
	// markDirty); and in
	// the bits from bornShift, when the key was first decided near its
	// limits (see age).
	flags atomic.Uint32
}

// The bits of entry.flags.
const (
	flagOver uint32 = 1 << iota
	flagFetched
	flagDirty
	bornShift = iota
	bornMask  = 1<<(32-bornShift) - 1 // of flags >> bornShift, in ms
)

// age returns how long ago, at tn, the key was first asked its age
// (AllowMarginAt), recording tn on the first call. The time is kept in
// milliseconds modulo about 12 days: an age wraps to young again once
// per that time, which only makes a decision more careful.
func (e *entry) age(tn int64) time.Duration {
	now := uint32(tn/int64(time.Millisecond)) & bornMask
	if now == 0 {
		now = 1 // 0 means not yet recorded
	}
	for {
		f := e.flags.Load()
		if born := f >> bornShift; born != 0 {
			return time.Duration((now-born)&bornMask) * time.Millisecond
		}
		if e.flags.CompareAndSwap(f, f|now<<bornShift) {
			return 0
		}
	}
}

const entrySize = unsafe.Sizeof(entry{})

// slot returns slot i, which the caller knows to exist (i < the
// namespace's number of window sizes).
func (e *entry) slot(i int) *slot {
	return (*slot)(unsafe.Add(unsafe.Pointer(e), entrySize+uintptr(i)*unsafe.Sizeof(slot{})))
}

// buckets returns the current and previous buckets of s for the window
// starting at ws, either nil if absent.
func (s *slot) buckets(ws, size int64) (cur, prev *bucket) {
	p := s.p.Load()
	if p == nil {
		return nil, nil
	}
	switch p.start {
	case ws:
		return &p.cur, p.prev.Load()
	case ws - size:
		return nil, &p.cur
	case ws + size:
		return p.prev.Load(), nil
	}
	return nil, nil
}

// bucketFor returns the bucket of the window starting at ws, creating it (and
// rolling the slot forward) when needed. It returns nil when ws is older than
// the slot's previous window: such a window no longer counts for any rate.
// The caller holds e.mu.
func (s *slot) bucketFor(ws, size int64) *bucket {
	p := s.p.Load()
	switch {
	case p == nil:
		np := &pair{start: ws}
		s.p.Store(np)
		return &np.cur
	case p.start == ws:
		return &p.cur
	case p.start < ws:
		np := &pair{start: ws}
		if p.start == ws-size {
			np.prev.Store(&p.cur)
		}
		// p's own previous window stops counting now; unlinking it keeps
		// memory at two windows per slot (np.prev pins p).
		p.prev.Store(nil)
		s.p.Store(np)
		return &np.cur
	case p.start == ws+size:
		if b := p.prev.Load(); b != nil {
			return b
		}
		b := new(bucket)
		p.prev.Store(b)
		return b
	}
	return nil
}

// entryBlock co-allocates an entry with its slots and its key's bytes, so
// that reaching a key's counters costs no dependent load beyond the entry.
type entryBlock[S, K any] struct {
	e entry
	s S // [n]slot, at offset entrySize
	k K // [c]byte, c >= len(key)
}

// entryBlockLong is entryBlock for a key too long to keep inline.
type entryBlockLong[S any] struct {
	e entry
	s S
}

func newBlock[S, K any](key string) *entry {
	b := new(entryBlock[S, K])
	kb := unsafe.Slice((*byte)(unsafe.Pointer(&b.k)), len(key))
	copy(kb, key)
	b.e.key = unsafe.String(unsafe.SliceData(kb), len(key))
	return &b.e
}

func newBlockLong[S any](key string) *entry {
	b := new(entryBlockLong[S])
	b.e.key = strings.Clone(key)
	return &b.e
}

// blockMakers[s][c] builds an entry of blockSlots[s] slots with room for
// keys of up to 16<<c bytes, or (c = 3) a key kept apart.
var (
	blockSlots  = [...]int{1, 2, 3, 4, 8, MaxWindowSizes}
	blockMakers = [len(blockSlots)][4]func(string) *entry{
		{newBlock[[1]slot, [16]byte], newBlock[[1]slot, [32]byte], newBlock[[1]slot, [64]byte], newBlockLong[[1]slot]},
		{newBlock[[2]slot, [16]byte], newBlock[[2]slot, [32]byte], newBlock[[2]slot, [64]byte], newBlockLong[[2]slot]},
		{newBlock[[3]slot, [16]byte], newBlock[[3]slot, [32]byte], newBlock[[3]slot, [64]byte], newBlockLong[[3]slot]},
		{newBlock[[4]slot, [16]byte], newBlock[[4]slot, [32]byte], newBlock[[4]slot, [64]byte], newBlockLong[[4]slot]},
		{newBlock[[8]slot, [16]byte], newBlock[[8]slot, [32]byte], newBlock[[8]slot, [64]byte], newBlockLong[[8]slot]},
		{newBlock[[MaxWindowSizes]slot, [16]byte], newBlock[[MaxWindowSizes]slot, [32]byte], newBlock[[MaxWindowSizes]slot, [64]byte], newBlockLong[[MaxWindowSizes]slot]},
	}
)

// newEntry returns an entry for key (copied, so the table never pins a
// caller's larger buffer) with at least n slots, n <= MaxWindowSizes.
func newEntry(key string, n int) *entry {
	s := 0
	for blockSlots[s] < n {
		s++
	}
	c := 0
	for c < 3 && 16<<c < len(key) {
		c++
	}
	return blockMakers[s][c](key)
}

// table is an open-addressing hash table of entries with linear probing.
// Readers use it without any lock: slots only ever change from nil to an
// entry, or from an entry to tombstone, and a resize builds a new table.
type table struct {
	mask  uint64
	slots []atomic.Pointer[entry]
}

// tombstone marks a removed entry's slot, so probes continue past it. Its
// empty key matches no valid key.
var tombstone = new(entry)

func newTable(size int) *table {
	return &table{mask: uint64(size - 1), slots: make([]atomic.Pointer[entry], size)}
}

// find returns the entry of key, hashed to h, or nil.
func (t *table) find(h uint64, key string) *entry {
	for i := h >> shardBits; ; i++ {
		e := t.slots[i&t.mask].Load()
		if e == nil {
			return nil
		}
		if keyEqual(e.key, key) {
			return e
		}
	}
}

// keyEqual is a == b. Keys of 8 to 16 bytes (IPs, ids) are compared as two
// overlapping 8-byte words instead of through a call to the runtime's
// memequal.
func keyEqual(a, b string) bool {
	n := len(a)
	if n != len(b) {
		return false
	}
	if n < 8 || n > 16 {
		return a == b
	}
	x := unsafe.Slice(unsafe.StringData(a), n)
	y := unsafe.Slice(unsafe.StringData(b), n)
	return binary.LittleEndian.Uint64(x) == binary.LittleEndian.Uint64(y) &&
		binary.LittleEndian.Uint64(x[n-8:]) == binary.LittleEndian.Uint64(y[n-8:])
}

// shard is one part of a namespace's key space. Finding an existing key
// takes no lock; mu serialises inserting, removing and resizing.
type shard struct {
	tab  atomic.Pointer[table]
	mu   gosync.Mutex
	live int // entries in tab; guarded by mu
	used int // entries and tombstones in tab; guarded by mu
	// dirty lists the entries whose own totals may need a push (a
	// syncing namespace's), so that a tick costs what changed, not what
	// the node holds; guarded by dmu.
	dmu   gosync.Mutex
	dirty []*entry
	// Pad to whole 64-byte cache lines, so neighbouring shards do not
	// share one.
	_ [64 - (unsafe.Sizeof(atomic.Pointer[table]{})+2*unsafe.Sizeof(gosync.Mutex{})+2*unsafe.Sizeof(0)+unsafe.Sizeof([]*entry{}))%64]byte
}

const (
	shardBits    = 8
	shardCount   = 1 << shardBits
	minTableSize = 8
)

type shards struct {
	seed maphash.Seed
	s    [shardCount]shard
}

func (ss *shards) init() {
	ss.seed = maphash.MakeSeed()
	for i := range ss.s {
		ss.s[i].tab.Store(newTable(minTableSize))
	}
}

func (ss *shards) hash(key string) uint64 { return maphash.String(ss.seed, key) }

func (ss *shards) of(h uint64) *shard { return &ss.s[h&(shardCount-1)] }

// find returns the live-or-dying entry of key, or nil, without locking.
// It indexes ss.s itself, not through of, to stay within Go's inlining
// budget: one call less on every call's lookup.
func (ss *shards) find(h uint64, key string) *entry {
	return ss.s[h%shardCount].tab.Load().find(h, key)
}

// insert adds e, which must be absent, hashed to h. The caller holds sh.mu.
func (ss *shards) insert(sh *shard, h uint64, e *entry) {
	t := sh.tab.Load()
	if 4*(sh.used+1) > 3*len(t.slots) {
		t = ss.resize(sh, sh.live+1)
	}
	for i := h >> shardBits; ; i++ {
		s := &t.slots[i&t.mask]
		switch s.Load() {
		case nil:
			sh.used++
			fallthrough
		case tombstone:
			s.Store(e)
			sh.live++
			return
		}
	}
}

// remove replaces the slot holding e with a tombstone. The caller holds
// sh.mu.
func (sh *shard) remove(s *atomic.Pointer[entry]) {
	s.Store(tombstone)
	sh.live--
}

// resize replaces sh's table with one sized for n entries at most half
// full, dropping tombstones. Readers still using the old table see the
// same live entries. The caller holds sh.mu.
func (ss *shards) resize(sh *shard, n int) *table {
	size := minTableSize
	for size < 2*n {
		size *= 2
	}
	t := newTable(size)
	old := sh.tab.Load()
	for i := range old.slots {
		e := old.slots[i].Load()
		if e == nil || e == tombstone {
			continue
		}
		for j := ss.hash(e.key) >> shardBits; ; j++ {
			if s := &t.slots[j&t.mask]; s.Load() == nil {
				s.Store(e)
				break
			}
		}
	}
	sh.tab.Store(t)
	sh.used = sh.live
	return t
}

// setOver records whether the key's last Allow refused it, writing only a
// change: most calls repeat the last answer, and a store to a shared
// cache line costs more than the load.
func (e *entry) setOver(over bool) {
	if e.isOver() == over {
		return
	}
	if over {
		e.flags.Or(flagOver)
	} else {
		e.flags.And(^flagOver)
	}
}

// markFetched records that the key's others' totals were stored, writing
// only a change.
func (e *entry) markFetched() {
	if !e.fetched() {
		e.flags.Or(flagFetched)
	}
}

// isOver reports whether the key's last Allow refused it.
func (e *entry) isOver() bool { return e.flags.Load()&flagOver != 0 }

// fetched reports whether the others' totals of the key were ever stored.
func (e *entry) fetched() bool { return e.flags.Load()&flagFetched != 0 }
