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
	}})
}
