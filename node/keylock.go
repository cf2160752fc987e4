package node

import (
	"time"
)

// KeyLock holds one key's lock for a read-modify-write that spans a store
// call (synchronous namespaces). Counting by others on the same key
// continues lock-free; Allow and other KeyLocks on the key wait.
type KeyLock struct {
	ns *Namespace
	e  *entry
	t  int64
}

// LockKey validates key, creates its entry if needed (subject to the key
// cap) and locks it. The caller must call Unlock.
func (ns *Namespace) LockKey(t time.Time, key string) (*KeyLock, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	e, err := ns.acquireLocked(key)
	if err != nil {
		return nil, err
	}
	tn := t.UnixNano()
	// A call whose time was read before another call rolled this key into a
	// later window (it waited for the lock) acts at the start of that
	// window: the key's older windows are gone, and Own and SetOthers need
	// buckets for the lock's current and previous windows.
	for i := range ns.sizes {
		if p := e.slot(i).p.Load(); p != nil && p.start > tn {
			tn = p.start
		}
	}
	// Give every size a current bucket so a reclaim cannot remove the entry
	// as soon as the lock is released.
	for i, size := range ns.sizes {
		e.slot(i).bucketFor(WindowStart(tn, time.Duration(size)), size)
	}
	return &KeyLock{ns: ns, e: e, t: tn}, nil
}

// Time returns the time the key was locked for.
func (k *KeyLock) Time() time.Time { return time.Unix(0, k.t) }

// Unlock releases the key.
func (k *KeyLock) Unlock() { k.e.mu.Unlock() }

// Add counts m micro-hits in slot i's current window.
func (k *KeyLock) Add(i int, m int64) {
	size := k.ns.sizes[i]
	if b := k.e.slot(i).bucketFor(WindowStart(k.t, time.Duration(size)), size); b != nil {
		b.own.Add(m)
	}
}

// Own returns slot i's current and previous windows as Pending rows holding
// this node's own totals.
func (k *KeyLock) Own(key string, i int) (cur, prev Pending) {
	size := k.ns.sizes[i]
	ws := WindowStart(k.t, time.Duration(size))
	s := k.e.slot(i)
	cb := s.bucketFor(ws, size)
	pb := s.bucketFor(ws-size, size)
	cur = Pending{Key: key, Size: time.Duration(size), Start: ws, Total: cb.own.Load(), e: k.e, b: cb}
	prev = Pending{Key: key, Size: time.Duration(size), Start: ws - size, Total: pb.own.Load(), e: k.e, b: pb}
	return cur, prev
}

// SetOthers stores the other nodes' totals for slot i's current and
// previous windows.
func (k *KeyLock) SetOthers(i int, cur, prev int64) {
	size := k.ns.sizes[i]
	ws := WindowStart(k.t, time.Duration(size))
	s := k.e.slot(i)
	s.bucketFor(ws, size).others.Store(cur)
	s.bucketFor(ws-size, size).others.Store(prev)
}

// SetOthersOf stores the other nodes' total of p's window.
func (k *KeyLock) SetOthersOf(p Pending, others int64) {
	p.b.others.Store(others)
}

// prevReadUnit is the unit of entry.prevRead.
const prevReadUnit = int64(10 * time.Millisecond)

// MarkPrevRead records that a call at the lock's time, which is not later
// than the wall clock, read the previous windows of every size from the
// store.
func (k *KeyLock) MarkPrevRead() {
	u := int32(uint32(floorDiv(k.t, prevReadUnit)))
	if u == 0 {
		u = -1 // 0 means never; one unit earlier is on the safe side
	}
	k.e.prevRead = u
}

// PrevRead reports whether the previous windows of every size were read
// (MarkPrevRead) since they closed and, once grace has passed since the
// youngest of them closed, since then. A closed window changes only by
// pushes that were under way when it closed, which land within grace
// (a synchronous call of another node is bounded by it), and by late
// pushes, which the background fetch brings: so one read after the close
// serves the calls of the grace period, one read after grace the rest of
// the window, and a synchronous call may leave a window so read out.
//
// The record is in 10 ms units modulo 2^32 (about 248 days): it is
// rounded so that every check errs towards reading again.
func (k *KeyLock) PrevRead(grace time.Duration) bool {
	x := k.e.prevRead
	if x == 0 {
		return false
	}
	for _, size := range k.ns.sizes {
		ws := WindowStart(k.t, time.Duration(size))
		since := ws
		if k.t >= ws+int64(grace) {
			since += int64(grace)
		}
		// The read happened at or after since (x·unit is at most the
		// read's time, so x ≥ ⌈since/unit⌉) and before this window's end
		// ((x+1)·unit ≤ ws + size).
		if int32(x-int32(uint32(ceilDiv(since, prevReadUnit)))) < 0 ||
			int32(int32(uint32(floorDiv(ws+size, prevReadUnit)))-(x+1)) < 0 {
			return false
		}
	}
	return true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

func ceilDiv(a, b int64) int64 { return -floorDiv(-a, b) }

// Stored reports whether p.Total is the total last acknowledged by the
// store and, if so, the version it was sent with (0 when nothing was ever
// pushed, which leaves the total 0). Re-sending a stored total with its
// own version changes nothing in the store, so a synchronous call can send
// unchanged windows that way and the store need not rewrite them.
func (k *KeyLock) Stored(p Pending) (version int64, ok bool) {
	if p.b.pushed.Load() != p.Total {
		return 0, false
	}
	return p.b.pushedVer, true
}

// Acked returns the total and version of p's window as the store last
// acknowledged them; ok is false when nothing was acknowledged or a later
// push failed (the store may hold either).
func (k *KeyLock) Acked(p Pending) (total, version int64, ok bool) {
	total = p.b.pushed.Load()
	if total == uncertain || p.b.pushedVer == 0 {
		return 0, 0, false
	}
	return total, p.b.pushedVer, true
}

// MarkUncertain is Namespace.MarkUncertain for a lock holder.
func (k *KeyLock) MarkUncertain(p Pending) {
	p.b.pushed.Store(uncertain)
}

// MarkPushed is Namespace.MarkPushed for a lock holder (which already holds
// the entry's lock).
func (k *KeyLock) MarkPushed(p Pending, version int64) {
	if version > p.b.pushedVer {
		p.b.pushedVer = version
		p.b.pushed.Store(p.Total)
	}
}

// Totals returns slot i's current and previous totals (own + others).
func (k *KeyLock) Totals(i int) (cur, prev int64) {
	size := k.ns.sizes[i]
	c, p := k.e.slot(i).buckets(WindowStart(k.t, time.Duration(size)), size)
	return total(c), total(p)
}

// Rates appends the rates of slots [lo, hi) plus extra in the current window.
func (k *KeyLock) Rates(lo, hi int, extra int64, dst []Rate) []Rate {
	for i := lo; i < hi; i++ {
		size := k.ns.sizes[i]
		ws := WindowStart(k.t, time.Duration(size))
		dst = append(dst, Rate{Size: time.Duration(size), Rate: k.ns.rate(k.e.slot(i), k.t, ws, size, extra) / Micro})
	}
	return dst
}

// SizeRange returns the slot indexes [lo, hi) a call with size addresses;
// size 0 means every size.
func (ns *Namespace) SizeRange(size time.Duration) (lo, hi int, err error) {
	return ns.sizeRange(size)
}

// Sizes returns the namespace's window sizes, ascending.
func (ns *Namespace) Sizes() []time.Duration { return ns.cfg.WindowSizes }

// CheckAllow validates an Allow request, returning its cost in micro-hits
// and, per limit, the slot index and limit in micro-hits.
func (ns *Namespace) CheckAllow(req AllowRequest) (cost int64, idx []int, limits []int64, err error) {
	lims := make([]microLimit, len(req.Limits))
	if cost, err = ns.checkAllow(&req, lims); err != nil {
		return 0, nil, nil, err
	}
	for _, l := range lims {
		idx = append(idx, l.idx)
		limits = append(limits, l.limit)
	}
	return cost, idx, limits, nil
}

// Decide completes an Allow under the key lock. When storeAllowed is not
// nil the store decided atomically and its verdict stands; otherwise the
// decision is taken here from the key's totals. It counts cost in every size
// when allowed or countRejected, and returns the decision computed from the
// key's totals (own + others) as they then are.
func (k *KeyLock) Decide(req AllowRequest, cost int64, idx []int, limits []int64, storeAllowed *bool, dst []LimitStatus) Decision {
	lims := make([]microLimit, len(idx))
	cur := make([]int64, len(idx))
	prev := make([]int64, len(idx))
	for i := range idx {
		size := k.ns.sizes[idx[i]]
		lims[i] = microLimit{idx: idx[i], size: size, limit: limits[i], ws: WindowStart(k.t, time.Duration(size))}
		cur[i], prev[i] = k.Totals(idx[i])
	}
	var d decision
	decide(&d, k.t, cost, lims, cur, prev, req.CountRejected)
	if storeAllowed == nil {
		k.count(d.counted, cost)
		return d.finish(dst, lims, req.Limits)
	}
	allowed := *storeAllowed
	d.allowed = allowed
	d.counted = allowed || req.CountRejected
	if d.counted {
		for i := range d.cur[:len(lims)] {
			d.cur[i] = cur[i] + cost
		}
		k.count(true, cost)
	} else {
		copy(d.cur[:], cur)
	}
	if !allowed && d.never < 0 && d.retry == 0 {
		d.retry = retryAfter(k.t, cost, lims, d.cur[:len(lims)], d.prev[:len(lims)])
	}
	if allowed {
		d.retry = 0
	}
	return d.finish(dst, lims, req.Limits)
}

func (k *KeyLock) count(counted bool, cost int64) {
	if counted {
		for i := range k.ns.sizes {
			k.Add(i, cost)
		}
	}
}
