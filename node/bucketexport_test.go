package node

import (
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// The bucket table's parts that the external tests (package node_test)
// use, under their former exported names: the table and its answers are
// no part of the package's API (Allow and the bucket seams are).

type (
	Buckets      = bucketTable
	BucketStatus = ratelimit.BucketStatus
)

// takeAt takes take (1 by default in the API; 0 only reads) at t from
// key's bucket of limit l, as an Allow of that one limit decides it.
func (b *bucketTable) takeAt(t time.Time, key string, l *ratelimit.Limit, take float64) (ratelimit.BucketStatus, error) {
	spec, err := ratelimit.SpecOf(l)
	if err != nil {
		return ratelimit.BucketStatus{}, bucketErr(key, err)
	}
	n, err := bucketTake(take)
	if err != nil {
		return ratelimit.BucketStatus{}, bucketErr(key, err)
	}
	spec.Key = key
	id := specID(&spec)
	tn := t.UnixNano()
	var st ratelimit.BucketStatus
	err = b.apply(&id, n > 0, func(s ratelimit.BucketState, found bool) ratelimit.BucketState {
		st = spec.Take(&s, found, tn, n, l.Strict)
		return s
	})
	st.Used = 0 // the cluster's bookkeeping, for Allow only
	return st, err
}

// takeTokenAt takes take tokens (Smyte's TAKE) at t (Smyte's AT, which
// may be historical: a t before the bucket's last refill mark counts as
// that mark) from key's token bucket p. With strict (Smyte's STRICT), a
// take that leaves the bucket empty restarts its refill clock at t.
func (b *bucketTable) takeTokenAt(t time.Time, key string, p ratelimit.TokenBucket, take float64, strict bool) (ratelimit.BucketStatus, error) {
	return b.takeAt(t, key, &ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: p, Strict: strict}, take)
}

// tokenAt reads key's token bucket p at t without taking (Smyte's RL.GET).
func (b *bucketTable) tokenAt(t time.Time, key string, p ratelimit.TokenBucket) (ratelimit.BucketStatus, error) {
	return b.takeTokenAt(t, key, p, 0, false)
}

// takeLeakyAt adds take drops at t to key's leaky bucket p.
func (b *bucketTable) takeLeakyAt(t time.Time, key string, p ratelimit.LeakyBucket, take float64) (ratelimit.BucketStatus, error) {
	return b.takeAt(t, key, &ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: p}, take)
}

// takeLeaky is takeLeakyAt at the clock's time.
func (b *bucketTable) takeLeaky(key string, p ratelimit.LeakyBucket, take float64) (ratelimit.BucketStatus, error) {
	return b.takeLeakyAt(b.clock.Now(), key, p, take)
}

// leakyAt reads key's leaky bucket p at t without adding a drop.
func (b *bucketTable) leakyAt(t time.Time, key string, p ratelimit.LeakyBucket) (ratelimit.BucketStatus, error) {
	return b.takeLeakyAt(t, key, p, 0)
}

// takeFixedAt counts take at t in key's fixed bucket p if it fits.
func (b *bucketTable) takeFixedAt(t time.Time, key string, p ratelimit.FixedBucket, take float64) (ratelimit.BucketStatus, error) {
	return b.takeAt(t, key, &ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: p}, take)
}

// fixedAt reads key's fixed bucket p at t without counting.
func (b *bucketTable) fixedAt(t time.Time, key string, p ratelimit.FixedBucket) (ratelimit.BucketStatus, error) {
	return b.takeFixedAt(t, key, p, 0)
}

// Buckets returns the namespace's table of buckets.
func (ns *Namespace) Buckets() *Buckets { return ns.buckets }

// Len returns the number of buckets held.
func (b *Buckets) Len() int64 { return b.n.Load() }

// RefusedKeys returns how many new buckets were refused at the cap.
func (b *Buckets) RefusedKeys() int64 { return b.refused.Load() }

// Now reads the table's clock.
func (b *Buckets) Now() time.Time { return b.clock.Now() }

// Token is tokenAt at the clock's time.
func (b *Buckets) Token(key string, p ratelimit.TokenBucket) (BucketStatus, error) {
	return b.tokenAt(b.clock.Now(), key, p)
}

// Leaky is leakyAt at the clock's time.
func (b *Buckets) Leaky(key string, p ratelimit.LeakyBucket) (BucketStatus, error) {
	return b.leakyAt(b.clock.Now(), key, p)
}

// Fixed is fixedAt at the clock's time.
func (b *Buckets) Fixed(key string, p ratelimit.FixedBucket) (BucketStatus, error) {
	return b.fixedAt(b.clock.Now(), key, p)
}
