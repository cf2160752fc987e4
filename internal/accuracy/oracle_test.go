package accuracy

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
)

// TestJudge: the oracle admits while the sliding rate plus one fits the
// limit, is fed only what the cluster admitted, and counts both kinds of
// disagreement.
func TestJudge(t *testing.T) {
	sec := int64(time.Second)
	base := int64(1_700_000_000) * sec
	calls := []Call{
		// Window [0 s, 1 s), limit 2: two admitted, a third wrongly.
		{At: base + 100, Seq: 0, Allowed: true},
		{At: base + 200, Seq: 1, Allowed: true},
		{At: base + 300, Seq: 2, Allowed: true}, // wrongly admitted
		{At: base + 400, Seq: 3, Allowed: false},
		// At 1.5 s the previous window's 3 weigh 1.5: 1.5 + 1 > 2.
		{At: base + sec + sec/2, Seq: 4, Allowed: false},
		// At 1.9 s: 3 × 0.1 = 0.3, + 1 fits: wrongly refused.
		{At: base + sec + 9*sec/10, Seq: 5, Allowed: false},
		// Another key, alone: admitted rightly; sorted by time first.
		{At: base + 50, Seq: 6, Key: 1, Allowed: true},
	}
	v := Judge(calls, time.Second, 2, time.Unix(0, base), time.Unix(0, base+2*sec))
	if v.Calls != 7 || v.Admitted != 4 || v.WronglyAdmitted != 1 || v.WronglyRefused != 1 {
		t.Errorf("calls %d, admitted %d, wrongly admitted %d, wrongly refused %d; want 7, 4, 1, 1",
			v.Calls, v.Admitted, v.WronglyAdmitted, v.WronglyRefused)
	}
	// Into the last whole call of room: the second at 0.1 µs, and 1.9 s.
	if v.AtLimit != 2 {
		t.Errorf("%d admissions at the limit, want 2", v.AtLimit)
	}
	if v.Worst != 3 || v.Windows != 2 || v.Mean != 1.5 {
		t.Errorf("worst %v, windows %d, mean %v; want 3, 2, 1.5", v.Worst, v.Windows, v.Mean)
	}
	if got, want := v.Wrong(), 2.0/7; got != want {
		t.Errorf("wrong share %v, want %v", got, want)
	}
}

// TestJudgeLimitBuckets: a bucket's oracle is ratelimit's own arithmetic
// on a fresh bucket per key, fed with every admitted call, past the
// capacity too: for each kind at 2 per second, two calls fit at once, a
// third wrongly admitted leaves the bucket in debt, and a call refused
// once a hit of room is back is wrongly refused.
func TestJudgeLimitBuckets(t *testing.T) {
	sec := int64(time.Second)
	base := int64(1_700_000_000) * sec // a whole second: the fixed period starts here
	for _, tc := range []struct {
		limit ratelimit.Limit
		// at is when, after the debt, a hit of room is back (a refused
		// call there is wrong) and just before (right).
		at int64
		// atLimit: the second call, and the one at at when only one hit
		// of room is back.
		atLimit int
	}{
		// 1 refill of 1 every 500 ms: −1 at 0, 0 at 500 ms, 1 at 1 s.
		{ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 2, RefillTime: 500 * time.Millisecond, RefillAmount: 1}}, sec, 2},
		// A drop drained every 500 ms: 3 at 0, 2 at 500 ms, 1 at 1 s.
		{ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 2, Interval: time.Second}}, sec, 2},
		// The count starts again with the next period: 2 of room at 1 s.
		{ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Second, Limit: 2}}, sec, 1},
	} {
		t.Run(tc.limit.Kind.String(), func(t *testing.T) {
			calls := []Call{
				{At: base + 100, Seq: 0, Allowed: true},
				{At: base + 200, Seq: 1, Allowed: true}, // the last call of room
				{At: base + 300, Seq: 2, Allowed: true}, // wrongly admitted
				{At: base + 400, Seq: 3, Allowed: false},
				{At: base + tc.at - 1000, Seq: 4, Allowed: false},
				{At: base + tc.at + 1000, Seq: 5, Allowed: false}, // wrongly refused
				{At: base + 50, Seq: 6, Key: 1, Allowed: true},
			}
			v, err := JudgeLimit(calls, tc.limit, time.Second, time.Unix(0, base), time.Unix(0, base+2*sec))
			if err != nil {
				t.Fatal(err)
			}
			if v.Calls != 7 || v.Admitted != 4 || v.WronglyAdmitted != 1 || v.WronglyRefused != 1 || v.AtLimit != tc.atLimit {
				t.Errorf("calls %d, admitted %d, wrongly admitted %d, wrongly refused %d, at the limit %d; want 7, 4, 1, 1, %d",
					v.Calls, v.Admitted, v.WronglyAdmitted, v.WronglyRefused, v.AtLimit, tc.atLimit)
			}
		})
	}
}
