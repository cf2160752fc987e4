package node

import "testing"

// TestBucketLockOrder: one key's buckets are locked in one strict total
// order, by kind, then a, b and c, so that two calls naming the same
// buckets in any order cannot deadlock; no bucket comes before itself.
func TestBucketLockOrder(t *testing.T) {
	ids := []bucketID{ // ascending
		{kind: 1, a: 1, b: 9, c: 9},
		{kind: 1, a: 2, b: 1, c: 1},
		{kind: 1, a: 2, b: 2, c: 0},
		{kind: 1, a: 2, b: 2, c: 1},
		{kind: 2, a: 0, b: 0, c: 0},
	}
	for i := range ids {
		for j := range ids {
			if got, want := ids[i].less(&ids[j]), i < j; got != want {
				t.Errorf("%+v less %+v = %v, want %v", ids[i], ids[j], got, want)
			}
		}
	}
}
