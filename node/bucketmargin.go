package node

import (
	"math"

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
// The others' rate is learned from the store's answers, with no state
// beyond three fields of the entry: each answer's state minus the node's
// view brought to the answer's time is what the others consumed since
// the previous answer (seen, noteOthers); each tick turns what was seen
// since the previous tick into a rate (learnRate), which decays over the
// bucket's own time (half its Hold: a full refill, a whole drain, a
// period) rather than dropping at once, so that a fixed bucket's new
// period, or a token bucket refilling after a pause, still expects the
// others' last burst. This node's own rate since its last answer stands
// in for the others' when larger: it is all there is before the first
// tick, when the nodes start on a bucket together.

// noteOthers records, before the node takes a store's state of the bucket
// (id, entry e, whose lock the caller holds) at now, what the others
// consumed since the state it replaces: the view old, brought to now,
// against the new view (the store's state with this node's consumption
// it does not hold applied). A first read says nothing of a rate: it
// starts the count.
func (e *bucketEntry) noteOthers(id *bucketID, old, view ratelimit.BucketState, now int64) {
	if !e.synced {
		e.rateAt, e.seen = now, 0
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

// learnRate turns what the others were seen to consume since the last
// tick into their rate, at a tick at now: the larger of that and the
// previous rate decayed over the bucket's time. The caller holds e.mu.
func (e *bucketEntry) learnRate(id *bucketID, now int64) {
	dt := now - e.rateAt
	if !e.synced || e.rateAt == 0 || dt <= 0 {
		return
	}
	r := float64(e.seen) / float64(dt)
	if span := float64(id.Hold() / 2); span > 0 {
		r = max(r, float64(e.rate)*math.Exp(-float64(dt)/span))
	}
	e.rate, e.seen, e.rateAt = float32(r), 0, now
}

// ahead returns the micro-hits the other nodes are expected to take from
// the bucket (id, entry e, locked) over m.Blind at tn: the larger of their
// learned rate and this node's own since its last answer, times Blind and
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
