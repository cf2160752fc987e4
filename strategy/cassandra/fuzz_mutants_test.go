package cassandra_test

import (
	"testing"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/internal/mutant"
)

// TestFuzzCatchesMutants: the smoke of the fuzz targets can fail on the
// store's bucket path. internal/mutant builds the package with each
// change; the child runs the target on its seeds and testdata, as CI
// does. Cassandra decides with clustersync.ApplyBuckets, the reference
// itself; what is its own is reading and writing the rows under the
// condition.
func TestFuzzCatchesMutants(t *testing.T) {
	env := []string{harness.EnvCassandra + "=" + harness.SharedCassandra(t).Hosts()[0]}
	mutant.RunEnv(t, env, []mutant.Mutant{{
		// Rows read without their expiry: every call, a replay too,
		// writes them again, counting a write that changed nothing.
		Name:   "bucket.go read: < for !=",
		File:   "bucket.go",
		Old:    "if expireNS != 0 {",
		New:    "if expireNS < 0 {",
		Test:   "FuzzBuckets",
		Caught: "last ops",
	}})
}
