package redis_test

import (
	"testing"

	"github.com/limiterd/limiterd/strategy/strategytest"
)

// The store's arithmetic (allowgroup.lua, buckets.lua, leases.lua,
// push.lua) fuzzed against the Go engine, one target per kind (see
// strategytest.Fuzz). Plain go test runs the seeds and
// testdata/fuzz (the CI smoke); a longer search, one target at a time:
//
//	go test -run '^$' -fuzz '^FuzzBuckets$' -fuzztime 10m -fuzzminimizetime 20x -parallel 1 ./strategy/redis

// fuzzSteps is how many generated ops follow each input.
const fuzzSteps = 2000

func fuzzKind(f *testing.F, kind strategytest.FuzzKind) {
	strategytest.AddFuzzSeeds(f, kind)
	s := newStore(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		strategytest.Fuzz(t, s, kind, data, fuzzSteps)
	})
}

func FuzzIncrement(f *testing.F) { fuzzKind(f, strategytest.FuzzIncrement) }

func FuzzAllow(f *testing.F) { fuzzKind(f, strategytest.FuzzAllow) }

func FuzzBuckets(f *testing.F) { fuzzKind(f, strategytest.FuzzBuckets) }

func FuzzLeases(f *testing.F) { fuzzKind(f, strategytest.FuzzLeases) }
