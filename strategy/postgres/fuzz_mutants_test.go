package postgres_test

import (
	"testing"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/internal/mutant"
)

// TestFuzzCatchesMutants: the smoke of the fuzz targets can fail on the
// store's own arithmetic. internal/mutant builds the package with each
// change; the child runs the target on its seeds and testdata, as CI does
// (the resets' mutants: their conformance subtest, which sends them).
func TestFuzzCatchesMutants(t *testing.T) {
	env := []string{harness.EnvPostgres + "=" + harness.SharedPostgres(t).DSN()}
	mutant.RunEnv(t, env, []mutant.Mutant{{
		// A leaky or fixed bucket refuses the take that fills it exactly.
		Name:   "bucket_sql.go take: < for <=",
		File:   "bucket_sql.go",
		Old:    "okb[i] := bef + p_take <= CASE",
		New:    "okb[i] := bef + p_take < CASE",
		Test:   "FuzzBuckets",
		Caught: "last ops",
	}, {
		// An Allow is refused when it reaches its limit exactly.
		Name:   "group.go allow: < for <=",
		File:   "group.go",
		Old:    "+ ($14::int8[])[s.e + 1]::float8 <= x.lim::float8",
		New:    "+ ($14::int8[])[s.e + 1]::float8 < x.lim::float8",
		Test:   "FuzzAllow",
		Caught: "last ops",
	}, {
		// Tokens taken before a refill the cap cut off, caught up after
		// a later take, get none of it back.
		Name:   "bucket_sql.go late take: no waste back",
		File:   "bucket_sql.go",
		Old:    "IF late THEN",
		New:    "IF late AND false THEN",
		Test:   "TestConformance/bucket_late_take",
		Caught: "caught up after a's take",
	}, {
		// A take made before a refill the cap cut off, decided after the
		// bucket was drained, is refused.
		Name:   "bucket_sql.go late decided take: no waste back",
		File:   "bucket_sql.go",
		Old:    "IF k = 1 AND late AND p_take > 0 THEN",
		New:    "IF false THEN",
		Test:   "TestConformance/bucket_late_take",
		Caught: "decided after a drained the bucket",
	}, {
		// A reset call leaves the bucket as the catch-up left it.
		Name:   "bucket_sql.go reset: never",
		File:   "bucket_sql.go",
		Old:    "IF p_reset[i] THEN",
		New:    "IF p_reset[i] AND false THEN",
		Test:   "TestConformance/bucket_reset",
		Caught: "want a new bucket's level",
	}, {
		// A clear releases none of the key's leases.
		Name:   "lease_sql.go clear: no lease",
		File:   "lease_sql.go",
		Old:    "ELSIF p_kind[i] = 6 THEN",
		New:    "ELSIF p_kind[i] = 7 THEN",
		Test:   "TestConformance/lease_clear",
		Caught: "a clear of 3 live leases",
	}})
}
