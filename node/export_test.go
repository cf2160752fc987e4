package node

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// Unexported parts of the package that its external tests (package
// node_test) use, under their former exported names.

type (
	BucketsConfig = bucketsConfig
)

var (
	FromMicro          = fromMicro
	NewBuckets         = newBuckets
	NewLeases          = newLeases
	BucketCost         = bucketCost
	ReclaimInterval    = reclaimInterval
	ValidateWindowSize = validateWindowSize
)

func (b *Buckets) Reclaim(now time.Time) int { return b.reclaim(now) }

func (b *Buckets) TakeTokenAt(t time.Time, key string, p ratelimit.TokenBucket, take float64, strict bool) (BucketStatus, error) {
	return b.takeTokenAt(t, key, p, take, strict)
}

func (b *Buckets) TokenAt(t time.Time, key string, p ratelimit.TokenBucket) (BucketStatus, error) {
	return b.tokenAt(t, key, p)
}

func (b *Buckets) TakeLeakyAt(t time.Time, key string, p ratelimit.LeakyBucket, take float64) (BucketStatus, error) {
	return b.takeLeakyAt(t, key, p, take)
}

func (b *Buckets) TakeLeaky(key string, p ratelimit.LeakyBucket, take float64) (BucketStatus, error) {
	return b.takeLeaky(key, p, take)
}

func (b *Buckets) LeakyAt(t time.Time, key string, p ratelimit.LeakyBucket) (BucketStatus, error) {
	return b.leakyAt(t, key, p)
}

func (b *Buckets) TakeFixedAt(t time.Time, key string, p ratelimit.FixedBucket, take float64) (BucketStatus, error) {
	return b.takeFixedAt(t, key, p, take)
}

func (b *Buckets) FixedAt(t time.Time, key string, p ratelimit.FixedBucket) (BucketStatus, error) {
	return b.fixedAt(t, key, p)
}

func (l *Leases) Reclaim(now, idleBefore time.Time) int { return l.reclaim(now, idleBefore) }

func (ns *Namespace) Reclaim(now time.Time) int { return ns.reclaim(now) }

// TakeFixed is takeFixedAt at the clock's time.
func (b *Buckets) TakeFixed(key string, p ratelimit.FixedBucket, take float64) (BucketStatus, error) {
	return b.takeFixedAt(b.clock.Now(), key, p, take)
}

// TakeToken is takeTokenAt at the clock's time.
func (b *Buckets) TakeToken(key string, p ratelimit.TokenBucket, take float64, strict bool) (BucketStatus, error) {
	return b.takeTokenAt(b.clock.Now(), key, p, take, strict)
}

// TakeLeakyWait is takeLeaky with Sidekiq's wait_timeout: when refused and
// the status's Wait(maxWait) allows it, it waits on the clock (holding no
// lock) and tries once more, returning that second answer. It returns
// ctx's error if ctx ends during the wait.
func (b *Buckets) TakeLeakyWait(ctx context.Context, key string, p ratelimit.LeakyBucket, take float64, maxWait time.Duration) (BucketStatus, error) {
	st, err := b.takeLeaky(key, p, take)
	d, wait := st.Wait(maxWait)
	if err != nil || !wait {
		return st, err
	}
	if err := b.sleep(ctx, d); err != nil {
		return st, err
	}
	return b.takeLeaky(key, p, take)
}

// EstimatorBytes returns the memory an estimator of cfg with n window sizes
// holds, in bytes.
func EstimatorBytes(cfg EstimatorConfig, n int) int64 {
	return 3 * int64(n) * int64(cfg.Hashes) * int64(cfg.Slots) * 8
}

// IsEstimator reports whether the namespace counts in sketches.
func (ns *Namespace) IsEstimator() bool { return ns.est != nil }

// KeyBytes returns what the keys held cost under MaxBytes (KeyCost each).
func (ns *Namespace) KeyBytes() int64 { return ns.bytes.Load() }

// Bytes returns what the buckets held cost under MaxBytes.
func (b *Buckets) Bytes() int64 { return b.bytes.Load() }

// Changed reports whether the change changes anything.
func (c *Change) Changed() bool {
	return len(c.Added)+len(c.Removed)+len(c.Replaced) > 0
}

// Totals returns the current and previous totals (own + others) of size.
func (k *KeyLock) Totals(size time.Duration) (cur, prev int64) {
	s, sz := k.slot(size)
	c, p := s.buckets(ratelimit.WindowStart(k.t, size), sz)
	return total(c), total(p)
}

func (ns *Namespace) CollectDirty(now time.Time, dst []Pending) []Pending {
	return ns.collectDirty(now, dst)
}

func (ns *Namespace) CollectInterest(now time.Time, dst []Window) []Window {
	return ns.collectInterest(now, dst)
}

func (ns *Namespace) MarkPushed(p Pending, version int64) { ns.markPushed(p, version) }
func (ns *Namespace) MarkUncertain(p Pending)             { ns.markUncertain(p) }
func (ns *Namespace) SetOthers(w Window, others int64)    { ns.setOthers(w, others) }

// The counters, one at a time, for tests written before Stats.
func (ns *Namespace) ActiveKeys() int64     { return ns.Stats().ActiveKeys }
func (ns *Namespace) RefusedKeys() int64    { return ns.Stats().RefusedKeys }
func (ns *Namespace) ActiveBuckets() int64  { return ns.Stats().ActiveBuckets }
func (ns *Namespace) DroppedWindows() int64 { return ns.Stats().DroppedWindows }
func (ns *Namespace) EvictedKeys() int64    { return ns.Stats().EvictedKeys }

// The calls at the clock's time, for tests.
func (ns *Namespace) Increment(key string, size time.Duration, value float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	return ns.IncrementAt(ns.clock.Now(), key, size, value, dst)
}

func (ns *Namespace) Rate(key string, size time.Duration, curDiff float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	return ns.RateAt(ns.clock.Now(), key, size, curDiff, dst)
}

func (ns *Namespace) Allow(req ratelimit.AllowRequest, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	return ns.AllowAt(ns.clock.Now(), req, dst)
}

// The lookups behind Tick.Changes, for tests.
func (ns *Namespace) InterestWindow(now time.Time, key string, size time.Duration, start int64) (Window, bool, bool) {
	return ns.interestWindow(now, key, size, start)
}

func (ns *Namespace) LearnWindow(now time.Time, key string, size time.Duration, start int64) (Window, bool, bool, bool) {
	return ns.learnWindow(now, key, size, start)
}

func (ns *Namespace) SetLearned(w Window, others int64) { ns.setLearned(w, others) }

// The lease calls the tests knew before the LeaseTick, each through it
// (so they test it): a lease id, its store id, a call's Counted and
// Unsent, and one key's part of a tick.

func (l *Leases) NewID(key string) ratelimit.LeaseID { return l.newID(key) }
func StoreID(id ratelimit.LeaseID) string            { return storeID(id) }

func (l *Leases) SetRead(now time.Time, key string, held, next int64) error {
	return l.ApplyTick(now, &LeaseTick{Key: key, Counted: true, KeyHeld: held, KeyNext: next})
}

func (l *Leases) ReleaseElsewhere(now time.Time, id ratelimit.LeaseID, until int64) error {
	return l.ApplyTick(now, &LeaseTick{Key: id.Key, ID: id, Unsent: true, Until: until})
}

// LeaseSync is one key's ops of a tick: its leases' serials (their store
// ids in ids) and its releases to send.
type LeaseSync struct {
	Key      string
	Serials  []uint64
	Releases map[string]int64
	ids      []string
}

// Collect is a tick's ops at now, by key.
func (l *Leases) Collect(now time.Time, all bool, dst []LeaseSync) []LeaseSync {
	t := LeaseTick{All: all}
	l.TakeTick(now, &t)
	for i, key := range t.OpKey {
		if i == 0 || key != t.OpKey[i-1] {
			dst = append(dst, LeaseSync{Key: key})
		}
		s := &dst[len(dst)-1]
		switch {
		case t.OpID[i] == "":
		case t.OpRelease[i]:
			if s.Releases == nil {
				s.Releases = map[string]int64{}
			}
			s.Releases[t.OpID[i]] = t.OpUntil[i]
		default:
			s.Serials = append(s.Serials, t.serial[i])
			s.ids = append(s.ids, t.OpID[i])
		}
	}
	return dst
}

// Synced applies the store's answers to s's ops, all answered: stored[i]
// to its i-th lease's write, held and next to its count when counted.
func (l *Leases) Synced(now time.Time, s LeaseSync, stored []bool, keep, counted bool, held, next int64) {
	t := LeaseTick{Keep: keep}
	for id, until := range s.Releases {
		t.op(s.Key, id, until, true, 0, 0)
		t.OK = append(t.OK, true)
	}
	for i, serial := range s.Serials {
		t.op(s.Key, s.ids[i], 0, false, serial, 0)
		t.OK = append(t.OK, stored[i])
	}
	if counted {
		t.op(s.Key, "", 0, false, 0, 0)
		t.OK = append(t.OK, true)
	}
	n := len(t.OpKey)
	t.Got, t.Held, t.Next = slices.Repeat([]bool{true}, n), make([]int64, n), make([]int64, n)
	if counted {
		t.Held[n-1], t.Next[n-1] = held, next
	}
	_ = l.ApplyTick(now, &t)
}

// ValidateBucket validates a token, leaky or fixed bucket's parameters as
// an Allow does.
func ValidateBucket(p any) error {
	var l ratelimit.Limit
	switch p := p.(type) {
	case ratelimit.TokenBucket:
		l = ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: p}
	case ratelimit.LeakyBucket:
		l = ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: p}
	case ratelimit.FixedBucket:
		l = ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: p}
	default:
		panic(fmt.Sprintf("ValidateBucket(%T)", p))
	}
	_, err := ratelimit.SpecOf(&l)
	return err
}

// Len returns the number of keys the table holds.
func (l *Leases) Len() int64 { return l.n.Load() }
