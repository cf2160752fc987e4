package node

import (
	"math/bits"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// leakyParams is a validated LeakyBucket: size in micro-hits, interval and
// drip in ns.
type leakyParams struct {
	size, interval, drip int64
}

// leakyParamsOf validates p, reporting the first bad parameter as a *FieldError
// ("size" or "interval") wrapping ErrInvalidLimit.
func leakyParamsOf(p ratelimit.LeakyBucket) (leakyParams, error) {
	var q leakyParams
	var err error
	if q.size, err = bucketAmount("size", p.Size); err != nil {
		return q, err
	}
	if q.interval, err = bucketDuration("interval", p.Interval); err != nil {
		return q, err
	}
	// drip = interval / size drops = interval × Micro / size, truncated
	// to whole ns.
	hi, lo := bits.Mul64(uint64(q.interval), ratelimit.Micro)
	if hi < uint64(q.size) {
		d, _ := bits.Div64(hi, lo, uint64(q.size))
		q.drip = int64(d)
	}
	if q.drip < 1 || q.drip > int64(MaxBucketDuration) {
		return q, fieldErr("size", ErrInvalidLimit, "the drip interval (interval/size) must be between 1ns and %s, got %s / %g", MaxBucketDuration, p.Interval, p.Size)
	}
	return q, nil
}

// advance drains s up to t and returns the time used: a t before the drip
// mark counts as the mark, since time never moves backwards.
func (p leakyParams) advance(s *bucketVal, t int64) int64 {
	if t < s.last {
		t = s.last
	}
	if s.v > 0 {
		n := (t - s.last) / p.drip
		if n >= bucketCeilDiv(s.v, ratelimit.Micro) {
			s.v = 0
		} else {
			s.v -= n * ratelimit.Micro
			s.last += n * p.drip
		}
	}
	if s.v == 0 {
		s.last = t
	}
	return t
}

// idle reports whether s is empty at t, so a new bucket would be the same.
func (p leakyParams) idle(s bucketVal, t int64) bool {
	p.advance(&s, t)
	return s.v == 0
}

// take applies a take of n drops at t to s (found: s is stored; else a new
// bucket) and returns the answer.
func (p leakyParams) take(s *bucketVal, found bool, t, n int64) bucketStatus {
	if !found {
		s.v, s.last = 0, t
	}
	t = p.advance(s, t)
	before := s.v
	st := bucketStatus{Allowed: before+n <= p.size, Never: n > p.size, Limit: fromMicro(p.size), Before: fromMicro(before)}
	if st.Allowed {
		s.v += n
		st.used = n
	}
	st.Remaining = fromMicro(max(p.size-s.v, 0)) // drops above size: the cluster's (see Force)
	if s.v > 0 {
		st.ResetAfter = time.Duration(s.last + p.drip - t) // next drip, in (0, drip]
	}
	if !st.Allowed && !st.Never {
		k := bucketCeilDiv(s.v+n-p.size, ratelimit.Micro) // drips until n fits
		st.RetryAfter = time.Duration(bucketAddSat(s.last-t, bucketMulSat(k, p.drip)))
	}
	return st
}

// takeLeakyAt adds take drops (1 by default in the API; 0 only reads) at
// t to key's leaky bucket p. When refused, ResetAfter is Sidekiq's
// next_drip (the time until the next drop drains, in (0, drip]) and
// RetryAfter the time until take drops fit (next_drip for a take of 1).
func (b *bucketTable) takeLeakyAt(t time.Time, key string, p ratelimit.LeakyBucket, take float64) (bucketStatus, error) {
	q, err := leakyParamsOf(p)
	if err != nil {
		return bucketStatus{}, bucketErr(key, err)
	}
	n, err := bucketTake(take)
	if err != nil {
		return bucketStatus{}, bucketErr(key, err)
	}
	id := bucketID{key: key, kind: kindLeaky, a: q.size, b: q.interval, c: q.drip}
	tn := t.UnixNano()
	var st bucketStatus
	err = b.apply(&id, n > 0, func(s bucketVal, found bool) bucketVal {
		st = q.take(&s, found, tn, n)
		return s
	})
	st.used = 0 // the cluster's bookkeeping, for Allow only
	return st, err
}

// takeLeaky is takeLeakyAt at the clock's time.
func (b *bucketTable) takeLeaky(key string, p ratelimit.LeakyBucket, take float64) (bucketStatus, error) {
	return b.takeLeakyAt(b.clock.Now(), key, p, take)
}

// leakyAt reads key's leaky bucket p at t without adding a drop: Before
// is the drops, ResetAfter the next drip.
func (b *bucketTable) leakyAt(t time.Time, key string, p ratelimit.LeakyBucket) (bucketStatus, error) {
	return b.takeLeakyAt(t, key, p, 0)
}
