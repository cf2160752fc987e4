package redis

import (
	"bytes"
	"cmp"
	"math"
	"math/rand/v2"
	"testing"
)

// TestLeaseTime: leaseTimes sort as bytes as their times do, across the
// sign and at the ends, and parse back.
func TestLeaseTime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	times := []int64{math.MinInt64, math.MinInt64 + 1, -1 << 53, -1, 0, 1, 1 << 53, 1<<53 + 1, math.MaxInt64 - 1, math.MaxInt64}
	for range 2000 {
		x := int64(r.Uint64())
		times = append(times, x, x+1, x>>r.IntN(64))
	}
	for i, a := range times {
		ea := appendLeaseTime(nil, a)
		if len(ea) != leaseTimeLen {
			t.Fatalf("leaseTime(%d) = %q: %d bytes, want %d", a, ea, len(ea), leaseTimeLen)
		}
		if got, err := parseLeaseTime(string(ea)); err != nil || got != a {
			t.Fatalf("parseLeaseTime(%q) = %d, %v; want %d", ea, got, err, a)
		}
		b := times[(i*7+3)%len(times)]
		if got, want := bytes.Compare(ea, appendLeaseTime(nil, b)), cmp.Compare(a, b); got != want {
			t.Fatalf("leaseTimes of %d and %d compare %d, want %d", a, b, got, want)
		}
	}
	// 'g', the bound past now = MaxInt64, is past every leaseTime.
	if e := appendLeaseTime(nil, math.MaxInt64); bytes.Compare(e, []byte("g")) >= 0 {
		t.Errorf("leaseTime(MaxInt64) = %q, not below \"g\"", e)
	}
}

func TestUnixMilliCeilNs(t *testing.T) {
	for _, c := range [][2]int64{{0, 0}, {1, 1}, {999_999, 1}, {1_000_000, 1}, {1_000_001, 2}, {-1, 0}, {-1_000_000, -1}, {math.MaxInt64, math.MaxInt64/1_000_000 + 1}} {
		if got := unixMilliCeilNs(c[0]); got != c[1] {
			t.Errorf("unixMilliCeilNs(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}
