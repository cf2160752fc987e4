// Package fakeclock is a clock for tests that moves only when told to.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a settable clock, safe for concurrent use. It has the Now
// method of the clocks limiterd's packages take.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a Clock reading t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Add moves the clock by d (backwards when d is negative).
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set sets the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}
