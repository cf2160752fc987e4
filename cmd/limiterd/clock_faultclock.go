//go:build faultclock

package main

import (
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/node"
)

// envClockOffset names a file holding a Go duration ("150ms", "-80ms")
// that this build adds to the system clock, read again every 10 ms: the
// fault campaign moves a node's clock while it runs. Only builds with the
// tag faultclock have it.
const envClockOffset = "LIMITERD_TEST_CLOCK_OFFSET_FILE"

// offsetClock is the system clock plus an offset that a file sets.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func newClock(getenv func(string) string) node.Clock {
	path := getenv(envClockOffset)
	if path == "" {
		return node.SystemClock{}
	}
	c := &offsetClock{}
	read := func() {
		data, err := os.ReadFile(path)
		if err != nil {
			return
		}
		if d, err := time.ParseDuration(strings.TrimSpace(string(data))); err == nil {
			c.offset.Store(int64(d))
		}
	}
	read()
	// The process's lifetime: a test build has no other owner for it.
	go func() {
		for range time.Tick(10 * time.Millisecond) {
			read()
		}
	}()
	return c
}
