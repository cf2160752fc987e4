package node

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestBucketHashChain: buckets whose hashes are equal share the hash's
// chain, where each is found by its identity, and reclaim unlinks the idle
// ones wherever they stand in it, counting them out of the caps.
func TestBucketHashChain(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	b := newBuckets(bucketsConfig{Name: "chain"}, stillClock{t0})
	ids := []bucketID{ // fixed buckets of one key; the minute's end first
		{Kind: ratelimit.FixedLimit, A: int64(time.Hour), B: 10 * ratelimit.Micro, Key: "k"},
		{Kind: ratelimit.FixedLimit, A: int64(time.Minute), B: 10 * ratelimit.Micro, Key: "k"},
		{Kind: ratelimit.FixedLimit, A: int64(time.Minute), B: 20 * ratelimit.Micro, Key: "k"},
		{Kind: ratelimit.FixedLimit, A: int64(time.Hour), B: 20 * ratelimit.Micro, Key: "k"},
		{Kind: ratelimit.FixedLimit, A: int64(time.Minute), B: 30 * ratelimit.Micro, Key: "k"},
	}
	const h = 42 // one hash for all: a collision
	sh := &b.shards[0]
	for i := range ids {
		id := &ids[i]
		err := b.insert(sh, h, id, func(s ratelimit.BucketState, found bool) ratelimit.BucketState {
			if found {
				t.Fatalf("bucket %d found before its insert", i)
			}
			bucketStep(id, &s, false, t0.UnixNano(), ratelimit.Micro, false)
			return s
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	entries := make([]*bucketEntry, len(ids))
	for i := range ids {
		if entries[i] = sh.find(h, &ids[i]); entries[i] == nil || entries[i].id != ids[i] {
			t.Fatalf("bucket %d: found %+v", i, entries[i])
		}
	}
	if len(sh.m) != 1 || b.n.Load() != 5 || b.bytes.Load() != 5*bucketCost(1) {
		t.Fatalf("%d hashes, %d buckets, %d bytes; want 1, 5, %d", len(sh.m), b.n.Load(), b.bytes.Load(), 5*bucketCost(1))
	}

	// The minute's buckets go: the chain's head (the last inserted) and
	// two in its middle.
	if n := b.reclaim(t0.Add(90 * time.Second)); n != 3 {
		t.Fatalf("reclaim removed %d buckets, want 3", n)
	}
	for i, e := range entries {
		idle := ids[i].A == int64(time.Minute)
		if got := sh.find(h, &ids[i]); e.gone != idle || (got == e) == idle {
			t.Errorf("bucket %d: gone %v, found %p; want gone %v and %p found", i, e.gone, got, idle, e)
		}
	}
	if b.n.Load() != 2 || b.bytes.Load() != 2*bucketCost(1) {
		t.Errorf("%d buckets, %d bytes held; want 2, %d", b.n.Load(), b.bytes.Load(), 2*bucketCost(1))
	}

	// The rest go, and the hash with them.
	if n := b.reclaim(t0.Add(2 * time.Hour)); n != 2 || len(sh.m) != 0 || b.n.Load() != 0 || b.bytes.Load() != 0 {
		t.Errorf("reclaim removed %d, leaving %d hashes, %d buckets, %d bytes; want 2, 0, 0, 0", n, len(sh.m), b.n.Load(), b.bytes.Load())
	}
}
