package node

import (
	"testing"
	"time"
)

// TestLeaseIdleAtLeastAMinute: Run drops a key of the lease table after
// the config's LeaseIdle without a lease (four sync periods, as the
// config loader sets it), and never sooner than a minute.
func TestLeaseIdleAtLeastAMinute(t *testing.T) {
	for _, tc := range []struct {
		idle time.Duration
		want time.Duration
	}{
		{2 * time.Minute, 2 * time.Minute},
		{4 * time.Second, time.Minute},
		{0, time.Minute}, // local: no sync
	} {
		if got := leaseIdle(Config{LeaseIdle: tc.idle}); got != tc.want {
			t.Errorf("leaseIdle(%v) = %v, want %v", tc.idle, got, tc.want)
		}
	}
}
