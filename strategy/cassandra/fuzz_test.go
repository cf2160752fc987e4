package cassandra_test

import (
	"testing"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/strategy/strategytest"
)

// The store's paths (push.go, fetch.go; bucket.go and lease.go under
// lightweight transactions) fuzzed against the Go engine, one target per
// kind it serves (see strategytest.Fuzz): no FuzzAllow, as Cassandra is
// no GroupAllower. Plain go test runs the seeds and
// testdata/fuzz (the CI smoke); a longer search, one target at a time:
//
//	go test -run '^$' -fuzz '^FuzzBuckets$' -fuzztime 10m -fuzzminimizetime 20x -parallel 1 ./strategy/cassandra

// fuzzSteps is how many generated ops follow each input.
const fuzzSteps = 250

func fuzzKind(f *testing.F, kind strategytest.FuzzKind) {
	strategytest.AddFuzzSeeds(f, kind)
	s := open(f, newEnv(f, harness.SharedCassandra(f)).config())
	f.Fuzz(func(t *testing.T, data []byte) {
		strategytest.Fuzz(t, s, kind, data, fuzzSteps)
	})
}

func FuzzIncrement(f *testing.F) { fuzzKind(f, strategytest.FuzzIncrement) }

func FuzzBuckets(f *testing.F) { fuzzKind(f, strategytest.FuzzBuckets) }

func FuzzLeases(f *testing.F) { fuzzKind(f, strategytest.FuzzLeases) }
