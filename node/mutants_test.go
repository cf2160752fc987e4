package node_test

import (
	"testing"

	"github.com/limiterd/limiterd/internal/mutant"
)

// TestTestsCatchMutants: each mutant, a bug planted in one file, fails the
// test named next to it (see package mutant).
func TestTestsCatchMutants(t *testing.T) {
	mutant.Run(t, []mutant.Mutant{
		{
			Name: "a clear of leases keeps counting the others' leases",
			File: "reset.go",
			Old:  "k.others, k.nextOther = 0, 0",
			New:  "k.nextOther = 0",
			Test: "TestLeasesClear",
		},
		{
			Name: "a local bucket reset leaves the bucket as it was",
			File: "reset.go",
			Old:  "hs[i].e.resetAt(&hs[i].id, tn)",
			New:  "_ = tn",
			Test: "TestResetBucketsAt",
		},
		{
			Name: "a hit at a window's end counted in that window",
			File: "allow.go",
			Old:  "uint64(tn-p.start) < uint64(size)",
			New:  "uint64(tn-p.start) <= uint64(size)",
			Test: "TestAllowAtWindowEndCountsInNextWindow",
		},
		{
			Name: "a refill that reaches Max exactly passes it",
			File: "../ratelimit/bucketmath.go",
			Old:  "} else if n == k {",
			New:  "} else if n == k+1 {",
			Test: "TestTokenBucketRefillStopsAtMax",
		},
		{
			Name: "a bucket that admits alone is charged though the Allow is refused",
			File: "allowkinds.go",
			Old:  "		case allowed || !h.st.Allowed:",
			New:  "		case true:",
			Test: "TestAllowBucketAdmittingAloneIsLeftUnchanged",
		},
		{
			Name: "a wait reported though a window refuses too",
			File: "allowkinds.go",
			Old:  "wait, waitable := time.Duration(0), windowsOK && !out.Allowed",
			New:  "wait, waitable := time.Duration(0), windowsOK || !out.Allowed",
			Test: "TestAllowLeakyWaitOnlyWhenTheWindowsAdmit",
		},
	})
}
