package postgres_test

import (
	"testing"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/strategy/strategytest"
)

// TestFuzzCatchesMutants: the smoke of the fuzz targets can fail on the
// store's own arithmetic (see strategytest.CatchFuzzMutants).
func TestFuzzCatchesMutants(t *testing.T) {
	env := []string{harness.EnvPostgres + "=" + harness.SharedPostgres(t).DSN()}
	strategytest.CatchFuzzMutants(t, env, []strategytest.FuzzMutant{{
		// A leaky or fixed bucket refuses the take that fills it exactly.
		Name:   "bucket_sql.go take: < for <=",
		File:   "bucket_sql.go",
		From:   "okb[i] := bef + p_take <= CASE",
		To:     "okb[i] := bef + p_take < CASE",
		Target: "FuzzBuckets",
	}, {
		// An Allow is refused when it reaches its limit exactly.
		Name:   "sql.go allow: < for <=",
		File:   "sql.go",
		From:   "+ $4::int8::float8 <= o.lim::float8",
		To:     "+ $4::int8::float8 < o.lim::float8",
		Target: "FuzzAllow",
	}})
}
