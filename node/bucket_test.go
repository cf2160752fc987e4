package node_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	gosync "sync"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// bucketEpoch is a whole hour, aligned to every period in these tests.
var bucketEpoch = time.Unix(1_700_000_000-1_700_000_000%3600, 0)

func bt(d time.Duration) time.Time { return bucketEpoch.Add(d) }

func newBuckets(maxKeys int) *node.Buckets {
	return node.NewBuckets(node.BucketsConfig{Name: "test", MaxKeys: maxKeys}, &fakeClock{t: bucketEpoch})
}

// bucketWant is the fields of a status that a test names; a negative
// duration or NaN means "not checked".
type bucketWant struct {
	allowed, never    bool
	before, remaining float64
	reset, retry      time.Duration
}

func checkBucket(t *testing.T, what string, got node.BucketStatus, err error, w bucketWant) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if got.Allowed != w.allowed || got.Never != w.never ||
		(!math.IsNaN(w.before) && got.Before != w.before) ||
		(!math.IsNaN(w.remaining) && got.Remaining != w.remaining) ||
		(w.reset >= 0 && got.ResetAfter != w.reset) ||
		(w.retry >= 0 && got.RetryAfter != w.retry) {
		t.Errorf("%s = %+v, want %+v", what, got, w)
	}
}

// wantBucketFieldError checks that err is a *ratelimit.FieldError for field
// wrapping sentinel.
func wantBucketFieldError(t *testing.T, what string, err error, field string, sentinel error) {
	t.Helper()
	var fe *ratelimit.FieldError
	if !errors.As(err, &fe) || fe.Field != field || !errors.Is(err, sentinel) {
		t.Errorf("%s: err = %v, want a *ratelimit.FieldError on %q wrapping %v", what, err, field, sentinel)
	}
}

// Smyte's transcript: RL.REDUCE twoPerMin 2 60, three times, answers 2, 1, 0.
func TestTokenBucketSmyteTranscript(t *testing.T) {
	b := newBuckets(0)
	p := ratelimit.TokenBucket{Max: 2, RefillTime: time.Minute}
	for i, w := range []bucketWant{
		{allowed: true, before: 2, remaining: 1, reset: time.Minute, retry: 0},
		{allowed: true, before: 1, remaining: 0, reset: time.Minute - time.Second, retry: 0},
		{allowed: false, before: 0, remaining: 0, reset: time.Minute - 2*time.Second, retry: time.Minute - 2*time.Second},
	} {
		st, err := b.TakeTokenAt(bt(time.Duration(i)*time.Second), "twoPerMin", p, 1, false)
		checkBucket(t, "take "+string(rune('1'+i)), st, err, w)
	}
	// A minute after the first call one refill of Max (REFILL defaults to
	// Max) fills it again.
	st, err := b.TakeTokenAt(bt(time.Minute), "twoPerMin", p, 1, false)
	checkBucket(t, "take after a minute", st, err, bucketWant{allowed: true, before: 2, remaining: 1, reset: time.Minute, retry: 0})
}

// REFILL: refills are stepwise, capped at Max, and the refill mark moves
// by whole refill times, not to the call's time.
func TestTokenBucketRefill(t *testing.T) {
	b := newBuckets(0)
	p := ratelimit.TokenBucket{Max: 10, RefillTime: time.Minute, RefillAmount: 3}
	take := func(d time.Duration, n float64) (node.BucketStatus, error) {
		return b.TakeTokenAt(bt(d), "k", p, n, false)
	}
	st, err := take(0, 10)
	checkBucket(t, "take 10", st, err, bucketWant{allowed: true, before: 10, remaining: 0, reset: time.Minute, retry: 0})
	st, err = take(59*time.Second, 0)
	checkBucket(t, "read at 59s", st, err, bucketWant{allowed: true, before: 0, remaining: 0, reset: time.Second, retry: 0})
	st, err = take(90*time.Second, 1) // one refill (mark 0 → 60 s): 3
	checkBucket(t, "take at 90s", st, err, bucketWant{allowed: true, before: 3, remaining: 2, reset: 30 * time.Second, retry: 0})
	st, err = take(120*time.Second, 0) // mark 60 s → 120 s, though the last call was 30 s ago
	checkBucket(t, "read at 120s", st, err, bucketWant{allowed: true, before: 5, remaining: 5, reset: time.Minute, retry: 0})
	st, err = take(10*time.Minute, 0) // capped at Max
	checkBucket(t, "read at 10m", st, err, bucketWant{allowed: true, before: 10, remaining: 10, reset: 0, retry: 0})
}

// TestTokenBucketRefillStopsAtMax: a refill that would pass Max fills the
// bucket to Max exactly, however few refills it takes to get there.
func TestTokenBucketRefillStopsAtMax(t *testing.T) {
	tests := []struct {
		name    string
		p       ratelimit.TokenBucket
		take    float64
		refills int
		want    float64 // tokens after the refills
	}{
		{"one refill short of max", ratelimit.TokenBucket{Max: 10, RefillTime: time.Minute, RefillAmount: 3}, 5, 1, 8},
		{"two refills pass max by 1", ratelimit.TokenBucket{Max: 10, RefillTime: time.Minute, RefillAmount: 3}, 5, 2, 10},
		{"two refills pass max by 2", ratelimit.TokenBucket{Max: 10, RefillTime: time.Minute, RefillAmount: 3}, 4, 2, 10},
		{"two refills reach max", ratelimit.TokenBucket{Max: 10, RefillTime: time.Minute, RefillAmount: 3}, 6, 2, 10},
		{"three refills pass max", ratelimit.TokenBucket{Max: 10, RefillTime: time.Minute, RefillAmount: 3}, 7, 3, 10},
		{"a refill of max", ratelimit.TokenBucket{Max: 2, RefillTime: time.Minute}, 1, 1, 2},
		{"a fractional refill", ratelimit.TokenBucket{Max: 1, RefillTime: time.Second, RefillAmount: 0.4}, 0.5, 2, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBuckets(0)
			if st, err := b.TakeTokenAt(bt(0), "k", tt.p, tt.take, false); err != nil || !st.Allowed {
				t.Fatalf("take %g of %g: %+v, %v; want admitted", tt.take, tt.p.Max, st, err)
			}
			at := bt(time.Duration(tt.refills) * tt.p.RefillTime)
			st, err := b.TokenAt(at, "k", tt.p)
			if err != nil {
				t.Fatal(err)
			}
			if st.Before != tt.want || st.Remaining != tt.want {
				t.Errorf("tokens after %d refills = %g (remaining %g), want %g", tt.refills, st.Before, st.Remaining, tt.want)
			}
		})
	}
}

// TAKE: a take of n is admitted when at least n tokens are left; a refused
// take leaves max(tokens − n, 0), which is 0 (Smyte's code writes exactly
// that); a take of 0 only reads; a take above Max can never be admitted.
func TestTokenBucketTake(t *testing.T) {
	b := newBuckets(0)
	p := ratelimit.TokenBucket{Max: 5, RefillTime: time.Minute, RefillAmount: 2}
	st, err := b.TakeTokenAt(bt(0), "k", p, 3, false)
	checkBucket(t, "take 3 of 5", st, err, bucketWant{allowed: true, before: 5, remaining: 2, reset: time.Minute, retry: 0})
	st, err = b.TakeTokenAt(bt(time.Second), "k", p, 3, false)
	// Refused: emptied; two refills (4 tokens >= 3) come at 120 s.
	checkBucket(t, "take 3 of 2", st, err, bucketWant{allowed: false, before: 2, remaining: 0, reset: 59 * time.Second, retry: 119 * time.Second})
	st, err = b.TakeTokenAt(bt(2*time.Second), "k", p, 0, false)
	checkBucket(t, "take 0", st, err, bucketWant{allowed: true, before: 0, remaining: 0, reset: 58 * time.Second, retry: 0})
	st, err = b.TakeTokenAt(bt(2*time.Minute), "k", p, 2.5, false)
	checkBucket(t, "take 2.5 of 4", st, err, bucketWant{allowed: true, before: 4, remaining: 1.5, reset: time.Minute, retry: 0})
	st, err = b.TakeTokenAt(bt(2*time.Minute), "k", p, 6, false)
	checkBucket(t, "take 6 of max 5", st, err, bucketWant{allowed: false, never: true, before: 1.5, remaining: 0, reset: time.Minute, retry: 0})
}

// STRICT: a take that leaves the bucket empty (admitted or not) sets the
// refill mark to the call's time, so a caller that keeps trying stays
// refused until it pauses a whole refill time. Reads never move it.
func TestTokenBucketStrict(t *testing.T) {
	p := ratelimit.TokenBucket{Max: 2, RefillTime: time.Minute}
	for _, strict := range []bool{false, true} {
		b := newBuckets(0)
		take := func(d time.Duration) (node.BucketStatus, error) {
			return b.TakeTokenAt(bt(d), "k", p, 1, strict)
		}
		take(0)
		st, err := take(10 * time.Second) // empties the bucket
		if !strict {
			checkBucket(t, "lenient second take", st, err, bucketWant{allowed: true, before: 1, remaining: 0, reset: 50 * time.Second, retry: 0})
			st, err = take(time.Minute)
			checkBucket(t, "lenient take at 60s", st, err, bucketWant{allowed: true, before: 2, remaining: 1, reset: time.Minute, retry: 0})
			continue
		}
		checkBucket(t, "strict second take", st, err, bucketWant{allowed: true, before: 1, remaining: 0, reset: time.Minute, retry: 0})
		st, err = b.TokenAt(bt(50*time.Second), "k", p)
		checkBucket(t, "strict read at 50s", st, err, bucketWant{allowed: true, before: 0, remaining: 0, reset: 20 * time.Second, retry: 0})
		st, err = take(time.Minute) // mark 10 s: no refill yet; refused, mark → 60 s
		checkBucket(t, "strict take at 60s", st, err, bucketWant{allowed: false, before: 0, remaining: 0, reset: time.Minute, retry: time.Minute})
		st, err = take(time.Minute + 59*time.Second)
		checkBucket(t, "strict take at 119s", st, err, bucketWant{allowed: false, before: 0, remaining: 0, reset: time.Minute, retry: time.Minute})
		// Full again at 179 s, its mark on the refill grid (120 s): the
		// next refill is at 180 s.
		st, err = take(time.Minute + 59*time.Second + time.Minute)
		checkBucket(t, "strict take after a quiet minute", st, err, bucketWant{allowed: true, before: 2, remaining: 1, reset: time.Second, retry: 0})
	}
}

// AT: the client's time drives the bucket, however far from the clock
// (historical data). A call older than the bucket's last refill mark
// counts as made at the mark: time never moves backwards, not even the
// mark a strict take sets.
func TestTokenBucketAt(t *testing.T) {
	b := newBuckets(0) // its clock reads bucketEpoch
	p := ratelimit.TokenBucket{Max: 2, RefillTime: time.Minute, RefillAmount: 1}
	hist := time.Date(2016, 10, 12, 0, 0, 0, 0, time.UTC)
	st, err := b.TakeTokenAt(hist, "k", p, 2, false)
	checkBucket(t, "take 2 in 2016", st, err, bucketWant{allowed: true, before: 2, remaining: 0, reset: time.Minute, retry: 0})
	st, err = b.TakeTokenAt(hist.Add(2*time.Minute+5*time.Second), "k", p, 1, false)
	checkBucket(t, "take at +2m5s", st, err, bucketWant{allowed: true, before: 2, remaining: 1, reset: 55 * time.Second, retry: 0})
	// Older than the mark (+2m): counted at the mark, no refill.
	st, err = b.TakeTokenAt(hist.Add(30*time.Second), "k", p, 1, true)
	checkBucket(t, "strict take at +30s", st, err, bucketWant{allowed: true, before: 1, remaining: 0, reset: time.Minute, retry: 0})
	// The strict take set the mark to +2m (the mark), not back to +30 s.
	st, err = b.TokenAt(hist.Add(3*time.Minute), "k", p)
	checkBucket(t, "read at +3m", st, err, bucketWant{allowed: true, before: 1, remaining: 1, reset: time.Minute, retry: 0})
	// The clock's time is another, later, time: everything has refilled.
	st, err = b.Token("k", p)
	checkBucket(t, "read at the clock", st, err, bucketWant{allowed: true, before: 2, remaining: 2, reset: 0, retry: 0})
}

// Sidekiq's example: leaky("ip", 10, 10 s) drains a drop a second; ten
// calls within a second pass, the eleventh is refused with next_drip in
// (0, 1 s], and a call after that drip passes.
func TestLeakyBucketSidekiq(t *testing.T) {
	b := newBuckets(0)
	p := ratelimit.LeakyBucket{Size: 10, Interval: 10 * time.Second}
	for i := range 10 {
		d := time.Duration(i) * 90 * time.Millisecond
		st, err := b.TakeLeakyAt(bt(d), "ip-1", p, 1)
		checkBucket(t, "call", st, err, bucketWant{allowed: true, before: float64(i), remaining: float64(9 - i), reset: time.Second - d, retry: 0})
	}
	st, err := b.TakeLeakyAt(bt(950*time.Millisecond), "ip-1", p, 1)
	checkBucket(t, "11th call", st, err, bucketWant{allowed: false, before: 10, remaining: 0, reset: 50 * time.Millisecond, retry: 50 * time.Millisecond})
	if st.ResetAfter <= 0 || st.ResetAfter > time.Second {
		t.Errorf("next_drip = %v, want in (0, 1s]", st.ResetAfter)
	}
	st, err = b.TakeLeakyAt(bt(950*time.Millisecond+st.ResetAfter), "ip-1", p, 1)
	checkBucket(t, "call after the drip", st, err, bucketWant{allowed: true, before: 9, remaining: 0, reset: time.Second, retry: 0})
	// Two drops fit only after two drips: 2 s from the mark at 1 s.
	st, err = b.TakeLeakyAt(bt(1500*time.Millisecond), "ip-1", p, 2)
	checkBucket(t, "take 2 when full", st, err, bucketWant{allowed: false, before: 10, remaining: 0, reset: 500 * time.Millisecond, retry: 1500 * time.Millisecond})
	st, err = b.TakeLeakyAt(bt(time.Second), "ip-1", p, 11)
	checkBucket(t, "take 11 of size 10", st, err, bucketWant{allowed: false, never: true, before: 10, remaining: 0, reset: time.Second, retry: 0})
}

// Drops never go below 0 (Sidekiq's script can), and an emptied bucket's
// drip clock starts again with its next drop, on the drip grid (whole
// drips since the epoch): its first drip comes within a drip.
func TestLeakyBucketClampsAtZero(t *testing.T) {
	b := newBuckets(0)
	p := ratelimit.LeakyBucket{Size: 4, Interval: 4 * time.Second} // a drop a second
	b.TakeLeakyAt(bt(0), "k", p, 1.5)
	st, err := b.LeakyAt(bt(time.Second), "k", p) // one drip drains 1 of 1.5
	checkBucket(t, "read at 1s", st, err, bucketWant{allowed: true, before: 0.5, remaining: 3.5, reset: time.Second, retry: 0})
	st, err = b.LeakyAt(bt(time.Hour), "k", p)
	checkBucket(t, "read after an hour", st, err, bucketWant{allowed: true, before: 0, remaining: 4, reset: 0, retry: 0})
	st, err = b.TakeLeakyAt(bt(time.Hour+300*time.Millisecond), "k", p, 4)
	checkBucket(t, "fill after an hour", st, err, bucketWant{allowed: true, before: 0, remaining: 0, reset: 700 * time.Millisecond, retry: 0})
}

// wait_timeout: a refused call whose wait fits waits on the clock, without
// a lock, and tries once more; one whose wait does not fit returns at once.
func TestLeakyBucketWait(t *testing.T) {
	clock := &fakeClock{t: bucketEpoch}
	b := node.NewBuckets(node.BucketsConfig{Name: "test"}, clock)
	p := ratelimit.LeakyBucket{Size: 2, Interval: 2 * time.Second}
	ctx := context.Background()
	for range 2 {
		b.TakeLeaky("k", p, 1)
	}
	clock.Advance(300 * time.Millisecond)
	st, err := b.TakeLeakyWait(ctx, "k", p, 1, 500*time.Millisecond)
	checkBucket(t, "wait too short", st, err, bucketWant{allowed: false, before: 2, remaining: 0, reset: 700 * time.Millisecond, retry: 700 * time.Millisecond})
	if len(clock.slept) != 0 {
		t.Errorf("slept %v, want no sleep", clock.slept)
	}
	st, err = b.TakeLeakyWait(ctx, "k", p, 1, time.Second)
	checkBucket(t, "wait long enough", st, err, bucketWant{allowed: true, before: 1, remaining: 0, reset: time.Second, retry: 0})
	if len(clock.slept) != 1 || clock.slept[0] != 700*time.Millisecond {
		t.Errorf("slept %v, want [700ms]", clock.slept)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.TakeLeakyWait(cctx, "k", p, 1, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("wait with a cancelled context: err = %v, want context.Canceled", err)
	}
	// Without a Sleeper clock the wait uses a timer.
	rb := node.NewBuckets(node.BucketsConfig{Name: "real"}, nil)
	rp := ratelimit.LeakyBucket{Size: 1, Interval: 20 * time.Millisecond}
	rb.TakeLeaky("k", rp, 1)
	st, err = rb.TakeLeakyWait(ctx, "k", rp, 1, time.Second)
	if err != nil || !st.Allowed {
		t.Errorf("wait on the system clock = %+v, %v; want admitted", st, err)
	}
}

// Fixed bucket: a count per clock-aligned period.
func TestFixedBucket(t *testing.T) {
	b := newBuckets(0)
	p := ratelimit.FixedBucket{Period: 10 * time.Second, Limit: 3}
	st, err := b.TakeFixedAt(bt(4*time.Second), "k", p, 2)
	checkBucket(t, "take 2", st, err, bucketWant{allowed: true, before: 0, remaining: 1, reset: 6 * time.Second, retry: 0})
	st, err = b.TakeFixedAt(bt(5*time.Second), "k", p, 2)
	checkBucket(t, "take 2 of 1", st, err, bucketWant{allowed: false, before: 2, remaining: 1, reset: 5 * time.Second, retry: 5 * time.Second})
	st, err = b.TakeFixedAt(bt(9*time.Second), "k", p, 1)
	checkBucket(t, "take 1 of 1", st, err, bucketWant{allowed: true, before: 2, remaining: 0, reset: time.Second, retry: 0})
	st, err = b.TakeFixedAt(bt(10*time.Second), "k", p, 3)
	checkBucket(t, "next period", st, err, bucketWant{allowed: true, before: 0, remaining: 0, reset: 10 * time.Second, retry: 0})
	// An older period counts in the bucket's own.
	st, err = b.TakeFixedAt(bt(3*time.Second), "k", p, 1)
	checkBucket(t, "older period", st, err, bucketWant{allowed: false, before: 3, remaining: 0, reset: 10 * time.Second, retry: 10 * time.Second})
	st, err = b.TakeFixedAt(bt(12*time.Second), "k", p, 4)
	checkBucket(t, "take 4 of limit 3", st, err, bucketWant{allowed: false, never: true, before: 3, remaining: 0, reset: 8 * time.Second, retry: 0})
	st, err = b.FixedAt(bt(25*time.Second), "k", p)
	checkBucket(t, "read", st, err, bucketWant{allowed: true, before: 0, remaining: 3, reset: 5 * time.Second, retry: 0})
}

// The same key with other parameters, or of another kind, is another
// bucket.
func TestBucketIdentity(t *testing.T) {
	b := newBuckets(0)
	now := bt(0)
	b.TakeTokenAt(now, "k", ratelimit.TokenBucket{Max: 2, RefillTime: time.Minute}, 2, false)
	for _, p := range []ratelimit.TokenBucket{
		{Max: 3, RefillTime: time.Minute},
		{Max: 2, RefillTime: time.Hour},
		{Max: 2, RefillTime: time.Minute, RefillAmount: 1},
	} {
		st, err := b.TakeTokenAt(now, "k", p, 1, false)
		checkBucket(t, "token bucket with other parameters", st, err, bucketWant{allowed: true, before: p.Max, remaining: p.Max - 1, reset: -1, retry: 0})
	}
	// RefillAmount 0 is Max: the same bucket as RefillAmount = Max.
	st, err := b.TakeTokenAt(now, "k", ratelimit.TokenBucket{Max: 2, RefillTime: time.Minute, RefillAmount: 2}, 1, false)
	checkBucket(t, "refill amount = max", st, err, bucketWant{allowed: false, before: 0, remaining: 0, reset: -1, retry: -1})
	b.TakeLeakyAt(now, "k", ratelimit.LeakyBucket{Size: 2, Interval: time.Minute}, 2)
	st, err = b.TakeLeakyAt(now, "k", ratelimit.LeakyBucket{Size: 2, Interval: time.Hour}, 2)
	checkBucket(t, "leaky with another interval", st, err, bucketWant{allowed: true, before: 0, remaining: 0, reset: -1, retry: 0})
	b.TakeFixedAt(now, "k", ratelimit.FixedBucket{Period: time.Minute, Limit: 2}, 2)
	st, err = b.TakeFixedAt(now, "k", ratelimit.FixedBucket{Period: time.Minute, Limit: 3}, 2)
	checkBucket(t, "fixed with another limit", st, err, bucketWant{allowed: true, before: 0, remaining: 1, reset: -1, retry: 0})
	if got := b.Len(); got != 8 {
		t.Errorf("Len() = %d, want 8", got)
	}
}

func TestBucketInvalidParameters(t *testing.T) {
	b := newBuckets(0)
	now := bt(0)
	tok := ratelimit.TokenBucket{Max: 2, RefillTime: time.Minute}
	leaky := ratelimit.LeakyBucket{Size: 10, Interval: 10 * time.Second}
	fixed := ratelimit.FixedBucket{Period: time.Minute, Limit: 5}
	withTok := func(f func(*ratelimit.TokenBucket)) ratelimit.TokenBucket { p := tok; f(&p); return p }
	withLeaky := func(f func(*ratelimit.LeakyBucket)) ratelimit.LeakyBucket { p := leaky; f(&p); return p }
	withFixed := func(f func(*ratelimit.FixedBucket)) ratelimit.FixedBucket { p := fixed; f(&p); return p }
	tokErr := func(p ratelimit.TokenBucket, take float64) error {
		_, err := b.TakeTokenAt(now, "k", p, take, false)
		return err
	}
	leakyErr := func(p ratelimit.LeakyBucket, take float64) error {
		_, err := b.TakeLeakyAt(now, "k", p, take)
		return err
	}
	fixedErr := func(p ratelimit.FixedBucket, take float64) error {
		_, err := b.TakeFixedAt(now, "k", p, take)
		return err
	}
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		name  string
		err   error
		field string
		want  error
	}{
		{"max 0", tokErr(withTok(func(p *ratelimit.TokenBucket) { p.Max = 0 }), 1), "max", ratelimit.ErrInvalidLimit},
		{"max -1", tokErr(withTok(func(p *ratelimit.TokenBucket) { p.Max = -1 }), 1), "max", ratelimit.ErrInvalidLimit},
		{"max NaN", tokErr(withTok(func(p *ratelimit.TokenBucket) { p.Max = nan }), 1), "max", ratelimit.ErrInvalidLimit},
		{"max Inf", tokErr(withTok(func(p *ratelimit.TokenBucket) { p.Max = inf }), 1), "max", ratelimit.ErrInvalidLimit},
		{"max 2e9", tokErr(withTok(func(p *ratelimit.TokenBucket) { p.Max = 2e9 }), 1), "max", ratelimit.ErrInvalidLimit},
		{"max below a micro", tokErr(withTok(func(p *ratelimit.TokenBucket) { p.Max = 1e-7 }), 0), "max", ratelimit.ErrInvalidLimit},
		{"refill_time 0", tokErr(withTok(func(p *ratelimit.TokenBucket) { p.RefillTime = 0 }), 1), "refill_time", ratelimit.ErrInvalidLimit},
		{"refill_time -1s", tokErr(withTok(func(p *ratelimit.TokenBucket) { p.RefillTime = -time.Second }), 1), "refill_time", ratelimit.ErrInvalidLimit},
		{"refill_time too long", tokErr(withTok(func(p *ratelimit.TokenBucket) { p.RefillTime = ratelimit.MaxBucketDuration + 1 }), 1), "refill_time", ratelimit.ErrInvalidLimit},
		{"refill_amount -1", tokErr(withTok(func(p *ratelimit.TokenBucket) { p.RefillAmount = -1 }), 1), "refill_amount", ratelimit.ErrInvalidLimit},
		{"refill_amount NaN", tokErr(withTok(func(p *ratelimit.TokenBucket) { p.RefillAmount = nan }), 1), "refill_amount", ratelimit.ErrInvalidLimit},
		{"token take -1", tokErr(tok, -1), "take", ratelimit.ErrInvalidValue},
		{"token take NaN", tokErr(tok, nan), "take", ratelimit.ErrInvalidValue},
		{"token take 2e9", tokErr(tok, 2e9), "take", ratelimit.ErrInvalidValue},
		{"size 0", leakyErr(withLeaky(func(p *ratelimit.LeakyBucket) { p.Size = 0 }), 1), "size", ratelimit.ErrInvalidLimit},
		{"size NaN", leakyErr(withLeaky(func(p *ratelimit.LeakyBucket) { p.Size = nan }), 1), "size", ratelimit.ErrInvalidLimit},
		{"size: drip below 1ns", leakyErr(withLeaky(func(p *ratelimit.LeakyBucket) { p.Size = 1e9; p.Interval = time.Millisecond }), 1), "size", ratelimit.ErrInvalidLimit},
		{"size: drip too long", leakyErr(withLeaky(func(p *ratelimit.LeakyBucket) { p.Size = 1e-6; p.Interval = 24 * time.Hour }), 1), "size", ratelimit.ErrInvalidLimit},
		{"interval 0", leakyErr(withLeaky(func(p *ratelimit.LeakyBucket) { p.Interval = 0 }), 1), "interval", ratelimit.ErrInvalidLimit},
		{"interval -1", leakyErr(withLeaky(func(p *ratelimit.LeakyBucket) { p.Interval = -1 }), 1), "interval", ratelimit.ErrInvalidLimit},
		{"leaky take -1", leakyErr(leaky, -1), "take", ratelimit.ErrInvalidValue},
		{"period 0", fixedErr(withFixed(func(p *ratelimit.FixedBucket) { p.Period = 0 }), 1), "period", ratelimit.ErrInvalidLimit},
		{"limit 0", fixedErr(withFixed(func(p *ratelimit.FixedBucket) { p.Limit = 0 }), 1), "limit", ratelimit.ErrInvalidLimit},
		{"limit -Inf", fixedErr(withFixed(func(p *ratelimit.FixedBucket) { p.Limit = -inf }), 1), "limit", ratelimit.ErrInvalidLimit},
		{"fixed take Inf", fixedErr(fixed, inf), "take", ratelimit.ErrInvalidValue},
		{"Validate token", node.ValidateBucket(withTok(func(p *ratelimit.TokenBucket) { p.Max = 0 })), "max", ratelimit.ErrInvalidLimit},
		{"Validate leaky", node.ValidateBucket(withLeaky(func(p *ratelimit.LeakyBucket) { p.Interval = 0 })), "interval", ratelimit.ErrInvalidLimit},
		{"Validate fixed", node.ValidateBucket(withFixed(func(p *ratelimit.FixedBucket) { p.Limit = -1 })), "limit", ratelimit.ErrInvalidLimit},
	} {
		wantBucketFieldError(t, c.name, c.err, c.field, c.want)
	}
	for _, p := range []any{tok, leaky, fixed} {
		if err := node.ValidateBucket(p); err != nil {
			t.Errorf("ValidateBucket(%+v) = %v, want nil", p, err)
		}
	}
	// Keys: checked first, on reads and takes alike.
	_, err := b.TakeTokenAt(now, "", withTok(func(p *ratelimit.TokenBucket) { p.Max = 0 }), 1, false)
	wantBucketFieldError(t, "empty key and bad max", err, "key", ratelimit.ErrInvalidKey)
	_, err = b.LeakyAt(now, "\xff", leaky)
	wantBucketFieldError(t, "invalid UTF-8 key", err, "key", ratelimit.ErrInvalidKey)
	_, err = b.TakeFixedAt(now, string(make([]byte, ratelimit.MaxKeyLen+1)), fixed, 1)
	wantBucketFieldError(t, "long key", err, "key", ratelimit.ErrInvalidKey)
	if b.Len() != 0 {
		t.Errorf("Len() = %d after refused calls, want 0", b.Len())
	}
}

// The cap on buckets refuses a new one with a FieldError on "key" wrapping
// ErrKeyLimit; existing buckets and reads go on; Reclaim makes room.
func TestBucketKeyLimit(t *testing.T) {
	b := newBuckets(2)
	p := ratelimit.FixedBucket{Period: time.Second, Limit: 5}
	for _, k := range []string{"a", "b"} {
		if _, err := b.TakeFixedAt(bt(0), k, p, 1); err != nil {
			t.Fatalf("take %q: %v", k, err)
		}
	}
	_, err := b.TakeFixedAt(bt(0), "c", p, 1)
	wantBucketFieldError(t, "third bucket", err, "key", node.ErrKeyLimit)
	_, err = b.TakeTokenAt(bt(0), "a", ratelimit.TokenBucket{Max: 1, RefillTime: time.Second}, 1, false)
	wantBucketFieldError(t, "same key, another kind", err, "key", node.ErrKeyLimit)
	if got := b.RefusedKeys(); got != 2 {
		t.Errorf("RefusedKeys() = %d, want 2", got)
	}
	st, err := b.TakeFixedAt(bt(0), "a", p, 1)
	checkBucket(t, "existing bucket", st, err, bucketWant{allowed: true, before: 1, remaining: 3, reset: time.Second, retry: 0})
	st, err = b.FixedAt(bt(0), "c", p)
	checkBucket(t, "read of a new key", st, err, bucketWant{allowed: true, before: 0, remaining: 5, reset: time.Second, retry: 0})
	if n := b.Reclaim(bt(time.Second)); n != 2 {
		t.Errorf("Reclaim = %d, want 2", n)
	}
	if _, err := b.TakeFixedAt(bt(time.Second), "c", p, 1); err != nil {
		t.Errorf("take after Reclaim: %v", err)
	}
}

// Reclaim removes exactly the buckets back at their idle state.
func TestBucketReclaim(t *testing.T) {
	b := newBuckets(0)
	tok := ratelimit.TokenBucket{Max: 4, RefillTime: 10 * time.Second, RefillAmount: 1}
	leaky := ratelimit.LeakyBucket{Size: 4, Interval: 40 * time.Second} // a drop per 10 s
	fixed := ratelimit.FixedBucket{Period: 10 * time.Second, Limit: 4}
	for _, n := range []float64{1, 2} {
		key := map[float64]string{1: "one", 2: "two"}[n]
		b.TakeTokenAt(bt(0), key, tok, n, false)
		b.TakeLeakyAt(bt(0), key, leaky, n)
		b.TakeFixedAt(bt(5*time.Second), key, fixed, n)
	}
	if n := b.Reclaim(bt(9 * time.Second)); n != 0 || b.Len() != 6 {
		t.Errorf("Reclaim at 9s removed %d, left %d; want 0, 6", n, b.Len())
	}
	if n := b.Reclaim(bt(10 * time.Second)); n != 4 || b.Len() != 2 {
		// token "one" (refilled), leaky "one" (drained), both fixed (period ended)
		t.Errorf("Reclaim at 10s removed %d, left %d; want 4, 2", n, b.Len())
	}
	if n := b.Reclaim(bt(19 * time.Second)); n != 0 || b.Len() != 2 {
		t.Errorf("Reclaim at 19s removed %d, left %d; want 0, 2", n, b.Len())
	}
	if n := b.Reclaim(bt(20 * time.Second)); n != 2 || b.Len() != 0 {
		t.Errorf("Reclaim at 20s removed %d, left %d; want 2, 0", n, b.Len())
	}
	// A reclaimed bucket comes back in its idle state.
	st, err := b.TokenAt(bt(20*time.Second), "two", tok)
	checkBucket(t, "token after Reclaim", st, err, bucketWant{allowed: true, before: 4, remaining: 4, reset: 0, retry: 0})
}

// Concurrent takes on one bucket admit exactly its capacity.
func TestBucketConcurrentTakes(t *testing.T) {
	const workers, takes, capacity = 8, 1000, 100
	now := bt(0)
	for _, c := range []struct {
		kind string
		take func(b *node.Buckets) (node.BucketStatus, error)
	}{
		{"token", func(b *node.Buckets) (node.BucketStatus, error) {
			return b.TakeTokenAt(now, "k", ratelimit.TokenBucket{Max: capacity, RefillTime: time.Hour}, 1, false)
		}},
		{"leaky", func(b *node.Buckets) (node.BucketStatus, error) {
			return b.TakeLeakyAt(now, "k", ratelimit.LeakyBucket{Size: capacity, Interval: time.Hour}, 1)
		}},
		{"fixed", func(b *node.Buckets) (node.BucketStatus, error) {
			return b.TakeFixedAt(now, "k", ratelimit.FixedBucket{Period: time.Hour, Limit: capacity}, 1)
		}},
	} {
		t.Run(c.kind, func(t *testing.T) {
			b := newBuckets(0)
			var admitted [workers]int
			var wg gosync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for range takes {
						st, err := c.take(b)
						if err != nil {
							t.Error(err)
							return
						}
						if st.Allowed {
							admitted[w]++
						}
					}
				})
			}
			wg.Wait()
			sum := 0
			for _, n := range admitted {
				sum += n
			}
			if sum != capacity {
				t.Errorf("admitted %d of %d takes, want exactly %d", sum, workers*takes, capacity)
			}
		})
	}
}

// A call on an existing bucket does not allocate.
func TestBucketAllocs(t *testing.T) {
	b := newBuckets(0)
	now := bt(0)
	tok := ratelimit.TokenBucket{Max: 1e6, RefillTime: time.Second}
	leaky := ratelimit.LeakyBucket{Size: 1e6, Interval: time.Second}
	fixed := ratelimit.FixedBucket{Period: time.Second, Limit: 1e6}
	b.TakeTokenAt(now, "key:000000000001", tok, 1, false)
	b.TakeLeakyAt(now, "key:000000000001", leaky, 1)
	b.TakeFixedAt(now, "key:000000000001", fixed, 1)
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"token take", func() { b.TakeTokenAt(now, "key:000000000001", tok, 1, true) }},
		{"token read", func() { b.TokenAt(now, "key:000000000001", tok) }},
		{"leaky take", func() { b.TakeLeakyAt(now, "key:000000000001", leaky, 1) }},
		{"fixed take", func() { b.TakeFixedAt(now, "key:000000000001", fixed, 1) }},
		{"token take (clock)", func() { b.TakeToken("key:000000000001", tok, 1, false) }},
	} {
		if n := testing.AllocsPerRun(100, c.f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", c.name, n)
		}
	}
}

// TestLeakyWaitTimeoutBounds: a leaky limit's wait_timeout may be 0 to
// MaxWaitTimeout, both ends included; beyond, the error names the field.
func TestLeakyWaitTimeoutBounds(t *testing.T) {
	ns := newNS(t, localConfig(time.Second), nil)
	for _, tc := range []struct {
		wait time.Duration
		ok   bool
	}{
		{0, true}, {ratelimit.MaxWaitTimeout, true}, {ratelimit.MaxWaitTimeout + time.Nanosecond, false}, {-time.Nanosecond, false},
	} {
		l := ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 2, Interval: time.Second}, WaitTimeout: tc.wait}
		_, err := ns.CheckAllow(ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{l}})
		if (err == nil) != tc.ok || err != nil && !strings.Contains(err.Error(), "limits[0].leaky.wait_timeout") {
			t.Errorf("wait_timeout %v: %v, want ok %v (an error naming limits[0].leaky.wait_timeout)", tc.wait, err, tc.ok)
		}
	}
}

// TestBucketsMaxBytesExact: buckets whose costs add up to max_bytes
// exactly are all held; one more is refused, and a refusal gives back
// what it would have cost, so the budget is as before it.
func TestBucketsMaxBytesExact(t *testing.T) {
	cost := node.BucketCost(len("k0"))
	b := node.NewBuckets(node.BucketsConfig{Name: "api", MaxBytes: 3 * cost}, newFakeClock(epoch))
	p := ratelimit.FixedBucket{Period: time.Minute, Limit: 10}
	for i := range 3 {
		if _, err := b.TakeFixedAt(epoch, fmt.Sprint("k", i), p, 1); err != nil {
			t.Fatalf("bucket %d of 3 that fill max_bytes exactly: %v", i+1, err)
		}
	}
	for range 2 {
		if _, err := b.TakeFixedAt(epoch, "k3", p, 1); !errors.Is(err, node.ErrKeyLimit) {
			t.Fatalf("a fourth bucket: %v, want ErrKeyLimit", err)
		}
	}
	if got, n := b.Bytes(), b.Len(); got != 3*cost || n != 3 {
		t.Errorf("%d bytes and %d buckets held after two refusals, want %d and 3", got, n, 3*cost)
	}
}

// TestBucketDurationBounds: a bucket's durations may be up to
// MaxBucketDuration, that included.
func TestBucketDurationBounds(t *testing.T) {
	b := node.NewBuckets(node.BucketsConfig{Name: "api"}, newFakeClock(epoch))
	if _, err := b.TakeFixedAt(epoch, "k", ratelimit.FixedBucket{Period: ratelimit.MaxBucketDuration, Limit: 1}, 1); err != nil {
		t.Errorf("a period of MaxBucketDuration: %v", err)
	}
	if _, err := b.TakeFixedAt(epoch, "k", ratelimit.FixedBucket{Period: ratelimit.MaxBucketDuration + 1, Limit: 1}, 1); !errors.Is(err, ratelimit.ErrInvalidLimit) {
		t.Errorf("a period past MaxBucketDuration: %v, want ErrInvalidLimit", err)
	}
}

// TestBucketOnlyAllowHoldsNoWindowKey: an Allow of bucket limits only
// holds its buckets, no sliding-window key.
func TestBucketOnlyAllowHoldsNoWindowKey(t *testing.T) {
	ns := newNS(t, localConfig(time.Second), nil)
	l := ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Minute, Limit: 10}}
	if d := allow(t, ns, epoch, ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{l}}); !d.Allowed {
		t.Fatalf("Allow = %+v", d)
	}
	if n := ns.ActiveKeys(); n != 0 {
		t.Errorf("%d sliding-window keys held after an Allow of a bucket only, want 0", n)
	}
}

// TestBucketAllowRecordsOwnConsumption: a cost-0 Allow of a bucket the
// node does not hold creates none; an Allow that takes from a synced
// namespace's bucket leaves that consumption, and its time, for the
// tick; a refused one adds none.
func TestBucketAllowRecordsOwnConsumption(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second), newFakeClock(epoch))
	l := ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Minute, Limit: 2}}
	allow(t, ns, epoch, ratelimit.AllowRequest{Key: "k", Cost: 0, Limits: []ratelimit.Limit{l}})
	if n := ns.ActiveBuckets(); n != 0 {
		t.Fatalf("%d buckets held after a cost-0 Allow, want 0", n)
	}
	at := epoch.Add(time.Second)
	for range 3 { // 2 admitted, 1 refused
		allow(t, ns, at, ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{l}})
	}
	bs := bucketTick(ns, at).Buckets
	if len(bs) != 1 || bs[0].Own != 2*ratelimit.Micro || bs[0].ApplyAt != at.UnixNano() {
		t.Errorf("buckets to sync: %+v, want one with 2 hits of its own, the last at %d", bs, at.UnixNano())
	}
}

// TestBucketAmountBounds: a bucket's capacity may be as small as one
// micro-hit (0.000001), not less.
func TestBucketAmountBounds(t *testing.T) {
	b := node.NewBuckets(node.BucketsConfig{Name: "api"}, newFakeClock(epoch))
	if _, err := b.TakeFixedAt(epoch, "k", ratelimit.FixedBucket{Period: time.Minute, Limit: 0.000001}, 0); err != nil {
		t.Errorf("a limit of 0.000001: %v", err)
	}
	if _, err := b.TakeFixedAt(epoch, "k", ratelimit.FixedBucket{Period: time.Minute, Limit: 0.0000004}, 0); !errors.Is(err, ratelimit.ErrInvalidLimit) {
		t.Errorf("a limit of 0.0000004: %v, want ErrInvalidLimit", err)
	}
}

// TestBucketAllowsReturn: Allows that create and lock several buckets of
// a key return (a bound on a hang, not a timing).
func TestBucketAllowsReturn(t *testing.T) {
	ns := newNS(t, localConfig(time.Second), nil)
	limits := []ratelimit.Limit{
		{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 5, Interval: time.Second}},
		{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 5, RefillTime: time.Second}},
	}
	done := make(chan bool, 1)
	go func() {
		admitted := true
		for range 2 {
			d, err := ns.AllowAt(epoch, ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: limits}, nil)
			admitted = admitted && err == nil && d.Allowed
		}
		done <- admitted
	}()
	select {
	case ok := <-done:
		if !ok {
			t.Error("2 takes of 1 from buckets of 5: not both admitted")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("2 Allows of two new buckets did not return in 10 s")
	}
}
