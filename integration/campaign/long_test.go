//go:build integration && campaign

package campaign

import (
	"flag"
	"fmt"
	"strings"
	"testing"
)

var (
	schedules = flag.Int("campaign.schedules", 10, "schedules per store")
	seedBase  = flag.Uint64("campaign.seed", 1, "the first schedule's seed; the others follow")
	onStores  = flag.String("campaign.stores", "redis,postgres,cassandra", "stores to run on")
)

// TestCampaign runs -campaign.schedules schedules of 20 s on each store
// named by -campaign.stores, seeds from -campaign.seed, and reports each
// violation with its seed and history file. Out of CI (build tag
// campaign); one schedule replays with -campaign.schedules 1
// -campaign.seed N.
func TestCampaign(t *testing.T) {
	bin := faultBinary(t)
	for _, s := range stores {
		if !strings.Contains(","+*onStores+",", ","+s.name+",") {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			st := s.open(t)
			dir := historyDir(t)
			var faults, overlap, judged, windows, faulted, fallback, failed int
			kinds := map[FaultKind]int{}
			for i := range *schedules {
				sched := Generate(*seedBase+uint64(i), params())
				t.Run(fmt.Sprint(sched.Seed), func(t *testing.T) {
					res := run(t, st, bin, sched, dir)
					faults += len(sched.Faults)
					overlap = max(overlap, sched.MaxOverlap())
					for _, f := range sched.Faults {
						kinds[f.Kind]++
					}
					judged += res.report.Judged
					windows += res.report.Windows
					faulted += res.report.Faulted
					fallback += res.report.Fallback
					for _, v := range res.report.Violations {
						t.Errorf("seed %d (history %s): %s", sched.Seed, res.path, v)
					}
					if len(res.report.Violations) > 0 {
						failed++
						t.Logf("schedule %s", sched)
					}
				})
			}
			t.Logf("campaign %s: %d schedules from seed %d, %d faults (%v), at most %d at once; %d calls judged, %d windows/grants/counts (%d near a fault, %d admissions beyond the limit there); %d schedules with a violation",
				s.name, *schedules, *seedBase, faults, kinds, overlap, judged, windows, faulted, fallback, failed)
		})
	}
}
