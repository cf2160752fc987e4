package node

import (
	"testing"
	"time"
)

type stillClock struct{ t time.Time }

func (c stillClock) Now() time.Time { return c.t }

// TestBucketLivesGrow: every life a table gives is greater than the ones
// before, though the clock stands still.
func TestBucketLivesGrow(t *testing.T) {
	b := NewBuckets(BucketsConfig{Name: "api"}, stillClock{time.Unix(1_700_000_000, 0)})
	last := b.newLife()
	for range 3 {
		if l := b.newLife(); l <= last {
			t.Fatalf("life %d after %d", l, last)
		} else {
			last = l
		}
	}
}
