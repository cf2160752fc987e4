package sync

import (
	"testing"
	"time"
)

// TestConfigDefaults: a zero field takes its default (a tick's timeout
// ten sync periods, at least a second), a set one stays.
func TestConfigDefaults(t *testing.T) {
	for rate, tick := range map[float64]time.Duration{0.5: 5 * time.Second, 0.01: time.Second, 0: time.Second} {
		c := Config{}.withDefaults(rate)
		if c.TickTimeout != tick || c.CallTimeout != 250*time.Millisecond || c.RetryPeriod != time.Second {
			t.Errorf("sync_rate %v: tick %v, call %v, retry %v; want %v, 250ms, 1s", rate, c.TickTimeout, c.CallTimeout, c.RetryPeriod, tick)
		}
	}
	set := Config{TickTimeout: 3 * time.Second, CallTimeout: time.Millisecond, RetryPeriod: 2 * time.Second}.withDefaults(0.5)
	if set.TickTimeout != 3*time.Second || set.CallTimeout != time.Millisecond || set.RetryPeriod != 2*time.Second {
		t.Errorf("set timeouts with defaults: %+v, want them unchanged", set)
	}
}
