package sync

import (
	"hash/maphash"
	gosync "sync"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// prevReads remembers, per key of a synchronous namespace, when a call
// last read the key's previous windows of every size from the store: the
// time of its key lock, in Unix ns. See Syncer.exchange for why.
//
// Keys are the namespace's own copies (node.KeyLock.Key), so a record pins
// no caller's buffer, and recording an existing key allocates nothing.
// A record is useless once a current window has moved past it; prune
// drops those, so memory follows the keys called in the current windows.
type prevReads struct {
	seed   maphash.Seed
	shards [prevReadShards]prevReadShard
}

// prevReadShards spreads the records over as many locks, so that pruning
// holds up few calls at a time.
const prevReadShards = 32

type prevReadShard struct {
	mu gosync.Mutex
	m  map[string]int64
}

func newPrevReads() *prevReads {
	p := &prevReads{seed: maphash.MakeSeed()}
	for i := range p.shards {
		p.shards[i].m = map[string]int64{}
	}
	return p
}

func (p *prevReads) shard(key string) *prevReadShard {
	return &p.shards[maphash.String(p.seed, key)%prevReadShards]
}

// mark records that a call locked at t read key's previous windows.
func (p *prevReads) mark(key string, t time.Time) {
	sh := p.shard(key)
	sh.mu.Lock()
	sh.m[key] = t.UnixNano()
	sh.mu.Unlock()
}

// forget drops what p knows of key, so that its next call reads its
// previous windows again (after a reset).
func (p *prevReads) forget(key string) {
	sh := p.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}

// fresh reports whether a call locked at t may leave key's previous
// windows of every size in sizes unread: they were read since they closed
// and, once grace has passed since the youngest of them closed, since
// then. A closed window changes only by pushes that were under way when
// it closed, which land within grace (a synchronous call of another node
// is bounded by it), and by late pushes, which the background tick
// fetches: so one read after the close serves the calls of the grace
// period, one read after grace the rest of the window.
func (p *prevReads) fresh(key string, t time.Time, sizes []time.Duration, grace time.Duration) bool {
	sh := p.shard(key)
	sh.mu.Lock()
	r, ok := sh.m[key]
	sh.mu.Unlock()
	if !ok {
		return false
	}
	tn := t.UnixNano()
	for _, size := range sizes {
		ws := ratelimit.WindowStart(tn, size)
		since := ws
		if tn >= ws+int64(grace) {
			since += int64(grace)
		}
		// The read happened at or after since and before this window's
		// end (a call locked earlier than the read may come later).
		if r < since || r >= ws+int64(size) {
			return false
		}
	}
	return true
}

// prune drops the records that no call locked at or after now can use:
// those older than the start of a current window of sizes.
func (p *prevReads) prune(now time.Time, sizes []time.Duration) {
	var before int64
	for i, size := range sizes {
		if ws := ratelimit.WindowStart(now.UnixNano(), size); i == 0 || ws > before {
			before = ws
		}
	}
	for i := range p.shards {
		sh := &p.shards[i]
		sh.mu.Lock()
		for key, r := range sh.m {
			if r < before {
				delete(sh.m, key)
			}
		}
		sh.mu.Unlock()
	}
}
