package node

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// MaxLimits is the most limits one Allow may check.
const MaxLimits = MaxWindowSizes

// AllowCheck is an AllowRequest validated by CheckAllow, in micro-hits.
type AllowCheck struct {
	Cost int64 // micro-hits
	// Buckets is the number of bucket limits (token, leaky, fixed), which
	// Limits leaves out: only AllowAt and ExchangeBuckets decide them.
	Buckets int
	n       int
	limits  [MaxLimits]CheckedLimit
}

// CheckedLimit is one limit of an AllowCheck.
type CheckedLimit struct {
	Size  time.Duration // one of the namespace's sizes
	Limit int64         // micro-hits
}

// Limits returns the checked sliding-window limits in request order.
func (c *AllowCheck) Limits() []CheckedLimit { return c.limits[:c.n] }

// CheckAllow validates an Allow request, with the same errors as AllowAt,
// for a caller that decides under a KeyLock (KeyLock.Decide).
func (ns *Namespace) CheckAllow(req ratelimit.AllowRequest) (AllowCheck, error) {
	var few [fewLimits]microLimit // as in AllowAt
	buf := few[:]
	if len(req.Limits) > len(few) {
		var all [MaxLimits]microLimit
		buf = all[:]
	}
	lims, cost, kinds, err := ns.checkAllow(&req, buf)
	if err != nil {
		return AllowCheck{}, err
	}
	if kinds {
		if err := ns.checkKinds(req.Limits); err != nil {
			return AllowCheck{}, err
		}
	}
	c := AllowCheck{Cost: cost}
	for _, l := range lims {
		if l.idx < 0 {
			c.Buckets++
			continue
		}
		c.limits[c.n] = CheckedLimit{Size: time.Duration(l.size), Limit: l.limit}
		c.n++
	}
	return c, nil
}

// microLimit is a validated limit in the namespace's terms.
type microLimit struct {
	idx   int   // slot index
	size  int64 // ns
	limit int64 // micro-hits
	ws    int64 // start of the current window at the decision's time
}

// checkAllow validates req and returns its limits, held in buf, its cost,
// and whether some limit is a bucket (whose entry in lims is then unused,
// with idx -1). buf holds min(len(req.Limits), MaxLimits) limits at least.
func (ns *Namespace) checkAllow(req *ratelimit.AllowRequest, buf []microLimit) (lims []microLimit, cost int64, kinds bool, err error) {
	if err := checkKeyLen(req.Key); err != nil {
		return nil, 0, false, err
	}
	if len(req.Limits) <= MaxLimits { // else checkAllowRest rejects them
		lims = buf[:len(req.Limits):len(req.Limits)]
	}
	if cost, kinds, err = ns.checkAllowRest(req, lims); err != nil {
		return nil, 0, false, keyErrOr(req.Key, err)
	}
	return lims, cost, kinds, nil
}

// checkAllowRest is checkAllow after the key's length.
func (ns *Namespace) checkAllowRest(req *ratelimit.AllowRequest, lims []microLimit) (cost int64, kinds bool, err error) {
	cost, ok := wholeMicro(req.Cost)
	if !ok {
		if cost, err = ratelimit.ToMicroField("cost", req.Cost); err != nil {
			return 0, false, err
		}
	}
	if cost < 0 {
		return 0, false, fieldErr("cost", ratelimit.ErrInvalidValue, "must not be negative, got %g", req.Cost)
	}
	if len(req.Limits) == 0 {
		return 0, false, fieldErr("limits", ratelimit.ErrInvalidLimit, "at least one limit is required")
	}
	if len(req.Limits) > MaxLimits {
		return 0, false, fieldErr("limits", ratelimit.ErrInvalidLimit, "at most %d limits, got %d", MaxLimits, len(req.Limits))
	}
	for i := range req.Limits {
		l := &req.Limits[i] // a Limit carries every kind's parameters: no copy
		if l.Kind != ratelimit.WindowLimit {
			if err := checkBucketLimit(req.Limits, i); err != nil {
				return 0, false, err
			}
			lims[i] = microLimit{idx: -1}
			kinds = true
			continue
		}
		switch {
		case l.Size == 0:
			return 0, false, fieldErr(fmt.Sprintf("limits[%d].window_size", i), ratelimit.ErrInvalidLimit, "is required")
		case l.Size < 0:
			return 0, false, fieldErr(fmt.Sprintf("limits[%d].window_size", i), ErrInvalidWindow, "must be positive, got %s", l.Size)
		}
		idx := ns.sizeIndex(l.Size)
		if idx < 0 {
			return 0, false, ns.unknownWindowField(fmt.Sprintf("limits[%d].window_size", i), l.Size)
		}
		m, ok := wholeMicro(l.Limit)
		if !ok {
			if m, err = ratelimit.ToMicro(l.Limit); err != nil {
				m = -1 // refused below
			}
		}
		if m < 0 {
			return 0, false, fieldErr(fmt.Sprintf("limits[%d].limit", i), ratelimit.ErrInvalidLimit, "must be a finite number between 0 and %g, got %g", float64(ratelimit.MaxValue), l.Limit)
		}
		for _, prev := range lims[:i] {
			if prev.idx == idx {
				return 0, false, fieldErr(fmt.Sprintf("limits[%d].window_size", i), ratelimit.ErrInvalidLimit, "window size %s given twice", l.Size)
			}
		}
		lims[i] = microLimit{idx: idx, size: int64(l.Size), limit: m}
	}
	return cost, kinds, nil
}

// AllowAt decides at t whether req.Cost more hits fit under every limit and,
// if so (or with CountRejected), counts them in every window size of the
// namespace. Statuses are appended to dst.
//
// Allow is exact on one node: calls for the same key are serialised, so no
// two racing calls both take the last unit. Increments running at the same
// time are not serialised with it and may be counted just before or after.
//
// Limits of other kinds (buckets) are decided here, on this node's state
// of them, together with the windows: the cost is admitted in every limit
// or in none (see allowKinds).
func (ns *Namespace) AllowAt(t time.Time, req ratelimit.AllowRequest, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	// Most requests check a few limits: a buffer for those is cheaper to
	// clear, on every call, than one for MaxLimits (Go clears a variable
	// where it is declared).
	var few [fewLimits]microLimit
	buf := few[:]
	if len(req.Limits) > len(few) {
		var all [MaxLimits]microLimit
		buf = all[:]
	}
	lims, cost, kinds, err := ns.checkAllow(&req, buf)
	if err != nil {
		return ratelimit.Decision{Limits: dst}, err
	}
	if kinds {
		return ns.allowKinds(t, &req, lims, cost, dst)
	}
	if ns.est != nil {
		return ns.est.allow(t.UnixNano(), &req, lims, cost, dst)
	}
	e, err := ns.acquireLocked(req.Key)
	if err != nil {
		return ratelimit.Decision{Limits: dst}, err
	}
	tn := t.UnixNano()
	var d decision
	for i, l := range lims {
		lims[i].ws = ratelimit.WindowStart(tn, time.Duration(l.size))
		c, p := e.slot(l.idx).buckets(lims[i].ws, l.size)
		d.cur[i], d.prev[i] = total(c), total(p)
	}
	n := len(lims)
	decide(&d, tn, cost, lims, d.cur[:n], d.prev[:n], req.CountRejected)
	e.setOver(!d.allowed)
	if d.counted {
		ns.countAll(e, tn, cost)
	}
	// Unlocked before the statuses, which read no entry: a shorter hold,
	// and no deferred call (the decision would be saved across it).
	e.mu.Unlock()
	// d.finish built here: a Decision returned by finish would be copied
	// once more, with wide loads that stall on the narrow stores before.
	dst, reason := d.statuses(dst, lims, req.Limits)
	return ratelimit.Decision{Allowed: d.allowed, Limits: dst, RetryAfter: time.Duration(d.retry), Never: reason != "", Reason: reason}, nil
}

// countAll counts cost at tn in every window size of e, whose lock the
// caller holds.
func (ns *Namespace) countAll(e *entry, tn, cost int64) {
	for i, size := range ns.sizes {
		s := e.slot(i)
		if p := s.p.Load(); p != nil && uint64(tn-p.start) < uint64(size) {
			p.cur.own.Add(cost) // current window known without dividing
		} else if b := s.bucketFor(ratelimit.WindowStart(tn, time.Duration(size)), size); b != nil {
			b.own.Add(cost)
		}
	}
	ns.dirtied(e)
}

// decision is a Decision before it is expressed in hits.
type decision struct {
	t         int64
	cost      int64
	allowed   bool
	counted   bool
	never     int // index of a limit the cost exceeds, or -1
	cur, prev [MaxLimits]int64
	retry     int64
}

// decide applies the sliding formula to the counts cur[i], prev[i] of each
// limit's current and previous window at t; each lims[i].ws is the start
// of that current window. It fills d in place: a decision is large, and
// returning it would copy it.
func decide(d *decision, t, cost int64, lims []microLimit, cur, prev []int64, countRejected bool) {
	// Field by field, not *d = decision{...}: cur and prev may be d's own
	// arrays, filled by the caller.
	d.t, d.cost, d.allowed, d.never, d.retry = t, cost, true, -1, 0
	for i, l := range lims {
		if ratelimit.SlidingRate(cur[i], prev[i], time.Duration(l.size), t-l.ws)+float64(cost) > float64(l.limit) {
			d.allowed = false
		}
		if cost > l.limit && d.never < 0 {
			d.never = i
		}
	}
	d.counted = d.allowed || countRejected
	copy(d.cur[:], cur)
	copy(d.prev[:], prev)
	if d.counted {
		for i := range lims {
			d.cur[i] += cost
		}
	}
	if !d.allowed && d.never < 0 {
		d.retry = retryAfter(t, cost, lims, d.cur[:len(lims)], d.prev[:len(lims)])
	}
}

// finish expresses d in hits, appending each limit's status to dst.
func (d *decision) finish(dst []ratelimit.LimitStatus, lims []microLimit, req []ratelimit.Limit) ratelimit.Decision {
	dst, reason := d.statuses(dst, lims, req)
	return ratelimit.Decision{Allowed: d.allowed, Limits: dst, RetryAfter: time.Duration(d.retry), Never: reason != "", Reason: reason}
}

// statuses appends each limit's status to dst, and returns the reason
// the cost can never be admitted, if so.
func (d *decision) statuses(dst []ratelimit.LimitStatus, lims []microLimit, req []ratelimit.Limit) ([]ratelimit.LimitStatus, string) {
	var counted int64
	if d.counted {
		counted = d.cost
	}
	// Filled in place: appending a literal builds each status twice.
	n := len(dst)
	dst = slices.Grow(dst, len(lims))[:n+len(lims)]
	for i, l := range lims {
		ws := l.ws
		rm := ratelimit.SlidingRate(d.cur[i], d.prev[i], time.Duration(l.size), d.t-ws)
		r := rm / ratelimit.Micro
		// limit − r is never −0 or NaN here, so a compare is math.Max(0, ·).
		rem := fromMicro(l.limit) - r
		if rem < 0 {
			rem = 0
		}
		st := &dst[n+i]
		st.Kind = ratelimit.WindowLimit
		st.Size, st.Limit = req[i].Size, req[i].Limit
		st.Before = (rm - float64(counted)) / ratelimit.Micro
		st.Rate, st.Remaining = r, rem
		st.ResetAfter = time.Duration(ws + l.size - d.t)
	}
	if d.never < 0 {
		return dst, ""
	}
	return dst, fmt.Sprintf("cost %g exceeds the limit %g per %s: it can never be admitted",
		fromMicro(d.cost), req[d.never].Limit, req[d.never].Size)
}

// admits reports whether cost fits under every limit at t+delta if nothing
// else is counted after t.
func admits(t, delta, cost int64, lims []microLimit, cur, prev []int64) bool {
	at := t + delta
	for i, l := range lims {
		ws := l.ws
		ws2 := ratelimit.WindowStart(at, time.Duration(l.size))
		var c, p int64
		switch ws2 {
		case ws:
			c, p = cur[i], prev[i]
		case ws + l.size:
			p = cur[i]
		}
		if ratelimit.SlidingRate(c, p, time.Duration(l.size), at-ws2)+float64(cost) > float64(l.limit) {
			return false
		}
	}
	return true
}

// retryAfter returns the least delta >= 0 at which admits holds. On each
// window segment every limit's rate is linear in delta, so the least
// feasible delta is a segment start or a point where some rate crosses its
// threshold; those candidates are checked in order.
func retryAfter(t, cost int64, lims []microLimit, cur, prev []int64) int64 {
	var buf [1 + 4*MaxLimits]int64
	cands := append(buf[:0], 0)
	for i, l := range lims {
		size := float64(l.size)
		pos := t - l.ws
		endA := l.size - pos   // current window ends
		endB := 2*l.size - pos // next window ends: both windows empty
		cands = append(cands, endA, endB)
		room := float64(l.limit - cost)
		if prev[i] != 0 { // cur + prev*(endA-Δ)/size = room
			if x := float64(endA) - (room-float64(cur[i]))*size/float64(prev[i]); x > 0 && x < float64(endA) {
				cands = append(cands, int64(math.Ceil(x)))
			}
		}
		if cur[i] != 0 { // cur*(endB-Δ)/size = room
			if x := float64(endB) - room*size/float64(cur[i]); x > float64(endA) && x < float64(endB) {
				cands = append(cands, int64(math.Ceil(x)))
			}
		}
	}
	slices.Sort(cands)
	for i, c := range cands {
		// A computed crossing may land a hair early through rounding.
		for _, bump := range [...]int64{0, 1, 1_000} {
			if i+1 < len(cands) && c+bump > cands[i+1] {
				break
			}
			if admits(t, c+bump, cost, lims, cur, prev) {
				return c + bump
			}
		}
	}
	return cands[len(cands)-1]
}
