package node

import (
	"math"
	"time"
	"unicode/utf8"

	"github.com/limiterd/limiterd/ratelimit"
)

// The methods in this file are for the package that syncs a namespace with
// a store. They are safe for concurrent use with counting.

// Pending is a window whose own total changed since its last successful
// push.
type Pending struct {
	Key   string
	Size  time.Duration
	Start int64 // Unix ns
	Total int64 // own total, micro-hits, as read when collected
	e     *entry
	b     *bucket
}

// Window names one window of a key in the interest set.
type Window struct {
	Key   string
	Size  time.Duration
	Start int64 // Unix ns
	e     *entry
	slot  *slot
}

// collectDirty appends to dst every window that still counts at now (the
// current or the previous one) whose own total differs from its last
// pushed total. In a syncing namespace it visits only the keys on the
// dirty lists (markDirty), not every key: a key stays listed until a
// visit finds it pushed.
func (ns *Namespace) collectDirty(now time.Time, dst []Pending) []Pending {
	tn := now.UnixNano()
	if !ns.track { // a local namespace lists nothing: walk every key
		ns.each(func(_ string, e *entry) { dst = ns.collectEntry(e, tn, dst) })
		return dst
	}
	for i := range ns.shards.s {
		sh := &ns.shards.s[i]
		sh.dmu.Lock()
		list := sh.dirty
		sh.dirty = nil
		sh.dmu.Unlock()
		kept := list[:0]
		for _, e := range list {
			if e.dead.Load() {
				continue // reclaimed: nothing of it counts any more
			}
			// Unlisted before reading: a writer that adds after the
			// read finds the flag clear and lists the entry again.
			e.flags.And(^flagDirty)
			n := len(dst)
			dst = ns.collectEntry(e, tn, dst)
			if len(dst) > n && e.flags.Or(flagDirty)&flagDirty == 0 {
				kept = append(kept, e) // still dirty, and not listed again meanwhile
			}
		}
		clear(list[len(kept):])
		if len(kept) > 0 {
			sh.dmu.Lock()
			sh.dirty = append(kept, sh.dirty...)
			sh.dmu.Unlock()
		}
	}
	return dst
}

// collectEntry appends e's dirty windows that still count at tn to dst.
func (ns *Namespace) collectEntry(e *entry, tn int64, dst []Pending) []Pending {
	for i := range ns.sizes {
		size := ns.sizes[i]
		ws := ratelimit.WindowStart(tn, time.Duration(size))
		p := e.slot(i).p.Load()
		if p == nil || p.start < ws-size {
			continue
		}
		if b := &p.cur; b.own.Load() != b.pushed.Load() {
			dst = append(dst, Pending{Key: e.key, Size: time.Duration(size), Start: p.start, Total: b.own.Load(), e: e, b: b})
		}
		if b := p.prev.Load(); b != nil && p.start == ws && b.own.Load() != b.pushed.Load() {
			dst = append(dst, Pending{Key: e.key, Size: time.Duration(size), Start: p.start - size, Total: b.own.Load(), e: e, b: b})
		}
	}
	return dst
}

// dirtied lists e for collectDirty after its own totals changed, in a
// syncing namespace; a load when it is listed already (most calls).
func (ns *Namespace) dirtied(e *entry) {
	if ns.track && e.flags.Load()&flagDirty == 0 {
		ns.markDirty(e)
	}
}

// markDirty puts e on its shard's dirty list, unless a concurrent caller
// does.
func (ns *Namespace) markDirty(e *entry) {
	if e.flags.Or(flagDirty)&flagDirty != 0 {
		return
	}
	sh := ns.shards.of(ns.shards.hash(e.key))
	sh.dmu.Lock()
	sh.dirty = append(sh.dirty, e)
	sh.dmu.Unlock()
}

// markPushed records that p.Total was stored with version. A push that
// completes after a newer one does not move the mark back.
func (ns *Namespace) markPushed(p Pending, version int64) {
	p.e.mu.Lock()
	if version > p.b.pushedVer {
		p.b.pushedVer = version
		p.b.pushed.Store(p.Total)
	}
	p.e.mu.Unlock()
}

// uncertain is the pushed total of a bucket whose last push failed: the
// store may hold that push or not. No own total equals it, so the window
// stays dirty until a push succeeds.
const uncertain = math.MinInt64

// markUncertain records that a push of p failed but may have reached the
// store. Without it, an own total that returns to the last acknowledged
// one (a release after a hit) would not be pushed again, and the store
// would keep the failed push's total.
func (ns *Namespace) markUncertain(p Pending) {
	p.e.mu.Lock()
	p.b.pushed.Store(uncertain)
	p.e.mu.Unlock()
	ns.dirtied(p.e)
}

// collectInterest appends to dst the current and previous windows at now
// of every key touched in either of them: the windows whose other-node
// totals the node needs.
func (ns *Namespace) collectInterest(now time.Time, dst []Window) []Window {
	tn := now.UnixNano()
	ns.each(func(key string, e *entry) {
		for i := range ns.sizes {
			size := ns.sizes[i]
			ws := ratelimit.WindowStart(tn, time.Duration(size))
			s := e.slot(i)
			if p := s.p.Load(); p == nil || p.start < ws-size {
				continue
			}
			dst = append(dst,
				Window{Key: key, Size: time.Duration(size), Start: ws, e: e, slot: s},
				Window{Key: key, Size: time.Duration(size), Start: ws - size, e: e, slot: s})
		}
	})
	return dst
}

// interestWindow looks up, without walking the keys, the window of key
// of the given size starting at start, as collectInterest would list it
// at now: ok when the key is held, was touched in the current or previous
// window, and start is one of those two. ahead reports instead a held
// key's window that starts after the current one (a writer whose clock
// runs ahead).
func (ns *Namespace) interestWindow(now time.Time, key string, size time.Duration, start int64) (w Window, ok, ahead bool) {
	i := ns.sizeIndex(size)
	if i < 0 {
		return Window{}, false, false
	}
	e := ns.shards.find(ns.shards.hash(key), key)
	if e == nil || e.dead.Load() {
		return Window{}, false, false
	}
	sz := int64(size)
	ws := ratelimit.WindowStart(now.UnixNano(), size)
	sl := e.slot(i)
	switch p := sl.p.Load(); {
	case start > ws:
		return Window{}, false, true
	case p == nil || p.start < ws-sz || (start != ws && start != ws-sz):
		return Window{}, false, false
	}
	return Window{Key: e.key, Size: size, Start: start, e: e, slot: sl}, true, false
}

// learnWindow is interestWindow for a key the node may not hold: a key
// absent is inserted (without telling OnNewKey, and never past
// learnCap keys), so that the other nodes' totals of a key are known here
// before the node's first call on it (store them with setLearned). ahead
// reports a window that starts after the current one, held or not; full
// a key absent that found no room.
func (ns *Namespace) learnWindow(now time.Time, key string, size time.Duration, start int64) (w Window, ok, ahead, full bool) {
	i := ns.sizeIndex(size)
	if i < 0 || ns.est != nil {
		return Window{}, false, false, false
	}
	sz := int64(size)
	switch ws := ratelimit.WindowStart(now.UnixNano(), size); {
	case start > ws:
		return Window{}, false, true, false
	case start != ws && start != ws-sz:
		return Window{}, false, false, false
	}
	h := ns.shards.hash(key)
	e := ns.shards.find(h, key)
	if e == nil || e.dead.Load() {
		if e, full = ns.learn(h, key); e == nil {
			return Window{}, false, false, full
		}
	}
	return Window{Key: e.key, Size: size, Start: start, e: e, slot: e.slot(i)}, true, false, false
}

// learnCap returns how many keys learnWindow may fill the namespace to:
// three quarters of MaxKeys, so that keys learned from the other nodes
// never take the room of the node's own.
func (ns *Namespace) learnCap() int64 { return int64(ns.cfg.MaxKeys) / 4 * 3 }

// learn inserts key, hashed to h, for learnWindow: nil and full when the
// namespace holds learnCap keys, nil alone for a key that is not UTF-8.
func (ns *Namespace) learn(h uint64, key string) (e *entry, full bool) {
	if !utf8.ValidString(key) {
		return nil, false
	}
	e = ns.insertKey(h, key, true)
	return e, e == nil
}

// setOthers stores the other nodes' total for w, as just fetched.
func (ns *Namespace) setOthers(w Window, others int64) {
	w.e.markFetched()
	ns.setLearned(w, others)
}

// setLearned stores the other nodes' total for w, read from a change
// that tells nothing of the key's other windows: unlike setOthers, it
// leaves a key never fetched as such.
func (ns *Namespace) setLearned(w Window, others int64) {
	if b, _ := w.slot.buckets(w.Start, int64(w.Size)); b != nil {
		b.others.Store(others)
		return
	}
	if others == 0 {
		return // nothing to remember; an absent bucket reads 0
	}
	w.e.mu.Lock()
	if b := w.slot.bucketFor(w.Start, int64(w.Size)); b != nil {
		b.others.Store(others)
	}
	w.e.mu.Unlock()
}

// each calls fn for every entry, holding each shard's lock in turn (which
// blocks inserting and reclaiming there, not counting). fn must not call
// back into the namespace's locking methods.
func (ns *Namespace) each(fn func(key string, e *entry)) {
	for i := range ns.shards.s {
		sh := &ns.shards.s[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		for j := range t.slots {
			if e := t.slots[j].Load(); e != nil && e != tombstone {
				fn(e.key, e)
			}
		}
		sh.mu.Unlock()
	}
}

// reclaim frees the windows that no longer count at now, and the keys left
// with none. Memory thus follows the keys active in the last two windows.
// It returns the number of keys removed.
func (ns *Namespace) reclaim(now time.Time) int {
	tn := now.UnixNano()
	removed, freed := 0, int64(0)
	for i := range ns.shards.s {
		sh := &ns.shards.s[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		for j := range t.slots {
			s := &t.slots[j]
			e := s.Load()
			if e == nil || e == tombstone || !e.mu.TryLock() {
				continue // a locked entry is in use by a key lock or an Allow: alive
			}
			if ns.reclaimEntry(e, tn) {
				// Mark before unlinking: a lock-free writer that still
				// reaches e sees the mark after its add and retries.
				e.dead.Store(true)
				sh.remove(s)
				removed++
				freed += ns.keyCost(e.key)
			}
			e.mu.Unlock()
		}
		// Give back a table left mostly empty; memory follows the keys.
		if len(t.slots) > minTableSize && 8*sh.live < len(t.slots) {
			ns.shards.resize(sh, sh.live)
		}
		sh.mu.Unlock()
	}
	ns.keys.Add(-int64(removed))
	ns.bytes.Add(-freed)
	return removed
}

// reclaimEntry drops e's dead windows and reports whether none is left.
// The shard and e are locked, so nothing else changes e's windows.
func (ns *Namespace) reclaimEntry(e *entry, tn int64) bool {
	live := false
	for i := range ns.sizes {
		size := ns.sizes[i]
		ws := ratelimit.WindowStart(tn, time.Duration(size))
		s := e.slot(i)
		p := s.p.Load()
		switch {
		case p == nil:
		case p.start < ws-size: // both windows dead
			ns.countDropped(&p.cur)
			ns.countDropped(p.prev.Load())
			s.p.Store(nil)
		case p.start == ws-size && p.prev.Load() != nil: // prev is two windows old
			ns.countDropped(p.prev.Load())
			p.prev.Store(nil)
			live = true
		default:
			live = true
		}
	}
	return !live
}

func (ns *Namespace) countDropped(b *bucket) {
	if ns.track && b != nil && b.own.Load() != b.pushed.Load() {
		ns.dropped.Add(1)
	}
}
