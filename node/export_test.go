package node

import (
	"context"
	"time"
)

// Unexported parts of the package that its external tests (package
// node_test) use, under their former exported names.

type (
	BucketsConfig = bucketsConfig
)

var (
	NewBuckets         = newBuckets
	NewLeases          = newLeases
	BucketCost         = bucketCost
	EstimatorBytes     = estimatorBytes
	ReclaimInterval    = reclaimInterval
	ValidateWindowSize = validateWindowSize
)

func (b *Buckets) Reclaim(now time.Time) int { return b.reclaim(now) }

func (b *Buckets) TakeTokenAt(t time.Time, key string, p TokenBucket, take float64, strict bool) (BucketStatus, error) {
	return b.takeTokenAt(t, key, p, take, strict)
}

func (b *Buckets) TakeToken(key string, p TokenBucket, take float64, strict bool) (BucketStatus, error) {
	return b.takeToken(key, p, take, strict)
}

func (b *Buckets) TokenAt(t time.Time, key string, p TokenBucket) (BucketStatus, error) {
	return b.tokenAt(t, key, p)
}

func (b *Buckets) TakeLeakyAt(t time.Time, key string, p LeakyBucket, take float64) (BucketStatus, error) {
	return b.takeLeakyAt(t, key, p, take)
}

func (b *Buckets) TakeLeaky(key string, p LeakyBucket, take float64) (BucketStatus, error) {
	return b.takeLeaky(key, p, take)
}

func (b *Buckets) TakeLeakyWait(ctx context.Context, key string, p LeakyBucket, take float64, maxWait time.Duration) (BucketStatus, error) {
	return b.takeLeakyWait(ctx, key, p, take, maxWait)
}

func (b *Buckets) LeakyAt(t time.Time, key string, p LeakyBucket) (BucketStatus, error) {
	return b.leakyAt(t, key, p)
}

func (b *Buckets) TakeFixedAt(t time.Time, key string, p FixedBucket, take float64) (BucketStatus, error) {
	return b.takeFixedAt(t, key, p, take)
}

func (b *Buckets) TakeFixed(key string, p FixedBucket, take float64) (BucketStatus, error) {
	return b.takeFixed(key, p, take)
}

func (b *Buckets) FixedAt(t time.Time, key string, p FixedBucket) (BucketStatus, error) {
	return b.fixedAt(t, key, p)
}

func (l *Leases) Reclaim(now, idleBefore time.Time) int { return l.reclaim(now, idleBefore) }

func (ns *Namespace) Reclaim(now time.Time) int { return ns.reclaim(now) }

func (ns *Namespace) IsEstimator() bool { return ns.isEstimator() }

func (ns *Namespace) KeyBytes() int64 { return ns.keyBytes() }
