package node_test

import (
	"fmt"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestDirtyListsLoseNoWrite: writers count (lock-free Increment, Allow)
// while a syncer collects, pushes (sometimes failing) and marks, as ticks
// do. Once the writers stop, a last collect finds what is left, and the
// totals pushed are every hit counted: a key's change is never missed
// because the dirty lists are read while it is written.
func TestDirtyListsLoseNoWrite(t *testing.T) {
	clock := newFakeClock(epoch.Add(30 * time.Second))
	ns := newNS(t, syncedConfig(time.Minute), clock)
	const writers, perWriter, keys = 4, 5000, 50
	var done atomic.Bool
	var wg gosync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				key := fmt.Sprint("k", (w*perWriter+i)%keys)
				if i%3 == 0 {
					if _, err := ns.Allow(ratelimit.AllowRequest{Key: key, Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: 1e9}}}, nil); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				if _, err := ns.Increment(key, 0, 1, nil); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	pushed := map[string]int64{}
	version := int64(0)
	tick := func(fail bool) int {
		dirty := ns.CollectDirty(clock.Now(), nil)
		for _, p := range dirty {
			version++
			if fail {
				ns.MarkUncertain(p)
				continue
			}
			ns.MarkPushed(p, version)
			pushed[p.Key] = p.Total
		}
		return len(dirty)
	}
	go func() { wg.Wait(); done.Store(true) }()
	for i := 0; !done.Load(); i++ {
		tick(i%5 == 4)
	}
	tick(true) // a failed push leaves them dirty
	tick(false)
	if n := tick(false); n != 0 {
		t.Errorf("%d windows still dirty after everything was pushed", n)
	}
	var sum int64
	for _, v := range pushed {
		sum += v
	}
	if want := int64(writers*perWriter) * ratelimit.Micro; sum != want {
		t.Errorf("pushed totals sum to %d micro-hits, want every hit counted: %d", sum, want)
	}
}
