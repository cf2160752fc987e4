package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

const (
	hit = ratelimit.Micro
	day = 24 * time.Hour
)

func tokenBucket(key string, max int64, refill time.Duration, amount int64, strict bool) ratelimit.BucketSpec {
	return ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: max, B: int64(refill), C: amount, Key: key, Strict: strict}
}

// leakyBucket returns a leaky bucket with its drip: interval × Micro /
// size, truncated.
func leakyBucket(key string, size int64, interval time.Duration) ratelimit.BucketSpec {
	d := new(big.Int).Mul(big.NewInt(int64(interval)), big.NewInt(ratelimit.Micro))
	d.Quo(d, big.NewInt(size))
	return ratelimit.BucketSpec{Kind: ratelimit.LeakyLimit, A: size, B: int64(interval), C: d.Int64(), Key: key}
}

func fixedBucket(key string, period time.Duration, limit int64) ratelimit.BucketSpec {
	return ratelimit.BucketSpec{Kind: ratelimit.FixedLimit, A: int64(period), B: limit, Key: key}
}

// bigBuckets are buckets of key whose arithmetic passes 2^53: refill
// times, drips and periods of 300 and 366 days (above 2^53 ns), a
// capacity of MaxValue, and refills of 1 ns or 1 micro-hit, next to
// ordinary ones.
func bigBuckets(key string) []ratelimit.BucketSpec {
	return []ratelimit.BucketSpec{
		tokenBucket(key, ratelimit.MaxValue*hit, 300*day, 1, false),
		tokenBucket(key, 5*hit, 1, 1, false),
		tokenBucket(key, 3*hit, 366*day, 3*hit, true),
		tokenBucket(key, 7*hit, 250*time.Millisecond, 2*hit, true),
		leakyBucket(key, hit, 366*day),
		leakyBucket(key, ratelimit.MaxValue*hit, time.Second),
		leakyBucket(key, 10*hit, time.Second),
		fixedBucket(key, 366*day, ratelimit.MaxValue*hit),
		fixedBucket(key, 300*day, 2*hit),
		fixedBucket(key, time.Second, 5*hit),
		fixedBucket(key, 7, 3*hit),
	}
}

// bucketInc is one incarnation's side of the calls.
type bucketInc struct {
	name    string
	life    int64
	version int64
	total   map[string]int64
	last    []clustersync.BucketCall // its last call, to replay
	lastAt  int64
	lastN   int64
}

// TestBucketsMatchReference sends random calls, with instants, lives,
// totals and levels past 2^53, to the store and to the reference
// (clustersync.ApplyBuckets) and wants the same replies, Seq included:
// marks at real Unix ns and before 1970, refill times and periods of
// 300 and 366 days, debts and totals beyond 2^53, time going back,
// retries, late calls and new lives.
func TestBucketsMatchReference(t *testing.T) {
	for _, tc := range []struct {
		name string
		base int64
		seed uint64
	}{
		{"now", time.Now().UnixNano(), 1},
		{"now-2", time.Now().UnixNano(), 2},
		{"before 1970", -1_000_000_000_000_000_000, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			testBucketsMatchReference(t, s, tc.base, rand.New(rand.NewPCG(tc.seed, 7)))
		})
	}
}

func testBucketsMatchReference(t *testing.T, s *redisstore.Store, base int64, r *rand.Rand) {
	ctx := ctxT(t)
	const ns = "ref"
	specs := map[string][]ratelimit.BucketSpec{"k": bigBuckets("k"), "k\x00{x}": bigBuckets("k\x00{x}")}
	keys := []string{"k", "k\x00{x}"}
	for _, b := range specs["k"] {
		if err := b.Validate(); err != nil {
			t.Fatalf("%s: %v", b.StoreKey(), err)
		}
	}
	rows := map[string]*clustersync.BucketRow{}
	exp := time.Now().Add(time.Hour)
	lives := time.Now().UnixNano()
	incs := make([]*bucketInc, 3)
	for i := range incs {
		lives++
		incs[i] = &bucketInc{name: fmt.Sprint("inc-", i), life: lives, version: time.Now().UnixMicro(), total: map[string]int64{}}
	}
	clock := base
	for step := range 600 {
		c := incs[r.IntN(len(incs))]
		var calls []clustersync.BucketCall
		var at, take int64
		switch op := r.IntN(20); {
		case op == 0:
			lives++
			c.life, c.total = lives, map[string]int64{}
			continue
		case op <= 2 && c.last != nil: // a retry
			calls, at, take = c.last, c.lastAt, c.lastN
		case op == 3 && c.last != nil: // a late copy
			calls, at, take = append([]clustersync.BucketCall(nil), c.last...), c.lastAt, c.lastN
			for i := range calls {
				calls[i].Version--
			}
		default:
			switch x := r.IntN(10); {
			case x < 3:
			case x < 7:
				clock += r.Int64N(int64(time.Second))
			case x < 8:
				clock += r.Int64N(int64(400 * day))
			default:
				clock -= r.Int64N(int64(time.Hour)) // time going back
			}
			at = clock
			take = []int64{0, 1, hit, 3 * hit / 2, ratelimit.MaxValue * hit, r.Int64N(10 * hit)}[r.IntN(6)]
			key := keys[r.IntN(len(keys))]
			c.version++
			for _, j := range r.Perm(len(specs[key]))[:1+r.IntN(3)] {
				b := specs[key][j]
				k := b.StoreKey()
				switch x := r.IntN(10); {
				case x < 2:
					c.total[k] += r.Int64N(10 * hit) // counted while away
				case x < 3:
					c.total[k] += r.Int64N(1 << 54) // far past 2^53
				}
				lastAt := []int64{0, at, at - r.Int64N(int64(30*day)), at + r.Int64N(int64(time.Second))}[r.IntN(4)]
				calls = append(calls, clustersync.BucketCall{Namespace: ns, Bucket: b, Life: c.life, Total: c.total[k],
					ApplyAt: lastAt, Version: c.version, ExpireAt: exp})
			}
			c.last, c.lastAt, c.lastN = calls, at, take
		}
		got := make([]clustersync.BucketReply, len(calls))
		allowed, err := s.Buckets(ctx, c.name, at, take, calls, got)
		if err != nil {
			t.Fatalf("step %d: Buckets: %v", step, err)
		}
		refRows := make([]*clustersync.BucketRow, len(calls))
		for i := range calls {
			refRows[i] = rows[calls[i].Bucket.StoreKey()]
		}
		want := make([]clustersync.BucketReply, len(calls))
		wantAllowed := clustersync.ApplyBuckets(c.name, at, take, calls, refRows, want, make([]bool, len(calls)))
		for i := range calls {
			rows[calls[i].Bucket.StoreKey()] = refRows[i]
			if got[i] != want[i] {
				t.Fatalf("step %d (%s, take %d at %d) bucket %s:\n got %+v\nwant %+v", step, c.name, take, at, calls[i].Bucket.StoreKey(), got[i], want[i])
			}
			c.total[calls[i].Bucket.StoreKey()] = max(c.total[calls[i].Bucket.StoreKey()], got[i].Applied)
		}
		if allowed != wantAllowed {
			t.Fatalf("step %d: allowed = %v, want %v", step, allowed, wantAllowed)
		}
	}
}

// TestBucketsExpiry wants a bucket's hash to expire at the latest
// ExpireAt sent, in ms rounded up.
func TestBucketsExpiry(t *testing.T) {
	s, prefix := newStoreAt(t, redisAddr(t))
	raw := rawClient(t, redisAddr(t))
	b := tokenBucket("k", 3*hit, time.Hour, 3*hit, false)
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	at := time.Now().UnixNano()
	for i, e := range []struct {
		exp, want time.Time
	}{
		{base.Add(10*time.Second + 300*time.Microsecond), base.Add(10*time.Second + time.Millisecond)},
		{base.Add(5 * time.Second), base.Add(10*time.Second + time.Millisecond)}, // earlier: kept
		{time.Time{}, base.Add(10*time.Second + time.Millisecond)},               // none: kept
		{base.Add(20 * time.Second), base.Add(20 * time.Second)},
	} {
		call := clustersync.BucketCall{Namespace: "exp", Bucket: b, Life: 1, Version: int64(i + 1), ExpireAt: e.exp}
		if _, err := s.Buckets(ctxT(t), "a", at, hit, []clustersync.BucketCall{call}, make([]clustersync.BucketReply, 1)); err != nil {
			t.Fatal(err)
		}
		ms, err := raw.Do(ctxT(t), "PEXPIRETIME", redisstore.BucketsKey(prefix, "exp", b)).Int64()
		if err != nil {
			t.Fatal(err)
		}
		if got := time.UnixMilli(ms); !got.Equal(e.want) {
			t.Errorf("call %d: expiry %v, want %v", i, got, e.want)
		}
	}
}

// TestBucketsErrors: bad calls are refused before the server sees them,
// a done ctx and a closed store are reported.
func TestBucketsErrors(t *testing.T) {
	s := newStore(t)
	b := tokenBucket("k", 3*hit, time.Hour, 3*hit, false)
	call := clustersync.BucketCall{Namespace: "e", Bucket: b, Life: 1, Version: 1}
	other := call
	other.Bucket.Key = "other"
	bad := call
	bad.Bucket.B = 0
	at := time.Now().UnixNano()
	for name, calls := range map[string][]clustersync.BucketCall{
		"two keys":     {call, other},
		"a bad bucket": {bad},
	} {
		if _, err := s.Buckets(ctxT(t), "a", at, hit, calls, make([]clustersync.BucketReply, len(calls))); err == nil || errors.Is(err, clustersync.ErrUnavailable) {
			t.Errorf("%s: err = %v, want a call error", name, err)
		}
	}
	if _, err := s.Buckets(ctxT(t), "a", at, hit, []clustersync.BucketCall{call}, nil); err == nil {
		t.Error("len(replies) != len(calls): no error")
	}
	if ok, err := s.Buckets(ctxT(t), "a", at, hit, nil, nil); !ok || err != nil {
		t.Errorf("no calls = %v, %v; want true, nil", ok, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Buckets(ctx, "a", at, hit, []clustersync.BucketCall{call}, make([]clustersync.BucketReply, 1)); !errors.Is(err, context.Canceled) || !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("a done ctx: err = %v, want ErrUnavailable and context.Canceled", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Buckets(ctxT(t), "a", at, hit, []clustersync.BucketCall{call}, make([]clustersync.BucketReply, 1)); !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("after Close: err = %v, want ErrClosed", err)
	}
}
