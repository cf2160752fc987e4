package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestNoAllocs: counting, reading and deciding on an existing key in a
// live window allocate nothing.
func TestNoAllocs(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	at := epoch.Add(time.Second / 2)
	incr(t, ns, at, "existing-key", 0, 1)
	rates := make([]ratelimit.Rate, 0, 2)
	statuses := make([]ratelimit.LimitStatus, 0, 2)
	req := ratelimit.AllowRequest{Key: "existing-key", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Second, Limit: 1e9}, {Size: time.Minute, Limit: 1e9}}}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"IncrementAt", func() error { _, err := ns.IncrementAt(at, "existing-key", 0, 1, rates); return err }},
		{"IncrementAt one size", func() error { _, err := ns.IncrementAt(at, "existing-key", time.Minute, 0.5, rates); return err }},
		{"RateAt", func() error { _, err := ns.RateAt(at, "existing-key", 0, 1, rates); return err }},
		{"AllowAt", func() error { _, err := ns.AllowAt(at, req, statuses); return err }},
	} {
		var err error
		if got := testing.AllocsPerRun(100, func() { err = tc.call() }); got != 0 {
			t.Errorf("%s: %v allocations per call, want 0", tc.name, got)
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
