package node_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// Benchmarks of the bucket kinds, in the shape of the sliding-window ones:
// a hot set of 1,024 keys and a large set of 1,000,000 keys of 16 bytes,
// walked in a fixed shuffled order, serially or from per-goroutine
// offsets under RunParallel. Buckets exist before the timer starts, and
// their capacity (10^9) never runs out, so the benchmarks measure takes
// on existing buckets.

var bucketBenchSets = []struct {
	name string
	n    int
}{
	{"hot-1k", 1 << 10},
	{"large-1M", 1_000_000},
}

var bucketBenchTime = bucketEpoch.Add(500 * time.Millisecond)

var (
	benchTok   = ratelimit.TokenBucket{Max: 1e9, RefillTime: time.Second}
	benchLeaky = ratelimit.LeakyBucket{Size: 1e9, Interval: time.Hour}
	benchFixed = ratelimit.FixedBucket{Period: time.Hour, Limit: 1e9}
)

// bucketBenchState is the table and keys of the running benchmark, built
// once per benchmark name (RunParallel calls the function again to ramp
// b.N).
var bucketBenchState struct {
	name string
	b    *node.Buckets
	keys []string
}

func bucketsFor(b *testing.B, n int, clock node.Clock, take func(bk *node.Buckets, t time.Time, key string)) (*node.Buckets, []string) {
	if bucketBenchState.name == b.Name() {
		return bucketBenchState.b, bucketBenchState.keys
	}
	bucketBenchState.name, bucketBenchState.b, bucketBenchState.keys = "", nil, nil
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key:%012d", i)
	}
	rng := rand.New(rand.NewPCG(7, uint64(n)))
	rng.Shuffle(n, func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	bk := node.NewBuckets(node.BucketsConfig{Name: "bench", MaxKeys: 2 * n}, clock)
	for _, k := range keys {
		take(bk, bk.Now(), k)
	}
	bucketBenchState.name, bucketBenchState.b, bucketBenchState.keys = b.Name(), bk, keys
	return bk, keys
}

func benchBucketKind(b *testing.B, clock func() node.Clock, take func(bk *node.Buckets, t time.Time, key string)) {
	for _, set := range bucketBenchSets {
		for _, par := range []bool{false, true} {
			mode := "serial"
			if par {
				mode = "parallel"
			}
			b.Run(set.name+"/"+mode, func(b *testing.B) {
				bk, keys := bucketsFor(b, set.n, clock(), take)
				walk(b, par, set.n, func(i int) { take(bk, bucketBenchTime, keys[i]) })
			})
		}
	}
}

func fixedBenchClock() node.Clock { return &fakeClock{t: bucketBenchTime} }

func mustBench(b *testing.B) func(node.BucketStatus, error) {
	return func(_ node.BucketStatus, err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTokenTakeAt takes 1 token from an existing token bucket.
func BenchmarkTokenTakeAt(b *testing.B) {
	ok := mustBench(b)
	benchBucketKind(b, fixedBenchClock, func(bk *node.Buckets, t time.Time, key string) {
		ok(bk.TakeTokenAt(t, key, benchTok, 1, false))
	})
}

// BenchmarkTokenAt reads an existing token bucket.
func BenchmarkTokenAt(b *testing.B) {
	ok := mustBench(b)
	benchBucketKind(b, fixedBenchClock, func(bk *node.Buckets, t time.Time, key string) {
		ok(bk.TokenAt(t, key, benchTok))
	})
}

// BenchmarkLeakyTakeAt adds 1 drop to an existing leaky bucket.
func BenchmarkLeakyTakeAt(b *testing.B) {
	ok := mustBench(b)
	benchBucketKind(b, fixedBenchClock, func(bk *node.Buckets, t time.Time, key string) {
		ok(bk.TakeLeakyAt(t, key, benchLeaky, 1))
	})
}

// BenchmarkFixedTakeAt counts 1 in an existing fixed bucket.
func BenchmarkFixedTakeAt(b *testing.B) {
	ok := mustBench(b)
	benchBucketKind(b, fixedBenchClock, func(bk *node.Buckets, t time.Time, key string) {
		ok(bk.TakeFixedAt(t, key, benchFixed, 1))
	})
}

// BenchmarkTokenTake is TakeTokenAt reading the system clock: refills
// happen as real time passes.
func BenchmarkTokenTake(b *testing.B) {
	ok := mustBench(b)
	benchBucketKind(b, func() node.Clock { return node.SystemClock{} }, func(bk *node.Buckets, _ time.Time, key string) {
		ok(bk.TakeToken(key, benchTok, 1, false))
	})
}

// BenchmarkAllowAtBucket is an Allow of one bucket limit (of each kind)
// on existing buckets of the hot key set: the path every front's bucket
// call takes (validation, the bucket's lock, its arithmetic, the answer).
// token-100k walks 100,000 token buckets in a shuffled order, where the
// table's lookups miss the CPU's caches.
func BenchmarkAllowAtBucket(b *testing.B) {
	for _, k := range []struct {
		name string
		l    ratelimit.Limit
		n    int
	}{
		{"token", ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: benchTok}, 1 << 10},
		{"leaky", ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: benchLeaky}, 1 << 10},
		{"fixed", ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: benchFixed}, 1 << 10},
		{"token-100k", ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: benchTok}, 100_000},
	} {
		b.Run(k.name, func(b *testing.B) {
			ns, err := node.NewNamespace(node.Config{Name: "b", WindowSizes: []time.Duration{time.Minute}}, nil)
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, k.n)
			for i := range keys {
				keys[i] = fmt.Sprintf("key-%011d", i)
				if _, err := ns.AllowAt(bucketBenchTime, ratelimit.AllowRequest{Key: keys[i], Cost: 1, Limits: []ratelimit.Limit{k.l}}, nil); err != nil {
					b.Fatal(err)
				}
			}
			rng := rand.New(rand.NewPCG(7, uint64(k.n)))
			rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			var dst [1]ratelimit.LimitStatus
			req := ratelimit.AllowRequest{Cost: 1, Limits: []ratelimit.Limit{k.l}}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				req.Key = keys[i%len(keys)]
				if _, err := ns.AllowAt(bucketBenchTime.Add(time.Duration(i)), req, dst[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
