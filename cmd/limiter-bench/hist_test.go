package main

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// exactQuantile is the nearest-rank quantile of sorted values.
func exactQuantile(sorted []time.Duration, q float64) time.Duration {
	rank := int(math.Ceil(q*float64(len(sorted)) - 1e-9))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

func TestBucketsCoverEveryValueOnce(t *testing.T) {
	// Every bucket's bounds map back to it, and consecutive buckets leave
	// no gap: [lo(i), hi(i)] then lo(i+1) = hi(i) + 1.
	prevHi := int64(-1)
	for i := range numBuckets {
		lo, hi := bucketBounds(i)
		if int64(lo) != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, want %d", i, lo, prevHi+1)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d = [%d, %d]: bucketOf gives %d and %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		prevHi = int64(hi)
		if hi >= math.MaxInt64 {
			return
		}
	}
	t.Fatalf("buckets end at %d, before the largest duration", prevHi)
}

func TestQuantileExactForSmallValues(t *testing.T) {
	// Below subCount nanoseconds every value has its own bucket.
	var h histogram
	for v := 1; v <= 100; v++ {
		h.record(time.Duration(v))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.9, 90}, {0.99, 99}, {0.999, 100}, {1, 100}, {0.001, 1}} {
		if got := h.quantile(c.q); got != c.want {
			t.Errorf("quantile(%v) = %d, want %d", c.q, got, c.want)
		}
	}
}

func TestQuantileWithinRelativeError(t *testing.T) {
	// Log-normal latencies around a millisecond, merged from several
	// histograms as the callers' are: every quantile is within one bucket's
	// width (1/64) of the exact nearest-rank value.
	rnd := rand.New(rand.NewPCG(1, 2))
	var parts [4]histogram
	var all []time.Duration
	for i := range 100_000 {
		d := time.Duration(math.Exp(rnd.NormFloat64()*1.5) * float64(time.Millisecond))
		parts[i%len(parts)].record(d)
		all = append(all, d)
	}
	var h histogram
	for i := range parts {
		h.merge(&parts[i])
	}
	slices.Sort(all)
	if h.count() != uint64(len(all)) {
		t.Fatalf("count = %d, want %d", h.count(), len(all))
	}
	if h.max != all[len(all)-1] {
		t.Errorf("max = %s, want %s", h.max, all[len(all)-1])
	}
	for _, q := range []float64{0.001, 0.5, 0.9, 0.99, 0.999, 1} {
		got, want := h.quantile(q), exactQuantile(all, q)
		if rel := math.Abs(float64(got-want)) / float64(want); rel > 1.0/halfCount {
			t.Errorf("quantile(%v) = %s, want %s within 1/%d (off by %.4f)", q, got, want, halfCount, rel)
		}
	}
}

func TestQuantileEmptyAndNegative(t *testing.T) {
	var h histogram
	if got := h.quantile(0.99); got != 0 {
		t.Errorf("empty quantile = %s, want 0", got)
	}
	if got := h.mean(); got != 0 {
		t.Errorf("empty mean = %s, want 0", got)
	}
	h.record(-time.Second) // a clock step backwards: counted as 0
	h.record(3 * time.Second)
	if got := h.quantile(0.5); got != 0 {
		t.Errorf("quantile(0.5) = %s, want 0", got)
	}
	if got, want := h.mean(), 1500*time.Millisecond; got != want {
		t.Errorf("mean = %s, want %s", got, want)
	}
}
