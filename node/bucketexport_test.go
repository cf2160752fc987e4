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
	BucketStatus = bucketStatus
)

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

// Wait is wait, for the tests of Sidekiq's wait_timeout.
func (s BucketStatus) Wait(maxWait time.Duration) (time.Duration, bool) { return s.wait(maxWait) }
