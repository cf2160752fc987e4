package sync

import (
	"context"
	"hash/maphash"
	"slices"
	gosync "sync"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// Group commit of the synchronous calls of one key. A call holds the key
// for one store round trip; the calls of the same key that arrive
// meanwhile queue, and when the round trip ends the first of them leads
// the whole queue (as far as it goes together, below) through the next
// one: one round trip serves every call that waited for it, in arrival
// order, so a hot key's throughput grows with its concurrency instead of
// being one call per round trip.
//
// Each call's answer is what it would get alone in that order:
//
//   - Increment and Rate calls: the leader adds every queued value, pushes
//     the new totals and reads the others' once (one PushFetch), and
//     answers each call with the rates as they were just after its own
//     value (the later calls' values taken off).
//   - Allow calls, on a GroupAllower: the store decides the entries one
//     after the other in one atomic step; the node then replays the
//     verdicts in the same order (KeyLock.Decide), so its totals and each
//     answer follow the same sequence.
//   - Allow calls on a store that cannot decide (no GroupAllower): one
//     exchange brings the others' totals, then the node decides each call
//     in order.
//
// A group holds calls of one kind whose times fall in the same windows of
// every size; the next call that differs starts the next group. Every call
// of a group acts at the group's latest time (at most one round trip after
// its own): the time the decision is actually taken.
//
// A queued call whose context ends before a group takes it leaves the
// queue and returns the context's error: nothing of it was counted. Once
// taken, the call is in a store call that nothing cancels but CallTimeout
// (one caller giving up must not fail the others' decisions), and its
// caller waits for it: a hit handed to the store is counted once and
// answered.

// maxGroup bounds the calls one store call decides, and so the time one
// script or statement holds the store (Redis runs one at a time).
const maxGroup = 512

// groupShards spreads the keys' queues over several maps so that calls of
// different keys rarely meet on one mutex.
const groupShards = 64

// groups holds the queue of every key with a call in flight.
type groups struct {
	seed   maphash.Seed
	shards [groupShards]groupShard
}

type groupShard struct {
	mu   gosync.Mutex
	keys map[string]*keyQueue
	_    [40]byte // keeps neighbouring shards' mutexes off one cache line
}

// keyQueue is one key's calls not yet taken by a group. The leader of the
// group in flight, if any, owns the key until it hands the queue on.
type keyQueue struct {
	calls []*call
	// busy: a group of this key is in flight; a new call queues.
	busy bool
}

func newGroups() *groups {
	g := &groups{seed: maphash.MakeSeed()}
	for i := range g.shards {
		g.shards[i].keys = make(map[string]*keyQueue)
	}
	return g
}

func (g *groups) shard(key string) *groupShard {
	return &g.shards[maphash.String(g.seed, key)%groupShards]
}

// callKind says which calls may share a group.
type callKind uint8

const (
	kindExchange   callKind = iota // IncrementAt, RateAt
	kindAllowGroup                 // AllowAt, decided by the store's GroupAllower
)

// call is one synchronous call waiting for, or taken by, a group.
type call struct {
	kind callKind
	t    int64 // Unix ns
	// kindExchange: value m counted in sizes (m = 0 and rate: a RateAt
	// with cur_diff extra), answered into rates.
	sizes []time.Duration
	m     int64
	rate  bool
	extra int64
	rates []ratelimit.Rate
	// Allow kinds.
	req ratelimit.AllowRequest
	chk node.AllowCheck
	dec ratelimit.Decision
	err error

	// Guarded by the shard's mutex: taken by a group, or asked to lead.
	taken, lead bool
	// wake receives once: lead, or the answer is ready.
	wake chan struct{}
}

var callPool = gosync.Pool{New: func() any { return &call{wake: make(chan struct{}, 1)} }}

func newCall(kind callKind, t time.Time) *call {
	c := callPool.Get().(*call)
	c.kind, c.t = kind, t.UnixNano()
	return c
}

// free returns c to the pool; nothing refers to it any more.
func freeCall(c *call) {
	*c = call{wake: c.wake}
	callPool.Put(c)
}

// run queues c for key and returns when c is answered (c.err, c.rates,
// c.dec), or with ctx's error when ctx ends before a group takes c.
func (wt *synchronous) run(ctx context.Context, key string, c *call) error {
	sh := wt.groups.shard(key)
	sh.mu.Lock()
	q := sh.keys[key]
	if q == nil {
		q = &keyQueue{}
		sh.keys[key] = q
	}
	q.calls = append(q.calls, c)
	if !q.busy {
		q.busy = true
		sh.mu.Unlock()
		wt.lead(ctx, sh, key, q)
		return nil
	}
	sh.mu.Unlock()
	select {
	case <-c.wake:
	case <-ctx.Done():
		sh.mu.Lock()
		if !c.taken && !c.lead {
			q.calls = slices.DeleteFunc(q.calls, func(o *call) bool { return o == c })
			sh.mu.Unlock()
			return ctx.Err()
		}
		sh.mu.Unlock()
		<-c.wake
	}
	if c.lead {
		wt.lead(ctx, sh, key, q)
	}
	return nil
}

// lead runs groups of key's queue, whose first call is the caller's, until
// the caller's call is answered, then hands the queue to its next call (or
// drops the empty queue).
func (wt *synchronous) lead(ctx context.Context, sh *groupShard, key string, q *keyQueue) {
	sh.mu.Lock()
	batch := wt.take(q)
	sh.mu.Unlock()

	wt.runGroup(context.WithoutCancel(ctx), key, batch)

	sh.mu.Lock()
	if len(q.calls) > 0 {
		next := q.calls[0]
		next.lead = true
		next.wake <- struct{}{}
	} else {
		q.busy = false
		delete(sh.keys, key)
	}
	sh.mu.Unlock()
	// batch[0] is the caller's own call, answered by returning.
	for _, c := range batch[1:] {
		c.wake <- struct{}{}
	}
}

// take removes from q the calls of the next group: the first call and
// those after it of its kind in its windows, at most maxGroup. The caller holds the shard's
// mutex.
func (wt *synchronous) take(q *keyQueue) []*call {
	first := q.calls[0]
	n := 1
	for n < len(q.calls) && n < maxGroup && q.calls[n].kind == first.kind && wt.sameWindows(first.t, q.calls[n].t) {
		n++
	}
	batch := slices.Clone(q.calls[:n])
	for _, c := range batch {
		c.taken = true
	}
	q.calls = slices.Delete(q.calls, 0, n)
	return batch
}

// sameWindows reports whether a and b fall in the same window of every
// size.
func (wt *synchronous) sameWindows(a, b int64) bool {
	s := wt.s
	for _, size := range s.ns.Sizes() {
		if ratelimit.WindowStart(a, size) != ratelimit.WindowStart(b, size) {
			return false
		}
	}
	return true
}

// runGroup answers the calls of one group of key.
func (wt *synchronous) runGroup(ctx context.Context, key string, batch []*call) {
	s := wt.s
	t := batch[0].t
	for _, c := range batch[1:] {
		t = max(t, c.t)
	}
	k, err := s.ns.LockKey(time.Unix(0, t), key)
	if err != nil {
		for _, c := range batch {
			c.err = err
		}
		return
	}
	defer k.Unlock()
	switch batch[0].kind {
	case kindExchange:
		wt.exchangeGroup(ctx, k, batch)
	case kindAllowGroup:
		wt.allowGroup(ctx, k, batch)
	}
}

// exchangeGroup counts the group's Increments, writes the totals through
// once and answers each call with the rates just after its own value.
func (wt *synchronous) exchangeGroup(ctx context.Context, k *node.KeyLock, batch []*call) {
	s := wt.s
	all := s.ns.Sizes()
	var used [node.MaxWindowSizes]bool
	for _, c := range batch {
		for _, size := range c.sizes {
			used[slices.Index(all, size)] = true
			if !c.rate {
				k.Add(size, c.m)
			}
		}
	}
	var buf [node.MaxWindowSizes]time.Duration
	sizes := buf[:0]
	for i, size := range all {
		if used[i] {
			sizes = append(sizes, size)
		}
	}
	wt.exchange(ctx, k, sizes)
	// later[i]: the values counted in size all[i] by the calls after the
	// one being answered, walking back from the last.
	var later [node.MaxWindowSizes]int64
	for j := len(batch) - 1; j >= 0; j-- {
		c := batch[j]
		for i := range c.sizes {
			x := slices.Index(all, c.sizes[i])
			extra := -later[x]
			if c.rate {
				extra += c.extra
			}
			c.rates = k.Rates(c.sizes[i:i+1], extra, c.rates)
		}
		if !c.rate {
			for _, size := range c.sizes {
				later[slices.Index(all, size)] += c.m
			}
		}
	}
}

// allowGroup has the store decide the group's Allows in one atomic step
// (one call alone as a group of one, decideInStore) and replays its
// verdicts in order.
func (wt *synchronous) allowGroup(ctx context.Context, k *node.KeyLock, batch []*call) {
	s := wt.s
	if !s.storeUp() {
		s.fallback(errPresumedDown)
		for _, c := range batch {
			c.dec = k.Decide(c.req, &c.chk, node.NoVerdict, c.dec.Limits)
		}
		return
	}
	if len(batch) == 1 {
		c := batch[0]
		c.dec = s.decideInStore(ctx, k, c.req, &c.chk, c.dec.Limits)
		return
	}
	ga := s.can.ga
	all := s.ns.Sizes()
	var win [node.MaxWindowSizes]int // index in req.Windows + 1 per size of all
	var costs int64                  // the entries' costs, summed up to 2^53
	req := GroupAllowRequest{Inc: s.inc, At: k.At.UnixNano(), Entries: make([]GroupEntry, len(batch))}
	limits := make([]GroupLimit, 0, len(batch))
	for i, c := range batch {
		start := len(limits)
		for _, l := range c.chk.Limits() {
			x := slices.Index(all, l.Size)
			if win[x] == 0 {
				req.Windows = append(req.Windows, GroupWindow{Size: l.Size})
				win[x] = len(req.Windows)
			}
			limits = append(limits, GroupLimit{Window: win[x] - 1, Limit: l.Limit})
		}
		req.Entries[i] = GroupEntry{Cost: c.chk.Cost, CountRejected: c.req.CountRejected, Limits: limits[start:len(limits):len(limits)]}
		costs = min(costs+c.chk.Cost, 1<<53)
	}
	version := s.versions.Next()
	pend := make([]node.Pending, 0, len(req.Windows))
	var own int64 // the largest own current total
	for i := range req.Windows {
		w := &req.Windows[i]
		cur, prev := k.Window(w.Size)
		w.Cur, w.Prev = s.row(cur, version), s.callRow(k, prev, version)
		own = max(own, abs(w.Cur.Total))
		pend = append(pend, prev)
	}
	if len(req.Windows) == 0 || own+costs >= 1<<53 {
		// Nothing for the store to decide, or sums beyond float64's exact
		// integers (totals of billions of hits): groups of one, which the
		// store writes exactly whatever their totals.
		for _, c := range batch {
			if s.storeUp() {
				c.dec = s.decideInStore(ctx, k, c.req, &c.chk, c.dec.Limits)
			} else {
				s.fallback(errPresumedDown)
				c.dec = k.Decide(c.req, &c.chk, node.NoVerdict, c.dec.Limits)
			}
		}
		return
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
	defer cancel()
	allowed := make([]bool, len(batch))
	others := make([][2]int64, len(req.Windows))
	tctx, end := s.trace(cctx, "AllowGroup", len(batch))
	err := ga.AllowGroup(tctx, &req, allowed, others)
	end(err)
	s.observe(ctx, err)
	if err != nil {
		// The store may have written the rows sent with a new version.
		for i := range req.Windows {
			cur, _ := k.Window(req.Windows[i].Size)
			k.Pushed(cur, node.Uncertain)
			if req.Windows[i].Prev.Version == version {
				k.Pushed(pend[i], node.Uncertain)
			}
		}
		s.fallback(err)
		for _, c := range batch {
			c.dec = k.Decide(c.req, &c.chk, node.NoVerdict, c.dec.Limits)
		}
		return
	}
	for i := range req.Windows {
		cur, prev := k.Window(req.Windows[i].Size)
		k.SetOthers(cur, others[i][0])
		k.SetOthers(prev, others[i][1])
	}
	for i, c := range batch {
		c.dec = k.Decide(c.req, &c.chk, verdict(allowed[i]), c.dec.Limits)
	}
	// The store wrote prev as sent and cur with every counted cost: this
	// node's totals now.
	for i := range req.Windows {
		cur, prev := k.Window(req.Windows[i].Size)
		k.Pushed(cur, version)
		k.Pushed(prev, req.Windows[i].Prev.Version)
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
