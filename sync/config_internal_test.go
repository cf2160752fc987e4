package sync

import (
	"testing"
	"time"
)

// TestConfigDefaults: a zero field takes its default (a tick's timeout
// ten sync periods, at least a second), a set one stays.
func TestConfigDefaults(t *testing.T) {
	for mode, tick := range map[Mode]time.Duration{Periodic{Period: 500 * time.Millisecond}: 5 * time.Second, Periodic{Period: 10 * time.Millisecond}: time.Second, Synchronous{}: time.Second} {
		c := Config{}.withDefaults(mode)
		if c.TickTimeout != tick || c.CallTimeout != 250*time.Millisecond || c.RetryPeriod != time.Second {
			t.Errorf("%#v: tick %v, call %v, retry %v; want %v, 250ms, 1s", mode, c.TickTimeout, c.CallTimeout, c.RetryPeriod, tick)
		}
	}
	set := Config{TickTimeout: 3 * time.Second, CallTimeout: time.Millisecond, RetryPeriod: 2 * time.Second}.withDefaults(Periodic{Period: 500 * time.Millisecond})
	if set.TickTimeout != 3*time.Second || set.CallTimeout != time.Millisecond || set.RetryPeriod != 2*time.Second {
		t.Errorf("set timeouts with defaults: %+v, want them unchanged", set)
	}
}
