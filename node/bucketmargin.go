package node

import (
	"math"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// Escalation of buckets (see AllowMarginAt). A periodic node's view of a
// bucket is the store's state as of its last answer plus this node's own
// consumption since: the other nodes' consumption since that answer is
// missing from it. A take is clear of a bucket's capacity when the state
// it leaves still has room for what the others are expected to take
// while this node cannot see them: their recent rate × Blind × Safety,
// and, when anyone took from it lately, at least one more call of the
// same cost (two nodes taking the last tokens at once is what
// over-admits).
//
// The rate is learned from the store's answers, with no state beyond
// three fields of the entry: each answer's state minus the node's view
// brought to the answer's time is what the others consumed since the
// previous answer (seen, noteOthers); each tick turns it, and this
// node's own consumption since the tick before, into a rate (learnRate).
// The rate is the larger of the others' and this node's own: under
// balancing that spreads a key's calls, each node takes about as fast
// as this one, and the node's own is all there is when the nodes start
// on a bucket together. It decays over the bucket's time (half its
// Hold: a full refill, a whole drain, a period) rather than dropping at
// once, so that a fixed bucket's new period, or a token bucket refilling
// after a pause, still expects the last burst.

// noteOthers adds to seen what the others consumed between the state the
// node holds of the bucket (id, entry e, locked), its view old, and the
// store's state it takes at now, the view new (the store's state with
// this node's consumption it does not hold applied). A first read only
// starts the count.
func (e *bucketEntry) noteOthers(id *bucketID, old, view ratelimit.BucketState, now int64) {
	if !e.synced {
		e.seen, e.ownAt = 0, e.own
		return
	}
	id.Force(&old, now, 0)
	d := view.Level - old.Level // drops or counts the others added
	if id.Kind == ratelimit.TokenLimit {
		d = -d // tokens they took
	}
	if d > 0 {
		e.seen += float32(d)
	}
}

// learnRate learns the bucket's rate at a tick at now whose answer it has
// taken, the tick before at from: the larger of the others' and this
// node's since, or of the previous rate decayed over the bucket's time.
// The caller holds e.mu.
func (e *bucketEntry) learnRate(id *bucketID, from, now int64) {
	dt := float64(now - from)
	if !(dt > 0) {
		return
	}
	r := max(float64(e.seen), float64(e.own-e.ownAt)) / dt
	if span := float64(id.Hold() / 2); span > 0 {
		r = max(r, float64(e.rate)*math.Exp(-dt/span))
	}
	e.rate, e.seen, e.ownAt = float32(r), 0, e.own
}

// ahead returns the micro-hits the other nodes are expected to take from
// the bucket (id, entry e, locked) over m.Blind at tn: the larger of the
// learned rate and this node's own since the store's last answer (which
// learning takes in), times Blind and
// Safety, and at least cost when either rate is not 0 (as othersAhead:
// a bucket nobody took from lately expects nothing). Like othersAhead, a
// rate is measured over at least min(Blind, the bucket's time / 4), so
// that the first takes after an answer do not read as a storm.
func (e *bucketEntry) ahead(id *bucketID, tn, cost int64, m *Margin) int64 {
	span := int64(id.Hold() / 2)
	grew := max(tn-e.seqAt, min(int64(m.Blind), span/4), 1)
	rate := max(float64(e.rate), float64(e.own-e.acked)/float64(grew))
	if !(rate > 0) {
		return 0
	}
	a := rate * float64(m.Blind) * m.Safety
	if !(a < math.MaxInt64/2) {
		return math.MaxInt64 / 2
	}
	return max(int64(math.Ceil(a)), cost)
}

// bucketsNear reports whether a take of cost at tn that every bucket of
// hs admits (stepBuckets: h.val is the state it leaves) leaves one of
// them without room for what the others are expected to take (ahead). A
// bucket never read from the store (the store was away) is decided here:
// nothing better is known of it. A take of nothing is never near.
func bucketsNear(hs []heldBucket, tn, cost int64, m *Margin) bool {
	if cost <= 0 {
		return false
	}
	for k := range hs {
		h := &hs[k]
		if h.e == nil || !h.e.synced {
			continue
		}
		after := h.val
		if !h.id.Take(&after, true, tn, h.e.ahead(&h.id, tn, cost, m), false).Allowed {
			return true
		}
	}
	return false
}

// AllowKindsAt decides req at t like AllowAt, an Allow with bucket limits
// and perhaps window limits too, its buckets decided by a store: the
// windows from the node's state, the key's entry locked throughout; when
// they admit, fn is called, as by ExchangeBuckets, with the buckets
// locked and listed in a BucketTx, and records the store's answers as
// for a Decide (Before, Verdict, After: the store took the cost from
// every bucket, or from none, atomically). The Allow is admitted when the
// windows admit and the store's Verdict does (NoVerdict: the node's own
// state of the buckets decides, as when the store is away). fn sets no
// Reset. It returns fn's error.
//
// The store decides the buckets alone: a periodic namespace's Allow of
// windows and buckets near a bucket's capacity (package sync).
func (ns *Namespace) AllowKindsAt(t time.Time, req ratelimit.AllowRequest, dst []ratelimit.LimitStatus, fn func(*BucketTx) error) (ratelimit.Decision, error) {
	var buf [MaxLimits]microLimit
	lims, cost, kinds, err := ns.checkAllow(&req, buf[:])
	if err != nil {
		return ratelimit.Decision{Limits: dst}, err
	}
	if !kinds {
		return ns.AllowAt(t, req, dst)
	}
	d, _, err := ns.allowKindsWith(t, &req, lims, cost, nil, fn, dst)
	return d, err
}

// bucketTx lists hs, locked, in a BucketTx at tn, as ExchangeBuckets does.
func (ns *Namespace) bucketTx(hs []heldBucket, tn int64) *BucketTx {
	tx := &BucketTx{At: time.Unix(0, tn)}
	tx.Buckets = tx.buf[:len(hs)]
	for i := range hs {
		h := &hs[i]
		ns.buckets.restartIfForgotten(&h.id, h.e, tn)
		spec := h.id
		spec.Strict = h.strict
		tx.Buckets[i] = BucketSync{Spec: spec, Life: h.e.life, Own: h.e.own, ApplyAt: h.e.applyAt}
	}
	return tx
}

// before takes the states the store decided from, where it answered.
func (tx *BucketTx) before(hs []heldBucket, tn int64) {
	for i := range hs {
		if b := &tx.Buckets[i]; b.Got {
			hs[i].e.noteOthers(&hs[i].id, hs[i].e.val, b.Before, tn)
			hs[i].e.val = b.Before
		}
	}
}

// after takes the states the store's call left, where it answered.
func (tx *BucketTx) after(hs []heldBucket, tn int64) {
	for i := range hs {
		if b := &tx.Buckets[i]; b.Got {
			hs[i].e.stored(&hs[i].id, b.After, b.Applied, b.Seq, tn, tn)
		}
	}
}
