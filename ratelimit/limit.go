package ratelimit

import (
	"fmt"
	"time"
)

// Limit is one limit of an Allow: by default (Kind WindowLimit) "at most
// Limit hits per sliding window of Size"; with another Kind, a token,
// leaky or fixed bucket of the key, whose parameters are in the field of
// that kind (and Size and Limit are unset).
type Limit struct {
	Size  time.Duration
	Limit float64
	// Kind selects the kind of limit; the zero value is a sliding window.
	Kind LimitKind
	// Token is a TokenLimit's bucket; Strict is Smyte's STRICT: a take
	// that leaves the bucket empty restarts its refill clock.
	Token  TokenBucket
	Strict bool
	// Leaky is a LeakyLimit's bucket; WaitTimeout, at most MaxWaitTimeout,
	// is Sidekiq's wait_timeout: how long a caller (the service) may wait
	// for it to drain before trying once more. Decision.Wait reports it.
	Leaky       LeakyBucket
	WaitTimeout time.Duration
	// Fixed is a FixedLimit's bucket.
	Fixed FixedBucket
}

// LimitStatus is one limit's state after an Allow decision.
type LimitStatus struct {
	Kind LimitKind
	// Size is a sliding window's size (0 for a bucket).
	Size time.Duration
	// Limit is a sliding window's limit, or a bucket's capacity (max
	// tokens, size in drops, limit per period).
	Limit float64
	// Before is the level before the decision: a window's sliding rate, a
	// token bucket's tokens (Smyte's reply), a leaky bucket's drops or a
	// fixed bucket's count in its period.
	Before float64
	// Rate is the sliding rate after the decision (including the cost when
	// it was counted); for a bucket, the capacity in use after it (max −
	// tokens, drops, or the period's count). Remaining = max(0, Limit −
	// Rate): the hits, tokens or drops that still fit.
	Rate      float64
	Remaining float64
	// ResetAfter is the time until the current window of Size ends; for a
	// bucket, until its next change by time alone (the next refill, the
	// next drip, or the end of the period; 0 when a token bucket is full
	// or a leaky bucket empty).
	ResetAfter time.Duration
}

// Decision is the answer to an Allow.
type Decision struct {
	Allowed bool
	// Limits has one status per requested limit, in request order.
	Limits []LimitStatus
	// RetryAfter, when denied, is the least wait after which the same cost
	// would be admitted if nothing else were counted.
	RetryAfter time.Duration
	// Never is set when the cost exceeds a limit, so waiting cannot help;
	// Reason says which.
	Never  bool
	Reason string
	// Wait, when denied only by leaky buckets each of which admits the
	// cost after a wait within its WaitTimeout, is the longest of those
	// waits: a caller may wait that long and try once more. 0 otherwise.
	Wait time.Duration
	// At, when set, is the time the call was decided at, later than the
	// one it was given: a live call that waited (AllowRequest.Live).
	At time.Time
}

// AllowRequest is the input of Allow.
type AllowRequest struct {
	Key    string
	Cost   float64 // hits; must be >= 0
	Limits []Limit
	// CountRejected counts Cost even when denied (penalty mode).
	CountRejected bool
	// Live says the call's time is its node's clock as the call came in,
	// not a time the client gave: a call that waits for its buckets
	// (another call's store exchange in flight) is decided as of when
	// the wait ends, and Decision.At says so.
	Live bool
}

// LimitKind is the kind of a Limit: a sliding window or a bucket.
type LimitKind uint8

// The kinds of limit an Allow checks.
const (
	// WindowLimit is a sliding window: Limit.Size and Limit.Limit.
	WindowLimit LimitKind = iota
	// TokenLimit is a token bucket: Limit.Token and Limit.Strict.
	TokenLimit
	// LeakyLimit is a leaky bucket: Limit.Leaky and Limit.WaitTimeout.
	LeakyLimit
	// FixedLimit is a fixed bucket: Limit.Fixed.
	FixedLimit
)

// String names the kind.
func (k LimitKind) String() string {
	switch k {
	case WindowLimit:
		return "sliding window"
	case TokenLimit:
		return "token bucket"
	case LeakyLimit:
		return "leaky bucket"
	case FixedLimit:
		return "fixed bucket"
	}
	return fmt.Sprintf("LimitKind(%d)", uint8(k))
}

// MaxWaitTimeout is the longest wait_timeout a leaky limit may ask for.
const MaxWaitTimeout = time.Minute

// Rate is the sliding rate of one window size, in hits.
type Rate struct {
	Size time.Duration
	Rate float64
}

// Policy is a named set of limits held by a namespace, and whether the
// Allow calls naming it are dry runs.
type Policy struct {
	// Limits are 1 to MaxLimits limits of any kind, as an Allow lists
	// them.
	Limits []Limit
	// Shadow makes the calls naming the policy dry runs.
	Shadow bool
}
