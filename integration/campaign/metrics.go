package campaign

import (
	"math"
	"strconv"
	"strings"
	"time"
)

// longestTick parses limiterd_sync_duration_seconds of namespaces.
func longestTick(metrics string, namespaces ...string) time.Duration {
	var longest time.Duration
	for _, ns := range namespaces {
		prefix := `limiterd_sync_duration_seconds_bucket{namespace="` + ns + `",le="`
		var total float64
		for _, line := range strings.Split(metrics, "\n") {
			if rest, ok := strings.CutPrefix(line, `limiterd_sync_duration_seconds_count{namespace="`+ns+`"} `); ok {
				total, _ = strconv.ParseFloat(rest, 64)
			}
		}
		if total == 0 {
			continue
		}
		for _, line := range strings.Split(metrics, "\n") {
			rest, ok := strings.CutPrefix(line, prefix)
			if !ok {
				continue
			}
			le, count, _ := strings.Cut(rest, `"} `)
			n, _ := strconv.ParseFloat(count, 64)
			b, err := strconv.ParseFloat(le, 64)
			if err == nil && n == total {
				longest = max(longest, time.Duration(b*float64(time.Second)))
				break
			}
			if le == "+Inf" {
				longest = time.Duration(math.MaxInt64)
			}
		}
	}
	return longest
}

// lastSyncs parses limiterd_sync_last_success_timestamp_seconds: each
// namespace's last fully successful sync, Unix time.
func lastSyncs(metrics string) map[string]time.Time {
	out := map[string]time.Time{}
	const prefix = `limiterd_sync_last_success_timestamp_seconds{namespace="`
	for _, line := range strings.Split(metrics, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		ns, v, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			out[ns] = time.Unix(0, int64(f*float64(time.Second)))
		}
	}
	return out
}
