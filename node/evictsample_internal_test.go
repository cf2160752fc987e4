package node

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestEvictSampleBounded: a new key at the cap looks at no more than
// evictSample keys, its own shard's first: when its shard holds
// evictSample keys, none of which may go (each over its limit), the new
// key is refused even though a key that could go is held in another
// shard. The eviction's cost stays bounded rather than scanning the table.
func TestEvictSampleBounded(t *testing.T) {
	at := time.Unix(1_700_000_000-1_700_000_000%3600, 0).Add(time.Second / 2)
	ns, err := NewNamespace(Config{Name: "t", WindowSizes: []time.Duration{time.Second}, MaxKeys: evictSample + 1, OnFull: OnFullEvict}, fakeclock.New(at))
	if err != nil {
		t.Fatal(err)
	}
	shardOf := func(k string) uint64 { return ns.shards.hash(k) & (shardCount - 1) }
	own := shardOf("new")
	var over []string
	free := ""
	for i := 0; len(over) < evictSample || free == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		switch {
		case shardOf(k) == own && len(over) < evictSample:
			over = append(over, k)
		case shardOf(k) != own && free == "":
			free = k
		}
	}
	lim := []ratelimit.Limit{{Size: time.Second, Limit: 1}}
	for _, k := range over {
		for i, want := range []bool{true, false} {
			d, err := ns.AllowAt(at, ratelimit.AllowRequest{Key: k, Cost: 1, Limits: lim}, nil)
			if err != nil || d.Allowed != want {
				t.Fatalf("Allow %d of %s = %v, %v; want allowed %v", i, k, d.Allowed, err, want)
			}
		}
	}
	if _, err := ns.IncrementAt(at, free, 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.IncrementAt(at, "new", 0, 1, nil); !errors.Is(err, ErrKeyLimit) {
		t.Errorf("new key in a shard of %d keys over their limit: %v, want ErrKeyLimit", evictSample, err)
	}
	if n := ns.EvictedKeys(); n != 0 {
		t.Errorf("%d keys evicted, want 0 (%s is beyond the sample)", n, free)
	}
}
