package node

import (
	"hash/maphash"
	gosync "sync"
	"sync/atomic"
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

// pair is an immutable snapshot of a slot: the bucket of the window starting
// at start and, when present, the bucket of the window just before it.
// Replacing the whole pair on rollover lets readers see cur and prev
// consistently with one atomic load and no lock.
type pair struct {
	start int64 // Unix ns
	cur   *bucket
	prev  *bucket // window start-size; nil if nothing was counted there
}

// slot is one window size of one key.
type slot struct {
	p atomic.Pointer[pair]
}

// entry is one key. Its fields are written under mu only on rollover, on
// Allow and by sync; Increment of a live window is lock-free.
type entry struct {
	mu    gosync.Mutex
	slots []slot // one per window size, in the namespace's order
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
		return p.cur, p.prev
	case ws - size:
		return nil, p.cur
	case ws + size:
		return p.prev, nil
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
		b := new(bucket)
		s.p.Store(&pair{start: ws, cur: b})
		return b
	case p.start == ws:
		return p.cur
	case p.start < ws:
		np := &pair{start: ws, cur: new(bucket)}
		if p.start == ws-size {
			np.prev = p.cur
		}
		s.p.Store(np)
		return np.cur
	case p.start == ws+size:
		if p.prev != nil {
			return p.prev
		}
		b := new(bucket)
		s.p.Store(&pair{start: p.start, cur: p.cur, prev: b})
		return b
	}
	return nil
}

// shard is one part of a namespace's key space. Readers of existing keys
// take the read lock only; the write lock is for inserting and reclaiming.
type shard struct {
	mu gosync.RWMutex
	m  map[string]*entry
	// Pad to a whole 64-byte cache line, so neighbouring shards' locks do
	// not share one.
	_ [64 - (unsafe.Sizeof(gosync.RWMutex{})+unsafe.Sizeof(map[string]*entry(nil)))%64]byte
}

const shardCount = 256

type shards struct {
	seed maphash.Seed
	s    [shardCount]shard
}

func (ss *shards) init() {
	ss.seed = maphash.MakeSeed()
	for i := range ss.s {
		ss.s[i].m = make(map[string]*entry)
	}
}

func (ss *shards) of(key string) *shard {
	return &ss.s[maphash.String(ss.seed, key)&(shardCount-1)]
}
