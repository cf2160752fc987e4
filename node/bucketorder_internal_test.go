package node

import "testing"

// TestBucketLockOrder: one key's buckets are locked in one strict total
// order, by kind, then a, b and c, so that two calls naming the same
// buckets in any order cannot deadlock; no bucket comes before itself.
func TestBucketLockOrder(t *testing.T) {
	ids := []bucketID{ // ascending
		{Kind: 1, A: 1, B: 9, C: 9},
		{Kind: 1, A: 2, B: 1, C: 1},
		{Kind: 1, A: 2, B: 2, C: 0},
		{Kind: 1, A: 2, B: 2, C: 1},
		{Kind: 2, A: 0, B: 0, C: 0},
	}
	for i := range ids {
		for j := range ids {
			if got, want := bucketLess(&ids[i], &ids[j]), i < j; got != want {
				t.Errorf("%+v less %+v = %v, want %v", ids[i], ids[j], got, want)
			}
		}
	}
}
