package main

import (
	"math"
	"math/bits"
	"time"
)

// histogram counts durations in log-linear buckets: exact below 2^subBits
// nanoseconds, and above that 2^(subBits-1) buckets per power of two, so a
// reported percentile is within 1/2^(subBits-1) (1.6 %) of the true value
// while the whole histogram stays a fixed few kilobytes however long the
// run. The zero value is empty and ready to use; it is not safe for
// concurrent use (each caller records into its own and they are merged).
type histogram struct {
	counts [numBuckets]uint64
	n      uint64
	sum    time.Duration
	max    time.Duration
}

const (
	subBits    = 7
	subCount   = 1 << subBits            // values below this have a bucket each
	halfCount  = subCount / 2            // buckets per power of two above that
	numBuckets = subCount + 57*halfCount // up to 2^63 ns
)

// bucketOf returns v's bucket: v itself below subCount; above, the top
// subBits bits of v select one of halfCount buckets of v's power of two.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - subBits // >= 1
	return subCount + (shift-1)*halfCount + int(v>>shift) - halfCount
}

// bucketBounds returns the smallest and largest value of bucket i.
func bucketBounds(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i)
	}
	shift := (i-subCount)/halfCount + 1
	top := uint64((i-subCount)%halfCount + halfCount)
	return top << shift, (top+1)<<shift - 1
}

// record adds one duration; negative durations count as 0.
func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

// merge adds o's counts to h.
func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// count returns how many durations were recorded.
func (h *histogram) count() uint64 { return h.n }

// mean returns the mean duration, 0 when empty.
func (h *histogram) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}

// quantile returns the q-quantile (0 < q <= 1) by the nearest-rank method:
// the smallest recorded value with at least ceil(q·n) values at or below it,
// reported as the middle of its bucket (never above the maximum recorded).
// It returns 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	// The epsilon keeps exact ranks exact: 0.99 × 100 is 99.00000000000001
	// in floating point, whose ceiling would be 100.
	rank := uint64(math.Ceil(q*float64(h.n) - 1e-9))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketBounds(i)
			return min(time.Duration(lo+(hi-lo)/2), h.max)
		}
	}
	return h.max
}
