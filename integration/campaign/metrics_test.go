package campaign

import (
	"testing"
	"time"
)

func TestLongestTick(t *testing.T) {
	metrics := `limiterd_sync_duration_seconds_bucket{namespace="periodic",le="0.004"} 10
limiterd_sync_duration_seconds_bucket{namespace="periodic",le="0.008"} 19
limiterd_sync_duration_seconds_bucket{namespace="periodic",le="0.016"} 20
limiterd_sync_duration_seconds_bucket{namespace="periodic",le="+Inf"} 20
limiterd_sync_duration_seconds_count{namespace="periodic"} 20
limiterd_sync_duration_seconds_bucket{namespace="other",le="0.512"} 3
limiterd_sync_duration_seconds_count{namespace="other"} 3
`
	if got := longestTick(metrics, "periodic", "count-periodic"); got != 16*time.Millisecond {
		t.Errorf("longest tick %v, want 16ms (the other namespace's ticks left out)", got)
	}
	if got := longestTick(metrics, "other"); got != 512*time.Millisecond {
		t.Errorf("longest tick of other %v, want 512ms", got)
	}
}

func TestLastSyncs(t *testing.T) {
	got := lastSyncs(`# TYPE limiterd_sync_last_success_timestamp_seconds gauge
limiterd_sync_last_success_timestamp_seconds{namespace="count-periodic"} 1.7000000125e+09
limiterd_sync_last_success_timestamp_seconds{namespace="never"} 0
`)
	if len(got) != 1 || !got["count-periodic"].Equal(time.Unix(1_700_000_012, 500_000_000)) {
		t.Errorf("lastSyncs = %v", got)
	}
}
