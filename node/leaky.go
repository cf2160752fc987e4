package node

import (
	"math/bits"
	"time"
)

// LeakyBucket is a leaky bucket's parameters, as Sidekiq's
// Limiter.leaky(name, size, interval): the bucket holds at most Size drops
// and drains Size drops per Interval, one drop every drip interval
// Interval/Size (leaky(name, 10, 10 s) drains one drop a second). They are
// part of the bucket's identity.
//
// A take of n adds n drops when they fit (drops + n <= Size) and is
// refused otherwise, changing nothing. Whole drips since the last drip
// mark each drain one drop, and move the mark by as many drip intervals;
// drops never go below 0 (Sidekiq's script can: limiterd clamps), and an
// empty bucket's mark follows the time, so a drop added to it drains a
// whole drip interval later. Sidekiq sets its mark to the call's time on
// every admitted call, losing the progress towards the next drip; limiterd
// keeps it, so the bucket drains at exactly Size per Interval.
type LeakyBucket struct {
	// Size is the most drops the bucket holds, in (0, MaxValue].
	Size float64
	// Interval is the time to drain Size drops, in (0, MaxBucketDuration].
	Interval time.Duration
}

// leakyParams is a validated LeakyBucket: size in micro-hits, interval and
// drip in ns.
type leakyParams struct {
	size, interval, drip int64
}

// Validate reports the first bad parameter as a *FieldError ("size" or
// "interval") wrapping ErrInvalidLimit.
func (p LeakyBucket) Validate() error {
	_, err := p.params()
	return err
}

func (p LeakyBucket) params() (leakyParams, error) {
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
	hi, lo := bits.Mul64(uint64(q.interval), Micro)
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
		if n >= bucketCeilDiv(s.v, Micro) {
			s.v = 0
		} else {
			s.v -= n * Micro
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
		k := bucketCeilDiv(s.v+n-p.size, Micro) // drips until n fits
		st.RetryAfter = time.Duration(bucketAddSat(s.last-t, bucketMulSat(k, p.drip)))
	}
	return st
}

// takeLeakyAt adds take drops (1 by default in the API; 0 only reads) at
// t to key's leaky bucket p. When refused, ResetAfter is Sidekiq's
// next_drip (the time until the next drop drains, in (0, drip]) and
// RetryAfter the time until take drops fit (next_drip for a take of 1).
func (b *bucketTable) takeLeakyAt(t time.Time, key string, p LeakyBucket, take float64) (bucketStatus, error) {
	q, err := p.params()
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
func (b *bucketTable) takeLeaky(key string, p LeakyBucket, take float64) (bucketStatus, error) {
	return b.takeLeakyAt(b.clock.Now(), key, p, take)
}

// leakyAt reads key's leaky bucket p at t without adding a drop: Before
// is the drops, ResetAfter the next drip.
func (b *bucketTable) leakyAt(t time.Time, key string, p LeakyBucket) (bucketStatus, error) {
	return b.takeLeakyAt(t, key, p, 0)
}
