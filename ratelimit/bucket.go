package ratelimit

import "time"

// TokenBucket is a token bucket's parameters, as in Smyte's ratelimit
// (RL.REDUCE key max refilltime [REFILL amount] [TAKE n] [AT time]). They
// are part of the bucket's identity.
//
// A new bucket holds Max tokens. Every whole RefillTime since the last
// refill mark adds RefillAmount tokens, up to Max, and moves the mark by
// that many RefillTimes (not to the call's time, so partial progress
// towards the next refill is kept). A take of n is admitted when the
// tokens before it are at least n; either way the bucket keeps
// max(tokens − n, 0), so a refused take empties it (Smyte's code does
// exactly this). A take of 0 only reads.
type TokenBucket struct {
	// Max is the most tokens the bucket holds, in (0, MaxValue].
	Max float64
	// RefillTime is the time between refills, in (0, MaxBucketDuration].
	RefillTime time.Duration
	// RefillAmount is the tokens one refill adds; 0 means Max.
	RefillAmount float64
}

// LeakyBucket is a leaky bucket's parameters, as Sidekiq's
// Limiter.leaky(name, size, interval): the bucket holds at most Size drops
// and drains Size drops per Interval, one drop every drip interval
// Interval/Size (leaky(name, 10, 10 s) drains one drop a second). They are
// part of the bucket's identity.
//
// A take of n adds n drops when they fit (drops + n <= Size) and is
// refused otherwise, changing nothing. Whole drips since the last drip
// mark each drain one drop, and move the mark by as many drip intervals;
// drops never go below 0 (Sidekiq's script can: limiterd clamps), and an
// empty bucket's mark follows the time, so a drop added to it drains a
// whole drip interval later. Sidekiq sets its mark to the call's time on
// every admitted call, losing the progress towards the next drip; limiterd
// keeps it, so the bucket drains at exactly Size per Interval.
type LeakyBucket struct {
	// Size is the most drops the bucket holds, in (0, MaxValue].
	Size float64
	// Interval is the time to drain Size drops, in (0, MaxBucketDuration].
	Interval time.Duration
}

// FixedBucket is a fixed bucket's parameters, as Sidekiq's
// Limiter.bucket(name, limit, interval): at most Limit per clock-aligned
// Period (start = floor(t/Period)·Period, as windows are aligned). They are
// part of the bucket's identity.
//
// A take of n is admitted when the period's count + n <= Limit, and then
// counted; a refused take counts nothing. A call whose period is older
// than the bucket's counts in the bucket's period: time never moves
// backwards.
type FixedBucket struct {
	// Period is the length of a period, in (0, MaxBucketDuration].
	Period time.Duration
	// Limit is the most counted per period, in (0, MaxValue].
	Limit float64
}
