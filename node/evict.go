package node

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// evictSample is how many held keys of its shard a new key at the cap
// looks at to choose the one it replaces.
const evictSample = 8

// Eviction makes room for new keys at the key cap (Config.OnFull =
// OnFullEvict; Stats.EvictedKeys counts it).
//
// The policy is a sampled least-weight eviction. A new key at the cap
// looks at up to evictSample keys of its own shard (1/256 of the table),
// from a random position (and of the next free shards when its own holds
// fewer), and evicts the one whose sliding rates at now
// weigh least (their sum over the window sizes): a key whose windows all
// ended weighs 0 and goes first, and among keys of the current window the
// one with the fewest hits goes, so a steady key outlasts a flood of
// one-hit keys. A key is never a candidate when
//   - the last Allow that checked it refused it (it is over its limit:
//     evicting it would reset its count and let it through), or
//   - one of its windows that still counts was not pushed to the store
//     (periodic and synchronous namespaces: its hits would be lost), or
//   - it is locked (an Allow, a key lock or a sync is using it).
//
// evict removes the best candidate for eviction, if any, and reports
// whether it did, for a new key hashed to h. It samples the key's shard,
// whose lock the caller holds, then, while
// fewer than evictSample keys were seen (a small cap spreads few keys over
// 256 shards), the following shards whose lock is free: TryLock never
// waits, so no two inserts can deadlock.
func (ns *Namespace) evict(h uint64) bool {
	tn := ns.clock.Now().UnixNano()
	var c evictCand
	sh, first := ns.shards.of(h), int(h&(shardCount-1))
	var locked [shardCount]*shard
	nl := 0
	for k := 0; k < shardCount && c.seen < evictSample; k++ {
		s := &ns.shards.s[(first+k)%shardCount]
		if s != sh {
			if !s.mu.TryLock() {
				continue
			}
			locked[nl] = s
			nl++
		}
		ns.sample(s, tn, &c)
	}
	ok := c.best != nil
	if ok {
		// Mark before unlinking, as reclaim does: a lock-free writer that
		// still reaches the entry sees the mark after its add and retries.
		c.best.dead.Store(true)
		c.shard.remove(c.slot)
		c.best.mu.Unlock()
		ns.evicted.Add(1) // its place in ns.keys passes to the new key
		ns.bytes.Add(-ns.keyCost(c.best.key))
	}
	for _, s := range locked[:nl] {
		s.mu.Unlock()
	}
	return ok
}

// evictCand is the best candidate found so far, locked, in its shard.
type evictCand struct {
	best  *entry
	shard *shard
	slot  *atomic.Pointer[entry]
	score float64
	seen  int
}

// sample looks at up to evictSample-c.seen keys of sh from a random
// position, keeping the least weighty that qualifies in c. The caller
// holds sh.mu.
func (ns *Namespace) sample(sh *shard, tn int64, c *evictCand) {
	t := sh.tab.Load()
	n := len(t.slots)
	start := rand.IntN(n)
	for j := 0; j < n && c.seen < evictSample; j++ {
		slot := &t.slots[(start+j)&int(t.mask)]
		e := slot.Load()
		if e == nil || e == tombstone {
			continue
		}
		c.seen++
		if e.isOver() || !e.mu.TryLock() {
			continue
		}
		score, ok := ns.evictScore(e, tn)
		if ok && (c.best == nil || score < c.score) {
			if c.best != nil {
				c.best.mu.Unlock()
			}
			c.best, c.shard, c.slot, c.score = e, sh, slot, score
			continue
		}
		e.mu.Unlock()
	}
}

// evictScore returns the weight of e at tn, the sum of its sliding rates
// in micro-hits, and whether it may be evicted at all: not when a window
// that still counts is dirty. The caller holds e.mu.
func (ns *Namespace) evictScore(e *entry, tn int64) (float64, bool) {
	var score float64
	for i, size := range ns.sizes {
		s := e.slot(i)
		p := s.p.Load()
		if p == nil {
			continue
		}
		ws := ratelimit.WindowStart(tn, time.Duration(size))
		if ns.track && ((p.start >= ws-size && dirty(&p.cur)) || (p.start >= ws && dirty(p.prev.Load()))) {
			return 0, false
		}
		score += ns.rate(s, tn, ws, size, 0)
	}
	return score, true
}

// dirty reports whether b's own total differs from its last pushed one.
func dirty(b *bucket) bool {
	return b != nil && b.own.Load() != b.pushed.Load()
}
