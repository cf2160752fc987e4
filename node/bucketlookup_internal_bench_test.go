package node

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// BenchmarkBucketLockAll isolates the bucket table's lookup: lockAll and
// unlockAll of one existing token bucket (or a token and a fixed bucket,
// of one key), over a hot set of 1,024 keys and 100,000 keys walked in a
// shuffled order.
func BenchmarkBucketLockAll(b *testing.B) {
	tok := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 1e9, RefillTime: time.Second}}
	fixed := ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Hour, Limit: 1e9}}
	tn := time.Unix(1_700_000_000, 0).UnixNano()
	for _, c := range []struct {
		name   string
		limits []ratelimit.Limit
		n      int
	}{
		{"token-1k", []ratelimit.Limit{tok}, 1 << 10},
		{"token-100k", []ratelimit.Limit{tok}, 100_000},
		{"token+fixed-1k", []ratelimit.Limit{tok, fixed}, 1 << 10},
	} {
		b.Run(c.name, func(b *testing.B) {
			bt := newBuckets(bucketsConfig{Name: "bench", MaxKeys: 2 * c.n}, nil)
			keys := make([]string, c.n)
			held := make([][]heldBucket, c.n)
			for i := range keys {
				keys[i] = fmt.Sprintf("key-%011d", i)
				held[i] = appendHeld(nil, &ratelimit.AllowRequest{Key: keys[i], Cost: 1, Limits: c.limits})
				if err := bt.lockAll(held[i], keys[i], tn, true); err != nil {
					b.Fatal(err)
				}
				unlockAll(held[i])
			}
			rng := rand.New(rand.NewPCG(7, uint64(c.n)))
			order := rng.Perm(c.n)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				k := order[i%c.n]
				hs := held[k]
				if err := bt.lockAll(hs, keys[k], tn, false); err != nil || hs[0].e == nil {
					b.Fatal("bucket not found", err)
				}
				unlockAll(hs)
			}
		})
	}
}
