package node

import (
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// tokenParams is a validated TokenBucket in micro-hits and ns.
type tokenParams struct {
	max, refill, amount int64
}

// tokenParamsOf validates p, reporting the first bad parameter as a *FieldError
// ("max", "refill_time" or "refill_amount") wrapping ErrInvalidLimit.
func tokenParamsOf(p ratelimit.TokenBucket) (tokenParams, error) {
	var q tokenParams
	var err error
	if q.max, err = bucketAmount("max", p.Max); err != nil {
		return q, err
	}
	if q.refill, err = bucketDuration("refill_time", p.RefillTime); err != nil {
		return q, err
	}
	q.amount = q.max
	if p.RefillAmount != 0 {
		if q.amount, err = bucketAmount("refill_amount", p.RefillAmount); err != nil {
			return q, err
		}
	}
	return q, nil
}

// advance brings s up to t: whole refills since the last mark, capped at
// max, the mark moved by as many refill times. A t before the mark counts
// as the mark: time never moves backwards. It returns the time used.
func (p tokenParams) advance(s *bucketVal, t int64) int64 {
	if t < s.last {
		return s.last
	}
	n := (t - s.last) / p.refill
	if n == 0 {
		return t
	}
	if s.v < p.max {
		if n >= bucketCeilDiv(p.max-s.v, p.amount) {
			s.v = p.max
		} else {
			s.v += n * p.amount
		}
	}
	s.last += n * p.refill
	return t
}

// idle reports whether s is full at t, so a new bucket would be the same.
func (p tokenParams) idle(s bucketVal, t int64) bool {
	p.advance(&s, t)
	return s.v >= p.max
}

// take applies a take of n at t to s (found: s is stored; else a new
// bucket) and returns the answer. strict restarts the refill clock when a
// take leaves the bucket empty.
func (p tokenParams) take(s *bucketVal, found bool, t, n int64, strict bool) bucketStatus {
	if !found {
		s.v, s.last = p.max, t
	}
	t = p.advance(s, t)
	before := s.v
	st := bucketStatus{Allowed: before >= n, Never: n > p.max, Limit: fromMicro(p.max), Before: fromMicro(max(before, 0))}
	if n > 0 {
		// A refused take empties the bucket; one in debt (the cluster's
		// consumption beyond its tokens, see Force) stays in debt.
		s.v = max(before-n, min(before, 0))
		if strict && s.v <= 0 {
			s.last = t
		}
	}
	st.used = before - s.v
	st.Remaining = fromMicro(max(s.v, 0))
	if s.v < p.max {
		st.ResetAfter = time.Duration(s.last + p.refill - t)
	}
	if !st.Allowed && !st.Never {
		// Refused: the bucket is now empty; wait for enough refills.
		k := bucketCeilDiv(n-s.v, p.amount)
		st.RetryAfter = time.Duration(bucketAddSat(s.last-t, bucketMulSat(k, p.refill)))
	}
	return st
}

// takeTokenAt takes take tokens (Smyte's TAKE; 1 by default in the API,
// 0 only reads) at t (Smyte's AT, which may be historical: a t before the
// bucket's last refill mark counts as that mark) from key's token bucket
// p. With strict (Smyte's STRICT), a take that leaves the bucket empty
// restarts its refill clock at t, so a caller that keeps trying stays
// refused until it pauses a whole refill time.
func (b *bucketTable) takeTokenAt(t time.Time, key string, p ratelimit.TokenBucket, take float64, strict bool) (bucketStatus, error) {
	q, err := tokenParamsOf(p)
	if err != nil {
		return bucketStatus{}, bucketErr(key, err)
	}
	n, err := bucketTake(take)
	if err != nil {
		return bucketStatus{}, bucketErr(key, err)
	}
	id := bucketID{key: key, kind: kindToken, a: q.max, b: q.refill, c: q.amount}
	tn := t.UnixNano()
	var st bucketStatus
	err = b.apply(&id, n > 0, func(s bucketVal, found bool) bucketVal {
		st = q.take(&s, found, tn, n, strict)
		return s
	})
	st.used = 0 // the cluster's bookkeeping, for Allow only
	return st, err
}

// tokenAt reads key's token bucket p at t without taking (Smyte's RL.GET):
// Before and Remaining are the tokens.
func (b *bucketTable) tokenAt(t time.Time, key string, p ratelimit.TokenBucket) (bucketStatus, error) {
	return b.takeTokenAt(t, key, p, 0, false)
}
