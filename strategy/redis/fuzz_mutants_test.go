package redis_test

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
	env := []string{harness.EnvRedis + "=" + redisAddr(t)}
	mutant.RunEnv(t, env, []mutant.Mutant{{
		// A leaky or fixed bucket refuses the take that fills it exactly.
		Name:   "buckets.lua take: < for <=",
		File:   "buckets.lua",
		Old:    "if less(limit, after) then return false, 0 end",
		New:    "if not less(after, limit) then return false, 0 end",
		Test:   "FuzzBuckets",
		Caught: "last ops",
	}, {
		// An Allow is refused when it reaches its limit exactly.
		Name:   "allowgroup.lua decision: >= for >",
		File:   "allowgroup.lua",
		Old:    "+ prevPart[w] + cost > lim + 0 then",
		New:    "+ prevPart[w] + cost >= lim + 0 then",
		Test:   "FuzzAllow",
		Caught: "last ops",
	}, {
		// A counted cost is added to the current total in doubles: a
		// total beyond 2^53 is written rounded.
		Name:   "allowgroup.lua total: summed in Lua",
		File:   "allowgroup.lua",
		Old:    "  if all then",
		New:    "  if false then",
		Test:   "TestConformance/atomic_allow/large_totals_written_exactly",
		Caught: "sum over every incarnation of",
	}, {
		// An acquire is granted one lease past the limit.
		Name:   "leases.lua acquire: <= for <",
		File:   "leases.lua",
		Old:    "held < tonumber(ARGV[a + LEASES_OP_LIMIT])",
		New:    "held <= tonumber(ARGV[a + LEASES_OP_LIMIT])",
		Test:   "FuzzLeases",
		Caught: "last ops",
	}, {
		// Tokens taken before a refill the cap cut off, caught up after
		// a later take, get none of it back.
		Name:   "buckets.lua late take: no waste back",
		File:   "buckets.lua",
		Old:    "        if late then",
		New:    "        if false then",
		Test:   "TestConformance/bucket_late_take",
		Caught: "caught up after a's take",
	}, {
		// A take made before a refill the cap cut off, decided after the
		// bucket was drained, is refused.
		Name:   "buckets.lua late decided take: no waste back",
		File:   "buckets.lua",
		Old:    "  if late and less(0, n) then",
		New:    "  if false then",
		Test:   "TestConformance/bucket_late_take",
		Caught: "decided after a drained the bucket",
	}, {
		// A reset call leaves the bucket as the catch-up left it.
		Name:   "buckets.lua reset: never",
		File:   "buckets.lua",
		Old:    "if ARGV[a + BUCKETS_CALL_RESET] == '1' then",
		New:    "if ARGV[a + BUCKETS_CALL_RESET] == '2' then",
		Test:   "TestConformance/bucket_reset",
		Caught: "want a new bucket's level",
	}, {
		// A clear releases none of the key's leases.
		Name:   "leases.lua clear: no lease",
		File:   "leases.lua",
		Old:    "local ms = call('ZRANGE', S, '[l', '(m', 'BYLEX')",
		New:    "local ms = {}",
		Test:   "TestConformance/lease_clear",
		Caught: "a clear of 3 live leases",
	}})
}
