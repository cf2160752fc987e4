package node

import (
	"testing"
	"time"
)

// TestLeaseIdleIsFourSyncPeriodsAtLeastAMinute: Run drops a key of the
// lease table after four sync periods without a lease, and never sooner
// than a minute, so a key in use keeps its others' count between syncs.
func TestLeaseIdleIsFourSyncPeriodsAtLeastAMinute(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want time.Duration
	}{
		{30, 2 * time.Minute},
		{1, time.Minute},
		{-1, time.Minute}, // local: no sync
	} {
		if got := leaseIdle(Config{SyncRate: tc.rate}); got != tc.want {
			t.Errorf("leaseIdle(sync rate %v) = %v, want %v", tc.rate, got, tc.want)
		}
	}
}
