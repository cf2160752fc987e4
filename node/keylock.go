package node

import (
	"fmt"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// KeyLock holds one key's lock for a read-modify-write that spans a store
// call (synchronous namespaces). Counting by others on the same key
// continues lock-free; Allow and other KeyLocks on the key wait.
//
// Its methods address a window size by its duration, which must be one of
// the namespace's Sizes, and one window by the Pending handle Window
// returns. A KeyLock must not be used after Unlock.
type KeyLock struct {
	// Key is the locked key: the namespace's own copy, so holding it pins
	// no caller's buffer. At is the time the key was locked for.
	Key string
	At  time.Time

	ns *Namespace
	e  *entry
	t  int64
}

// LockKey validates key, creates its entry if needed (subject to the key
// cap) and locks it. The caller must call Unlock.
func (ns *Namespace) LockKey(t time.Time, key string) (*KeyLock, error) {
	if err := ratelimit.ValidateKey(key); err != nil {
		return nil, err
	}
	e, err := ns.acquireLocked(key)
	if err != nil {
		return nil, err
	}
	tn := t.UnixNano()
	// A call whose time was read before another call rolled this key into a
	// later window (it waited for the lock) acts at the start of that
	// window: the key's older windows are gone, and Window needs buckets
	// for the lock's current and previous windows.
	for i := range ns.sizes {
		if p := e.slot(i).p.Load(); p != nil && p.start > tn {
			tn = p.start
		}
	}
	// Give every size a current bucket so a reclaim cannot remove the entry
	// as soon as the lock is released.
	for i, size := range ns.sizes {
		e.slot(i).bucketFor(ratelimit.WindowStart(tn, time.Duration(size)), size)
	}
	return &KeyLock{Key: e.key, At: time.Unix(0, tn), ns: ns, e: e, t: tn}, nil
}

// Unlock releases the key.
func (k *KeyLock) Unlock() { k.e.mu.Unlock() }

// index returns the slot index of size.
func (k *KeyLock) index(size time.Duration) int {
	i := k.ns.sizeIndex(size)
	if i < 0 {
		panic(fmt.Sprintf("node: KeyLock: %s is not a window size of %s", size, k.ns))
	}
	return i
}

// slot returns the slot of size and size in ns.
func (k *KeyLock) slot(size time.Duration) (*slot, int64) {
	return k.e.slot(k.index(size)), int64(size)
}

// Add counts m micro-hits in the current window of size.
func (k *KeyLock) Add(size time.Duration, m int64) { k.add(k.index(size), m) }

func (k *KeyLock) add(i int, m int64) {
	size := k.ns.sizes[i]
	if b := k.e.slot(i).bucketFor(ratelimit.WindowStart(k.t, time.Duration(size)), size); b != nil {
		b.own.Add(m)
		k.ns.dirtied(k.e)
	}
}

// Window returns the current and previous windows of size as Pending
// handles holding this node's own totals as they are now. A handle stays
// valid, for the methods below, until Unlock; its Total is not updated by
// later adds (call Window again for them).
func (k *KeyLock) Window(size time.Duration) (cur, prev Pending) {
	s, sz := k.slot(size)
	ws := ratelimit.WindowStart(k.t, size)
	cb := s.bucketFor(ws, sz)
	pb := s.bucketFor(ws-sz, sz)
	cur = Pending{Key: k.e.key, Size: size, Start: ws, Total: cb.own.Load(), e: k.e, b: cb}
	prev = Pending{Key: k.e.key, Size: size, Start: ws - sz, Total: pb.own.Load(), e: k.e, b: pb}
	return cur, prev
}

// setOthers stores the other nodes' total of p's window.
func (k *KeyLock) SetOthers(p Pending, others int64) {
	k.e.markFetched()
	p.b.others.Store(others)
}

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

// Pushed records the outcome of a push of p, as a Tick's Version does:
// version > 0 stored with that version (an acknowledgement older than
// the last one does not move the mark back), Uncertain failed after it
// was sent, 0 not sent.
func (k *KeyLock) Pushed(p Pending, version int64) {
	switch {
	case version == Uncertain:
		p.b.pushed.Store(uncertain)
	case version > p.b.pushedVer:
		p.b.pushedVer = version
		p.b.pushed.Store(p.Total)
	}
}

// Rates appends the rates of sizes, with extra more micro-hits counted in
// their current windows.
func (k *KeyLock) Rates(sizes []time.Duration, extra int64, dst []ratelimit.Rate) []ratelimit.Rate {
	for _, size := range sizes {
		s, sz := k.slot(size)
		ws := ratelimit.WindowStart(k.t, size)
		dst = append(dst, ratelimit.Rate{Size: size, Rate: k.ns.rate(s, k.t, ws, sz, extra) / ratelimit.Micro})
	}
	return dst
}

// Verdict is a store's atomic decision on an Allow, for Decide.
type Verdict uint8

const (
	// NoVerdict: no store decided (none can, or its call failed); Decide
	// decides from the key's totals.
	NoVerdict Verdict = iota
	// StoreAllowed and StoreDenied: the store decided, and wrote this
	// node's rows accordingly.
	StoreAllowed
	StoreDenied
)

// Decide completes an Allow checked by CheckAllow under the key lock. With
// NoVerdict the decision is taken here from the key's totals; otherwise the
// store's verdict stands. It counts the cost in every size when allowed or
// req.CountRejected, and returns the decision computed from the key's
// totals (own + others) as they then are, appending statuses to dst.
func (k *KeyLock) Decide(req ratelimit.AllowRequest, c *AllowCheck, v Verdict, dst []ratelimit.LimitStatus) ratelimit.Decision {
	var buf [MaxLimits]microLimit
	var cur, prev [MaxLimits]int64
	lims := buf[:len(c.Limits())]
	for i, l := range c.Limits() {
		idx := k.index(l.Size)
		lims[i] = microLimit{idx: idx, size: int64(l.Size), limit: l.Limit, ws: ratelimit.WindowStart(k.t, l.Size)}
		cb, pb := k.e.slot(idx).buckets(lims[i].ws, lims[i].size)
		cur[i], prev[i] = total(cb), total(pb)
	}
	n := len(lims)
	var d decision
	decide(&d, k.t, c.Cost, lims, cur[:n], prev[:n], req.CountRejected)
	if v != NoVerdict {
		// The store's verdict replaces the local one; the totals, read
		// back from the store, are the ones it decided on.
		d.allowed = v == StoreAllowed
		d.counted = d.allowed || req.CountRejected
		copy(d.cur[:], cur[:n])
		if d.counted {
			for i := range n {
				d.cur[i] += c.Cost
			}
		}
		d.retry = 0
		if !d.allowed && d.never < 0 {
			d.retry = retryAfter(k.t, c.Cost, lims, d.cur[:n], d.prev[:n])
		}
	}
	k.e.setOver(!d.allowed)
	if d.counted {
		for i := range k.ns.sizes {
			k.add(i, c.Cost)
		}
	}
	return d.finish(dst, lims, req.Limits)
}
