package accuracy

import (
	"math"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestEngineLimitSameRate: each kind's limit of a run holds L per window
// alike: L at once from a new bucket (or window), then no more, and L
// more a window later.
func TestEngineLimitSameRate(t *testing.T) {
	const w = 10 * time.Second
	t0 := int64(1_700_000_000) * int64(time.Second) // a whole window: a fixed period starts
	for _, l := range []float64{2, 10, 100} {
		for _, k := range []ratelimit.LimitKind{ratelimit.WindowLimit, ratelimit.TokenLimit, ratelimit.LeakyLimit, ratelimit.FixedLimit} {
			r := Run{Window: w, Limit: l, Kind: k}
			calls := make([]Call, 0, 4*int(l))
			for i := range 2 * int(l) { // 2L at once: L admitted
				calls = append(calls, Call{At: t0, Seq: int64(len(calls)), Allowed: i < int(l)})
			}
			// A window on, L more for every bucket; a sliding window
			// still weighs the previous window's L fully at its start.
			at := t0 + int64(w)
			if k == ratelimit.WindowLimit {
				at += int64(w) // two windows on
			}
			for i := range 2 * int(l) {
				calls = append(calls, Call{At: at, Seq: int64(len(calls)), Allowed: i < int(l)})
			}
			v, err := JudgeLimit(calls, r.EngineLimit(), w, time.Unix(0, t0), time.Unix(0, at+1))
			if err != nil {
				t.Fatalf("%s, L %v: %v", KindName(k), l, err)
			}
			if v.WronglyAdmitted != 0 || v.WronglyRefused != 0 || v.AtLimit != 2 {
				t.Errorf("%s, L %v: wrongly admitted %d, wrongly refused %d, at the limit %d; want 0, 0, 2",
					KindName(k), l, v.WronglyAdmitted, v.WronglyRefused, v.AtLimit)
			}
		}
	}
}

// TestRateForTop: the rate chosen offers the most called key the load
// asked, and the keys over a load are those Zipf's law puts there.
func TestRateForTop(t *testing.T) {
	r := Run{Window: time.Second, Limit: 10, Keys: 10_000, ZipfS: 1.1}
	r.Rate = r.RateForTop(10)
	if got := r.Rate * r.zipfShare(1) / r.Limit; math.Abs(got-10) > 1e-9 {
		t.Errorf("top key at %v× its limit, want 10×", got)
	}
	// Rank k runs at 10·k^-1.1: ≥ 2× up to k = 4 (5^1.1 > 5).
	if n := r.KeysOver(2); n != 4 {
		t.Errorf("%d keys at 2× or more, want 4", n)
	}
	if n := r.KeysOver(10); n != 1 {
		t.Errorf("%d keys at 10× or more, want 1", n)
	}
}

// TestMisses: each target is checked against its own measure.
func TestMisses(t *testing.T) {
	res := func(calls, wa, wr, atLimit int, escalated int64) Result {
		return Result{Verdict: Verdict{Calls: calls, WronglyAdmitted: wa, WronglyRefused: wr, AtLimit: atLimit}, Escalated: escalated}
	}
	floor := res(100_000, 0, 100, 5000, 100_000) // 0.1 % wrongly refused
	for _, tc := range []struct {
		name string
		res  Result
		want int
	}{
		{"met", res(100_000, 10, 200, 5000, 5900), 0},
		{"admits", res(100_000, 11, 0, 5000, 5000), 1},
		{"refuses", res(100_000, 0, 201, 5000, 5000), 1},
		{"local", res(100_000, 0, 0, 5000, 6001), 1},
		{"all", res(100_000, 11, 201, 5000, 6001), 3},
	} {
		if m := DefaultTargets.Misses(tc.res, floor); len(m) != tc.want {
			t.Errorf("%s: missed %q, want %d", tc.name, m, tc.want)
		}
	}
	// A floor that refused nothing wrongly leaves 0.01 % of slack.
	if m := DefaultTargets.Misses(res(100_000, 0, 10, 0, 0), res(100_000, 0, 0, 0, 0)); len(m) != 0 {
		t.Errorf("missed %q, want none", m)
	}
}

// TestBucketsRefillAtTheRate: a token bucket refills, and a leaky bucket
// drains, one hit every W/L: half a window after a burst of L, L/2 fit.
func TestBucketsRefillAtTheRate(t *testing.T) {
	const w = time.Second
	t0 := int64(1_700_000_000) * int64(time.Second)
	for _, k := range []ratelimit.LimitKind{ratelimit.TokenLimit, ratelimit.LeakyLimit} {
		r := Run{Window: w, Limit: 10, Kind: k}
		var calls []Call
		for i := range 10 {
			calls = append(calls, Call{At: t0, Seq: int64(i), Allowed: true})
		}
		for i := range 10 {
			calls = append(calls, Call{At: t0 + int64(w/2), Seq: int64(10 + i), Allowed: i < 5})
		}
		v, err := JudgeLimit(calls, r.EngineLimit(), w, time.Unix(0, t0), time.Unix(0, t0+int64(w)))
		if err != nil {
			t.Fatal(err)
		}
		if v.WronglyAdmitted != 0 || v.WronglyRefused != 0 {
			t.Errorf("%s: wrongly admitted %d, wrongly refused %d; want 5 of 10 to fit after W/2", KindName(k), v.WronglyAdmitted, v.WronglyRefused)
		}
	}
}
