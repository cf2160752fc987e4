package redis_test

import (
	"testing"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/strategy/strategytest"
)

// TestFuzzCatchesMutants: the smoke of the fuzz targets can fail on the
// store's own arithmetic (see strategytest.CatchFuzzMutants).
func TestFuzzCatchesMutants(t *testing.T) {
	env := []string{harness.EnvRedis + "=" + redisAddr(t)}
	strategytest.CatchFuzzMutants(t, env, []strategytest.FuzzMutant{{
		// A leaky or fixed bucket refuses the take that fills it exactly.
		Name:   "buckets.lua take: < for <=",
		File:   "buckets.lua",
		From:   "if less(limit, after) then return false, 0 end",
		To:     "if not less(after, limit) then return false, 0 end",
		Target: "FuzzBuckets",
	}, {
		// An Allow is refused when it reaches its limit exactly.
		Name:   "allow.lua decision: >= for >",
		File:   "allow.lua",
		From:   "if rate + cost > ARGV[a + ALLOW_LIMIT_LIMIT] + 0 then",
		To:     "if rate + cost >= ARGV[a + ALLOW_LIMIT_LIMIT] + 0 then",
		Target: "FuzzAllow",
	}, {
		// An acquire is granted one lease past the limit.
		Name:   "leases.lua acquire: <= for <",
		File:   "leases.lua",
		From:   "held < tonumber(ARGV[a + LEASES_OP_LIMIT])",
		To:     "held <= tonumber(ARGV[a + LEASES_OP_LIMIT])",
		Target: "FuzzLeases",
	}})
}
