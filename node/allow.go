package node

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// MaxLimits is the most limits one Allow may check.
const MaxLimits = MaxWindowSizes

// Limit is "at most Limit hits per sliding window of Size".
type Limit struct {
	Size  time.Duration
	Limit float64
}

// LimitStatus is one limit's state after an Allow decision.
type LimitStatus struct {
	Size  time.Duration
	Limit float64
	// Rate is the sliding rate after the decision (including the cost when
	// it was counted); Remaining = max(0, Limit − Rate).
	Rate      float64
	Remaining float64
	// ResetAfter is the time until the current window of Size ends.
	ResetAfter time.Duration
}

// Decision is the answer to an Allow.
type Decision struct {
	Allowed bool
	// Limits has one status per requested limit, in request order.
	Limits []LimitStatus
	// RetryAfter, when denied, is the least wait after which the same cost
	// would be admitted if nothing else were counted.
	RetryAfter time.Duration
	// Never is set when the cost exceeds a limit, so waiting cannot help;
	// Reason says which.
	Never  bool
	Reason string
}

// AllowRequest is the input of Allow.
type AllowRequest struct {
	Key    string
	Cost   float64 // hits; must be >= 0
	Limits []Limit
	// CountRejected counts Cost even when denied (penalty mode).
	CountRejected bool
}

// AllowCheck is an AllowRequest validated by CheckAllow, in micro-hits.
type AllowCheck struct {
	Cost   int64 // micro-hits
	n      int
	limits [MaxLimits]CheckedLimit
}

// CheckedLimit is one limit of an AllowCheck.
type CheckedLimit struct {
	Size  time.Duration // one of the namespace's sizes
	Limit int64         // micro-hits
}

// Limits returns the checked limits in request order.
func (c *AllowCheck) Limits() []CheckedLimit { return c.limits[:c.n] }

// CheckAllow validates an Allow request, with the same errors as AllowAt,
// for a caller that decides under a KeyLock (KeyLock.Decide).
func (ns *Namespace) CheckAllow(req AllowRequest) (AllowCheck, error) {
	var buf [MaxLimits]microLimit
	lims, cost, err := ns.checkAllow(&req, &buf)
	if err != nil {
		return AllowCheck{}, err
	}
	c := AllowCheck{Cost: cost, n: len(lims)}
	for i, l := range lims {
		c.limits[i] = CheckedLimit{Size: time.Duration(l.size), Limit: l.limit}
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

// checkAllow validates req and returns its limits, held in buf, and cost.
func (ns *Namespace) checkAllow(req *AllowRequest, buf *[MaxLimits]microLimit) (lims []microLimit, cost int64, err error) {
	if err := checkKeyLen(req.Key); err != nil {
		return nil, 0, err
	}
	if len(req.Limits) <= MaxLimits { // else checkAllowRest rejects them
		lims = buf[:len(req.Limits):len(req.Limits)]
	}
	if cost, err = ns.checkAllowRest(req, lims); err != nil {
		return nil, 0, keyErrOr(req.Key, err)
	}
	return lims, cost, nil
}

// checkAllowRest is checkAllow after the key's length.
func (ns *Namespace) checkAllowRest(req *AllowRequest, lims []microLimit) (cost int64, err error) {
	cost, err = ToMicroField("cost", req.Cost)
	if err != nil {
		return 0, err
	}
	if cost < 0 {
		return 0, fieldErr("cost", ErrInvalidValue, "must not be negative, got %g", req.Cost)
	}
	if len(req.Limits) == 0 {
		return 0, fieldErr("limits", ErrInvalidLimit, "at least one limit is required")
	}
	if len(req.Limits) > MaxLimits {
		return 0, fieldErr("limits", ErrInvalidLimit, "at most %d limits, got %d", MaxLimits, len(req.Limits))
	}
	for i, l := range req.Limits {
		switch {
		case l.Size == 0:
			return 0, fieldErr(fmt.Sprintf("limits[%d].window_size", i), ErrInvalidLimit, "is required")
		case l.Size < 0:
			return 0, fieldErr(fmt.Sprintf("limits[%d].window_size", i), ErrInvalidWindow, "must be positive, got %s", l.Size)
		}
		idx := ns.sizeIndex(l.Size)
		if idx < 0 {
			return 0, ns.unknownWindowField(fmt.Sprintf("limits[%d].window_size", i), l.Size)
		}
		m, err := ToMicro(l.Limit)
		if err != nil || m < 0 {
			return 0, fieldErr(fmt.Sprintf("limits[%d].limit", i), ErrInvalidLimit, "must be a finite number between 0 and %g, got %g", float64(MaxValue), l.Limit)
		}
		for _, prev := range lims[:i] {
			if prev.idx == idx {
				return 0, fieldErr(fmt.Sprintf("limits[%d].window_size", i), ErrInvalidLimit, "window size %s given twice", l.Size)
			}
		}
		lims[i] = microLimit{idx: idx, size: int64(l.Size), limit: m}
	}
	return cost, nil
}

// AllowAt decides at t whether req.Cost more hits fit under every limit and,
// if so (or with CountRejected), counts them in every window size of the
// namespace. Statuses are appended to dst.
//
// Allow is exact on one node: calls for the same key are serialised, so no
// two racing calls both take the last unit. Increments running at the same
// time are not serialised with it and may be counted just before or after.
func (ns *Namespace) AllowAt(t time.Time, req AllowRequest, dst []LimitStatus) (Decision, error) {
	var buf [MaxLimits]microLimit
	lims, cost, err := ns.checkAllow(&req, &buf)
	if err != nil {
		return Decision{Limits: dst}, err
	}
	e, err := ns.acquireLocked(req.Key)
	if err != nil {
		return Decision{Limits: dst}, err
	}
	defer e.mu.Unlock()
	tn := t.UnixNano()
	var cur, prev [MaxLimits]int64
	for i, l := range lims {
		lims[i].ws = WindowStart(tn, time.Duration(l.size))
		c, p := e.slot(l.idx).buckets(lims[i].ws, l.size)
		cur[i], prev[i] = total(c), total(p)
	}
	var d decision
	decide(&d, tn, cost, lims, cur[:len(lims)], prev[:len(lims)], req.CountRejected)
	if d.counted {
		for i, size := range ns.sizes {
			s := e.slot(i)
			if p := s.p.Load(); p != nil && uint64(tn-p.start) < uint64(size) {
				p.cur.own.Add(cost) // current window known without dividing
			} else if b := s.bucketFor(WindowStart(tn, time.Duration(size)), size); b != nil {
				b.own.Add(cost)
			}
		}
	}
	return d.finish(dst, lims, req.Limits), nil
}

// Allow is AllowAt at the namespace clock's time.
func (ns *Namespace) Allow(req AllowRequest, dst []LimitStatus) (Decision, error) {
	return ns.AllowAt(ns.clock.Now(), req, dst)
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
	*d = decision{t: t, cost: cost, allowed: true, never: -1}
	for i, l := range lims {
		if SlidingRate(cur[i], prev[i], time.Duration(l.size), t-l.ws)+float64(cost) > float64(l.limit) {
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

func (d *decision) finish(dst []LimitStatus, lims []microLimit, req []Limit) Decision {
	out := Decision{Allowed: d.allowed, RetryAfter: time.Duration(d.retry)}
	for i, l := range lims {
		ws := l.ws
		r := SlidingRate(d.cur[i], d.prev[i], time.Duration(l.size), d.t-ws) / Micro
		dst = append(dst, LimitStatus{
			Size:       req[i].Size,
			Limit:      req[i].Limit,
			Rate:       r,
			Remaining:  math.Max(0, FromMicro(l.limit)-r),
			ResetAfter: time.Duration(ws + l.size - d.t),
		})
	}
	out.Limits = dst
	if d.never >= 0 {
		out.Never = true
		out.Reason = fmt.Sprintf("cost %g exceeds the limit %g per %s: it can never be admitted",
			FromMicro(d.cost), req[d.never].Limit, req[d.never].Size)
	}
	return out
}

// admits reports whether cost fits under every limit at t+delta if nothing
// else is counted after t.
func admits(t, delta, cost int64, lims []microLimit, cur, prev []int64) bool {
	at := t + delta
	for i, l := range lims {
		ws := l.ws
		ws2 := WindowStart(at, time.Duration(l.size))
		var c, p int64
		switch ws2 {
		case ws:
			c, p = cur[i], prev[i]
		case ws + l.size:
			p = cur[i]
		}
		if SlidingRate(c, p, time.Duration(l.size), at-ws2)+float64(cost) > float64(l.limit) {
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
