package node

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/limiterd/limiterd/ratelimit"
)

// benchLookupKey writes key i into buf, as a front parses a request's key
// into its buffer, and returns it: the key's bytes are in the cache, the
// table's are not (with many keys).
func benchLookupKey(buf []byte, i int) string {
	buf = strconv.AppendInt(append(buf[:0], "key-"...), int64(1e11+i), 10)
	return unsafe.String(unsafe.SliceData(buf), len(buf))
}

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
			held := appendHeld(nil, &ratelimit.AllowRequest{Cost: 1, Limits: c.limits})
			buf := make([]byte, 0, 32)
			hs := make([]heldBucket, len(held))
			lockAll := func(i int, create bool) {
				key := benchLookupKey(buf, i)
				copy(hs, held)
				for k := range hs {
					hs[k].id.Key = key
				}
				if err := bt.lockAll(hs, key, tn, create); err != nil || hs[0].e == nil {
					b.Fatal("bucket not found", err)
				}
				unlockAll(hs)
			}
			for i := range c.n {
				lockAll(i, true)
			}
			order := rand.New(rand.NewPCG(7, uint64(c.n))).Perm(c.n)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				lockAll(order[i%c.n], false)
			}
		})
	}
}
