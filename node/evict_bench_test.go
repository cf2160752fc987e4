package node_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// BenchmarkIncrementAtOnFull counts 1 hit for an existing key (hot-1k,
// serial) with each key cap policy: the hot path must not differ.
func BenchmarkIncrementAtOnFull(b *testing.B) {
	for _, policy := range []node.KeyCapPolicy{node.OnFullRefuse, node.OnFullEvict} {
		b.Run(string(policy), func(b *testing.B) {
			cfg := benchConfig()
			cfg.OnFull = policy
			ns := newNS(b, cfg, nil)
			keys := benchKeys(hotKeys)
			var dst [2]ratelimit.Rate
			for _, k := range keys {
				if _, err := ns.IncrementAt(benchTime, k, 0, 1, dst[:0]); err != nil {
					b.Fatal(err)
				}
			}
			walk(b, false, hotKeys, func(i int) {
				if _, err := ns.IncrementAt(benchTime, keys[i], time.Second, 1, dst[:0]); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkNewKeyAtCap counts 1 hit for a new key (from 10^6 distinct
// keys) in a namespace full at 10,000 keys: refused, or in the place of an
// evicted key; "below-cap" inserts under a cap never reached, for
// reference. Run with -benchtime=Nx, N <= 10^6, so that every key is new.
func BenchmarkNewKeyAtCap(b *testing.B) {
	for _, tc := range []struct {
		name    string
		maxKeys int
		policy  node.KeyCapPolicy
	}{
		{"below-cap", 2 * largeKeys, node.OnFullRefuse},
		{"refuse", 10_000, node.OnFullRefuse},
		{"evict", 10_000, node.OnFullEvict},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cfg := benchConfig()
			cfg.MaxKeys, cfg.OnFull = tc.maxKeys, tc.policy
			ns := newNS(b, cfg, nil)
			var dst [2]ratelimit.Rate
			for i := range 10_000 {
				if _, err := ns.IncrementAt(benchTime, "fill-"+strconv.Itoa(i), 0, 1, dst[:0]); err != nil {
					b.Fatal(err)
				}
			}
			keys := benchKeys(largeKeys)
			walk(b, false, largeKeys, func(i int) {
				if _, err := ns.IncrementAt(benchTime, keys[i], 0, 1, dst[:0]); err != nil && !errors.Is(err, node.ErrKeyLimit) {
					b.Fatal(err)
				}
			})
		})
	}
}
