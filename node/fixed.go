package node

import (
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// fixedParams is a validated FixedBucket: period in ns, limit in
// micro-hits.
type fixedParams struct {
	period, limit int64
}

// fixedParamsOf validates p, reporting the first bad parameter as a *FieldError
// ("period" or "limit") wrapping ErrInvalidLimit.
func fixedParamsOf(p ratelimit.FixedBucket) (fixedParams, error) {
	var q fixedParams
	var err error
	if q.period, err = bucketDuration("period", p.Period); err != nil {
		return q, err
	}
	if q.limit, err = bucketAmount("limit", p.Limit); err != nil {
		return q, err
	}
	return q, nil
}

// advance moves s to the period holding t and returns the time used: a t
// before the bucket's period counts as that period's start.
func (p fixedParams) advance(s *bucketVal, t int64) int64 {
	if t < s.last {
		return s.last
	}
	if t-s.last >= p.period {
		s.v, s.last = 0, ratelimit.WindowStart(t, time.Duration(p.period))
	}
	return t
}

// idle reports whether s counts nothing at t (its period ended, or
// nothing was counted in it), so a new bucket would be the same.
func (p fixedParams) idle(s bucketVal, t int64) bool {
	p.advance(&s, t)
	return s.v == 0
}

// take applies a take of n at t to s (found: s is stored; else a new
// bucket) and returns the answer.
func (p fixedParams) take(s *bucketVal, found bool, t, n int64) bucketStatus {
	if !found {
		s.v, s.last = 0, ratelimit.WindowStart(t, time.Duration(p.period))
	}
	t = p.advance(s, t)
	before := s.v
	st := bucketStatus{Allowed: before+n <= p.limit, Never: n > p.limit, Limit: fromMicro(p.limit), Before: fromMicro(before)}
	if st.Allowed {
		s.v += n
		st.used = n
	}
	st.Remaining = fromMicro(max(p.limit-s.v, 0)) // a count above the limit: the cluster's (see Force)
	st.ResetAfter = time.Duration(s.last + p.period - t)
	if !st.Allowed && !st.Never {
		st.RetryAfter = st.ResetAfter
	}
	return st
}

// takeFixedAt counts take (1 by default in the API; 0 only reads) at t in
// key's fixed bucket p if it fits under the limit.
func (b *bucketTable) takeFixedAt(t time.Time, key string, p ratelimit.FixedBucket, take float64) (bucketStatus, error) {
	q, err := fixedParamsOf(p)
	if err != nil {
		return bucketStatus{}, bucketErr(key, err)
	}
	n, err := bucketTake(take)
	if err != nil {
		return bucketStatus{}, bucketErr(key, err)
	}
	id := bucketID{key: key, kind: kindFixed, a: q.period, b: q.limit}
	tn := t.UnixNano()
	var st bucketStatus
	err = b.apply(&id, n > 0, func(s bucketVal, found bool) bucketVal {
		st = q.take(&s, found, tn, n)
		return s
	})
	st.used = 0 // the cluster's bookkeeping, for Allow only
	return st, err
}

// fixedAt reads key's fixed bucket p at t without counting: Before is the
// period's count.
func (b *bucketTable) fixedAt(t time.Time, key string, p ratelimit.FixedBucket) (bucketStatus, error) {
	return b.takeFixedAt(t, key, p, 0)
}
