package node_test

import (
	"fmt"
	gosync "sync"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestCountingRacesReclaim: counting finds keys without a lock while other
// goroutines insert keys (growing the shard tables) and a reclaim removes
// dead keys (leaving tombstones, shrinking tables) and marks removed entries.
// No hit on a live key may be lost, and hits on keys being reclaimed must
// land either in the removed entry (before the reclaim) or in a fresh one.
func TestCountingRacesReclaim(t *testing.T) {
	const (
		workers = 4
		keys    = 3000
		passes  = 3
	)
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	now := epoch.Add(30 * time.Second)
	old := now.Add(-3 * time.Minute) // dead at now for both sizes

	var wg, bg gosync.WaitGroup
	stop := make(chan struct{})
	bg.Add(2)
	go func() { // reclaimer
		defer bg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ns.Reclaim(now)
		}
	}()
	go func() { // churn: keys that die at once
		defer bg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			incr(t, ns, old, fmt.Sprint("old-", i%5000), 0, 1)
		}
	}()
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := 0.0
			for p := range passes {
				for j := range keys {
					// Every worker counts every live key, from different
					// offsets, so some race to insert the same key.
					incr(t, ns, now, fmt.Sprint("live-", (j+g*keys/workers)%keys), 0, 1)
					if j%16 == 0 {
						// A key being reclaimed under us: each rate is
						// either one more than the last or a fresh 1.
						r := incr(t, ns, old, fmt.Sprint("shared-", g), time.Second, 1)[0].Rate
						if r != last+1 && r != 1 {
							t.Errorf("pass %d: rate of a reclaimed key = %v after %v, want %v or 1", p, r, last, last+1)
						}
						last = r
					}
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	bg.Wait()

	for j := range keys {
		key := fmt.Sprint("live-", j)
		for _, size := range []time.Duration{time.Second, time.Minute} {
			if got := rateOf(t, ns, now, key, size); got != workers*passes {
				t.Fatalf("rate of %s/%v = %v, want %d", key, size, got, workers*passes)
			}
		}
	}
	ns.Reclaim(now)
	if got, want := ns.ActiveKeys(), int64(keys); got != want {
		t.Errorf("ActiveKeys after the last Reclaim = %d, want %d", got, want)
	}
	// Allow still sees the counts exactly after all the churn.
	d, err := ns.AllowAt(now, ratelimit.AllowRequest{Key: "live-0", Cost: 1, Limits: []ratelimit.Limit{{Size: time.Minute, Limit: workers * passes}}}, nil)
	if err != nil || d.Allowed {
		t.Errorf("AllowAt at the limit = %+v, %v; want denied", d, err)
	}
}
