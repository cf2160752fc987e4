package cassandra_test

import (
	"testing"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/strategy/strategytest"
)

// TestFuzzCatchesMutants: the smoke of the fuzz targets can fail on the
// store's bucket path (see strategytest.CatchFuzzMutants). Cassandra
// decides with clustersync.ApplyBuckets, the reference itself; what is
// its own is reading and writing the rows under the condition.
func TestFuzzCatchesMutants(t *testing.T) {
	env := []string{harness.EnvCassandra + "=" + harness.SharedCassandra(t).Hosts()[0]}
	strategytest.CatchFuzzMutants(t, env, []strategytest.FuzzMutant{{
		// Rows read without their expiry: every call, a replay too,
		// writes them again, counting a write that changed nothing.
		Name:   "bucket.go read: < for !=",
		File:   "bucket.go",
		From:   "if expireNS != 0 {",
		To:     "if expireNS < 0 {",
		Target: "FuzzBuckets",
	}})
}
