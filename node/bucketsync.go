package node

import (
	"slices"
	"strings"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// The cluster form of buckets (periodic and synchronous namespaces).
//
// A store keeps one shared state per bucket, and per incarnation the
// consumption it has applied (package sync has the protocol). A node
// keeps, per bucket, its own consumption (own: what its takes used, in
// micro-hits) and the part of it the store confirmed (acked). A node's
// view of a bucket is the store's last state plus its own consumption
// since, which it applies at once: its own takes are exact, the others'
// arrive with the next read of the store.

// specID is the identity of bucket b: b without Strict.
func specID(b *ratelimit.BucketSpec) bucketID {
	id := *b
	id.Strict = false
	return id
}

// ---- a node's side ------------------------------------------------------

// BucketSync is one bucket in an exchange with a store, a Tick's or a
// BucketTx's: what the store needs to apply this incarnation's
// consumption and answer, set by the node, and the store's answer, set by
// the caller in place.
type BucketSync struct {
	// Spec is the bucket (in a BucketTx, Strict as the Allow asks).
	Spec ratelimit.BucketSpec
	// Life is the node's life of the bucket, Own this incarnation's
	// consumption in that life and ApplyAt the time the store applies
	// what it does not hold of it at (Unix ns, 0: none; noteConsumed).
	Life, Own, ApplyAt int64

	// Got reports that the store answered. Before is the state it decided
	// the take from (only a BucketTx's Decide uses it), After the state
	// the call left, Applied this incarnation's consumption it holds in
	// Life, Seq the row's write count.
	Got           bool
	Before, After ratelimit.BucketState
	Applied, Seq  int64
}

// A BucketTx is one exchange of an Allow's buckets with a store while
// they stay locked (a synchronous take, a first read, a reset), in the
// style of a Tick but in one call: ExchangeBuckets locks the buckets and
// lists them; fn asks the store and records in the BucketTx its answers
// and what to do; ExchangeBuckets applies them, the one step that changes
// the buckets, and unlocks them.
type BucketTx struct {
	// Buckets lists the Allow's buckets, in their lock order; fn records
	// the store's answers in place, and neither adds nor removes any.
	Buckets []BucketSync
	// Reset starts every bucket again as a new one at the exchange's time,
	// whether the store answered or not (a reset of them).
	Reset bool
	// Decide decides the Allow, whose limits must all be buckets, and
	// counts what it consumes: from the store's Before states where it
	// answered, the store's Verdict overruling the node's own (NoVerdict:
	// the node decides, as when the store is away).
	Decide  bool
	Verdict Verdict
	// At is the exchange's time: the one given, or for a live call
	// (AllowRequest.Live) the clock once the buckets are locked.
	At time.Time

	buf [MaxLimits]BucketSync
}

// ExchangeBuckets locks, creating them, the bucket limits of req, an
// Allow checked by CheckAllow (c; its window limits are left alone),
// lists them at t (later for a live call that waited: BucketTx.At) in a
// BucketTx and calls fn with it. Then, whatever fn
// returns, it applies what fn recorded, in this order: the Reset; the
// Before states and the decision (Decide); the After states, on which
// it applies this incarnation's consumption the store does not hold yet.
// It returns the decision (without Decide, an empty one holding dst) and
// fn's error.
func (ns *Namespace) ExchangeBuckets(t time.Time, req ratelimit.AllowRequest, c *AllowCheck, dst []ratelimit.LimitStatus, fn func(*BucketTx) error) (ratelimit.Decision, error) {
	tn := t.UnixNano()
	var buf [MaxLimits]heldBucket
	hs := appendHeld(buf[:0], &req)
	if err := ns.buckets.lockAll(hs, req.Key, tn, true); err != nil {
		return ratelimit.Decision{Limits: dst}, err
	}
	defer unlockAll(hs)
	if req.Live {
		// A call that waited for another's exchange in flight is decided
		// as of when its wait ended: a store then sees this node's calls
		// at the times it makes them, never one older than the mark the
		// call before moved a bucket to, which would count as made at
		// that mark and lose the refills or drips in between.
		tn = max(tn, ns.Now().UnixNano())
	}
	tx := ns.bucketTx(hs, tn)
	err := fn(tx)
	if tx.Reset {
		for i := range hs {
			hs[i].e.resetAt(&hs[i].id, tn)
		}
	}
	d := ratelimit.Decision{Limits: dst}
	if tx.Decide {
		if c.Buckets != len(req.Limits) {
			panic("node: BucketTx.Decide of an Allow with window limits")
		}
		for i := range hs {
			if b := &tx.Buckets[i]; b.Got {
				// Before holds all of this node's consumption: what else
				// it holds is the others'.
				hs[i].e.noteOthers(&hs[i].id, hs[i].e.val, b.Before, tn)
				hs[i].e.val = b.Before
			}
		}
		ok := stepBuckets(hs, tn, c.Cost)
		if tx.Verdict != NoVerdict {
			ok = tx.Verdict == StoreAllowed
		}
		commitBuckets(hs, ok, tn)
		dd := decision{t: tn, cost: c.Cost, allowed: true, never: -1}
		d = ns.mergeKinds(dd.finish(dst, nil, nil), &req, hs, nil, dst)
		// The store's refusal stands even where this node's view had
		// room (a call the store took for a replay decides nothing):
		// nothing was counted for it here.
		d.Allowed = d.Allowed && ok
		if tn != t.UnixNano() {
			d.At = tx.At
		}
	}
	for i := range hs {
		if b := &tx.Buckets[i]; b.Got {
			hs[i].e.stored(&hs[i].id, b.After, b.Applied, b.Seq, tn, tn)
		}
	}
	return d, err
}

// noteConsumed notes, before it is counted in own, a consumption of the
// bucket (id, entry e, locked) at tn: the time the store applies what
// the store has not confirmed at (BucketSync.ApplyAt). A fixed bucket's
// is the last consumption's: counted in the newest period, never in an
// earlier one whose calls were already decided. A token or leaky
// bucket's is the first's: its refills or drips run from the first take
// of a full bucket, the first drop into an empty one, and a store that
// applied the consumption at its end would lose those in between, a
// debt its decisions would carry on while the bucket stays busy.
func (e *bucketEntry) noteConsumed(id *bucketID, tn int64) {
	if id.Kind == ratelimit.FixedLimit || !e.dirty() {
		e.applyAt = tn
	}
}

// stored takes the store's state of the bucket (id, of this entry's life)
// at write count seq, holding applied of this incarnation's consumption,
// and applies on top this incarnation's consumption the store does not
// hold yet. An answer to a call sent (at sent) before the answer taken
// last was taken, and of a lower write count, is older and ignored; a call
// sent after it that finds a lower count found the row made anew (expired
// while the store was away, say), and is taken. The caller holds e.mu.
func (e *bucketEntry) stored(id *bucketID, after ratelimit.BucketState, applied, seq, sent, now int64) {
	if seq < e.seq && sent <= e.seqAt {
		return
	}
	// The store may hold more than this node counted: a synchronous call
	// that it applied after the node stopped waiting. It counts once.
	e.own = max(e.own, applied)
	e.acked = applied
	if e.dirty() && id.Kind != ratelimit.FixedLimit {
		// What the store does not hold was consumed after the call
		// was sent.
		e.applyAt = max(e.applyAt, sent)
	}
	id.Force(&after, now, e.own-applied)
	e.noteOthers(id, e.val, after, now)
	e.seq, e.seqAt, e.synced = seq, now, true
	e.val = after
}

// restartIfForgotten starts a new life of e when the store may have let
// its row expire, no answer having been taken for the row's hold time
// (Hold; a row expires a pad later): the new life carries only the
// consumption the store never confirmed, so that what the expired row
// held is not applied again to a new one, and a new row's write count,
// which starts over, is taken. Were the row still there, the new life
// applies the same consumption to it: a life can start at any time. The
// caller holds e.mu.
func (b *bucketTable) restartIfForgotten(id *bucketID, e *bucketEntry, now int64) {
	if !e.synced || now-e.seqAt < int64(id.Hold()) {
		return
	}
	e.life = b.newLife()
	e.own -= e.acked
	e.ownAt -= e.acked
	e.acked, e.seq, e.seqAt = 0, 0, now
}

// takeBuckets lists in t the buckets to sync at t's time, in key order,
// so that a key's buckets, which one store call holds, are next to each
// other: with all, every bucket held (a periodic namespace reads them
// all); else only those whose consumption has not all reached the store.
func (ns *Namespace) takeBuckets(t *Tick, all bool) {
	b := ns.buckets
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.RLock()
		for _, head := range sh.m {
			for e := head; e != nil; e = e.next {
				e.mu.Lock()
				b.restartIfForgotten(&e.id, e, t.now)
				if all || e.dirty() {
					t.Buckets = append(t.Buckets, BucketSync{
						Spec: e.id,
						Life: e.life, Own: e.own, ApplyAt: e.applyAt,
					})
				}
				e.mu.Unlock()
			}
		}
		sh.mu.RUnlock()
	}
	slices.SortFunc(t.Buckets, func(a, b BucketSync) int { return strings.Compare(a.Spec.Key, b.Spec.Key) })
}

// applyBuckets takes, at the namespace's time, the store's answers
// recorded in t.Buckets (Got): each bucket's state, this incarnation's
// consumption it holds and its write count. An answer to calls sent at
// t's time is older than one to calls taken later. It skips a bucket no
// longer held in the life t lists.
func (ns *Namespace) applyBuckets(t *Tick) {
	if len(t.Buckets) == 0 {
		return
	}
	now := ns.clock.Now().UnixNano()
	learned := false
	for i := range t.Buckets {
		b := &t.Buckets[i]
		if !b.Got {
			continue
		}
		id := specID(&b.Spec)
		e := ns.buckets.lookup(&id)
		if e == nil {
			continue
		}
		e.mu.Lock()
		if !e.gone && e.life == b.Life {
			from := t.learnedAt
			if from == 0 {
				from = e.seqAt
			}
			e.stored(&id, b.After, b.Applied, b.Seq, t.now, now)
			e.learnRate(&id, from, t.now)
			learned = true
		}
		e.mu.Unlock()
	}
	if learned {
		t.learnedAt = t.now
	}
}

// BucketsSynced reports whether the store's state of every bucket of req
// (bucket limits, checked) was read since the node holds it: a call that
// finds one never read can ask the store first.
func (ns *Namespace) BucketsSynced(req *ratelimit.AllowRequest) bool {
	var buf [MaxLimits]heldBucket
	for _, h := range appendHeld(buf[:0], req) {
		e := ns.buckets.lookup(&h.id)
		if e == nil {
			return false
		}
		e.mu.Lock()
		ok := e.synced && !e.gone
		e.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// appendHeld appends to hs the bucket limits of req (checked), unlocked.
func appendHeld(hs []heldBucket, req *ratelimit.AllowRequest) []heldBucket {
	for i := range req.Limits {
		rl := &req.Limits[i]
		if rl.Kind == ratelimit.WindowLimit {
			continue
		}
		id, _ := bucketIdentity(rl)
		id.Key = req.Key
		hs = append(hs, heldBucket{i: i, id: id, strict: rl.Strict, wait: rl.WaitTimeout})
	}
	return hs
}

// lookup returns the entry of id, or nil, unlocked.
func (b *bucketTable) lookup(id *bucketID) *bucketEntry {
	sh, h := b.bucketRef(id)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.find(h, id)
}
