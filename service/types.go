package service

import (
	"errors"
	"time"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// The service's own types: a front imports this package, never node or
// sync, so the engine may change without changing what fronts see. Each
// has the engine's layout (convert.go passes them to it without a copy;
// TestEngineLayouts holds them to it).

// Rate is one window size's sliding rate, in hits.
type Rate struct {
	Size time.Duration
	Rate float64
}

// Limit is one limit of an Allow: by default (Kind SlidingWindow) "at
// most Limit hits per sliding window of Size"; with another Kind, a
// token, leaky or fixed bucket of the key, whose parameters are in the
// field of that kind (and Size and Limit are unset).
type Limit struct {
	Size  time.Duration
	Limit float64
	// Kind selects the kind of limit: SlidingWindow (the zero value),
	// TokenKind, LeakyKind or FixedKind.
	Kind Kind
	// Token is a TokenKind's bucket; Strict is Smyte's STRICT.
	Token  TokenBucket
	Strict bool
	// Leaky is a LeakyKind's bucket; WaitTimeout, at most a minute, is
	// Sidekiq's wait_timeout: how long Allow may wait for it to drain
	// before trying once more.
	Leaky       LeakyBucket
	WaitTimeout time.Duration
	// Fixed is a FixedKind's bucket.
	Fixed FixedBucket
}

// TokenBucket is a token bucket's parameters (Smyte's): Max tokens, and
// RefillAmount (0: Max) more every RefillTime.
type TokenBucket struct {
	Max          float64
	RefillTime   time.Duration
	RefillAmount float64
}

// LeakyBucket is a leaky bucket's parameters (Sidekiq's leaky): Size
// drops at most, all of them drained in Interval.
type LeakyBucket struct {
	Size     float64
	Interval time.Duration
}

// FixedBucket is a fixed bucket's parameters (Sidekiq's bucket): at most
// Limit per Period, the periods aligned on the Unix epoch.
type FixedBucket struct {
	Period time.Duration
	Limit  float64
}

// LimitStatus is one limit's state after an Allow decision.
type LimitStatus struct {
	Kind Kind
	// Size is a sliding window's size (0 for a bucket).
	Size time.Duration
	// Limit is a sliding window's limit, or a bucket's capacity.
	Limit float64
	// Before is the level before the decision: a window's sliding rate, a
	// token bucket's tokens (Smyte's reply), a leaky bucket's drops or a
	// fixed bucket's count in its period.
	Before float64
	// Rate is the level after the decision; Remaining = max(0, Limit −
	// Rate) is what still fits.
	Rate      float64
	Remaining float64
	// ResetAfter is the time until the current window ends; for a bucket,
	// until its next change by time alone.
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
	// Wait, when denied only by leaky buckets whose waits fit their
	// WaitTimeout, is the longest of those waits (Allow has waited it
	// already when it answers).
	Wait time.Duration
	// DryRun is set when the call was a dry run (its namespace or policy
	// is in shadow mode): it was decided and counted as it would have
	// been, then admitted. Allowed is then true, WouldAllow is what the
	// limits decided, and RetryAfter, Never and Reason describe the
	// refusal it would have been.
	DryRun bool
	// WouldAllow is what the limits decided: Allowed, but in a dry run.
	WouldAllow bool
	// At is the time the call was decided at: the request's at, else the
	// node's clock as the call came in, or once it had waited for its
	// buckets (another call's store exchange in flight).
	At time.Time
}

// FieldError names the request field that was wrong and wraps one of the
// sentinels below.
type FieldError = ratelimit.FieldError

// Sentinel errors, wrapped by every FieldError a call returns.
var (
	ErrInvalidKey       = ratelimit.ErrInvalidKey
	ErrInvalidValue     = ratelimit.ErrInvalidValue
	ErrInvalidWindow    = node.ErrInvalidWindow
	ErrUnknownWindow    = node.ErrUnknownWindow
	ErrInvalidLimit     = ratelimit.ErrInvalidLimit
	ErrUnknownNamespace = node.ErrUnknownNamespace
	ErrKeyLimit         = node.ErrKeyLimit
	// ErrFailedPrecondition: the request is valid but the namespace's mode
	// cannot serve it: a bucket limit in an estimator namespace
	// (node.ErrEstimatorKind wraps it) or on a store that cannot hold
	// buckets, or windows and buckets in one synchronous Allow.
	ErrFailedPrecondition = node.ErrNotLocal
	// ErrUnknownPolicy: an Allow names a policy its namespace does not
	// hold (INVALID_ARGUMENT on "policy").
	ErrUnknownPolicy = errors.New("service: unknown policy")
	// ErrInvalidLease: a lease id limiterd did not make.
	ErrInvalidLease = ratelimit.ErrInvalidLease
	// ErrUnavailable: the store a synchronous call needs cannot be
	// reached (wrapped by errors that are no FieldError).
	ErrUnavailable = clustersync.ErrUnavailable
	// ErrUnauthenticated: authorization is on and the call carries no
	// configured credential (no FieldError wraps it).
	ErrUnauthenticated = auth.ErrUnauthenticated
	// ErrPermissionDenied: the caller is not granted the call's operation
	// in its namespace; an *auth.DeniedError names both.
	ErrPermissionDenied = auth.ErrPermissionDenied
)

// Request limits.
const (
	// MaxLimits is the most limits one Allow may check.
	MaxLimits = node.MaxLimits
	// MaxWindowSizes is the most window sizes a namespace has, so the most
	// rates one Increment or SlidingWindow answers.
	MaxWindowSizes = node.MaxWindowSizes
	// MaxBatchItems is the most items one batch may carry.
	MaxBatchItems = 10_000
)

// IncrementRequest counts hits for a key.
type IncrementRequest struct {
	// Namespace; empty means "default".
	Namespace string
	// At is the time of the hits; zero means the namespace clock's now.
	At time.Time
	// Key is non-empty UTF-8 of at most 1 KiB.
	Key string
	// WindowSize counts in that window size only; 0 counts in every one.
	WindowSize time.Duration
	// Value is how much the hit counts; nil means 1. It may be fractional
	// or negative (a release); |value| ≤ 10^9.
	Value *float64
}

// RateRequest reads a key's sliding rates, counting nothing.
type RateRequest struct {
	Namespace  string
	At         time.Time
	Key        string
	WindowSize time.Duration
	// CurDiff answers as if this much more were counted now (a what-if).
	CurDiff float64
}

// AllowRequest decides whether Cost more hits fit under every limit and,
// if so, counts them in every window size of the namespace.
type AllowRequest struct {
	Namespace string
	At        time.Time
	Key       string
	// Cost is the hits to take; nil means 1; it must not be negative.
	Cost *float64
	// Policy names one of the namespace's policies, whose limits the call
	// checks: then Limits must be empty. An unknown name is an
	// ErrUnknownPolicy on "policy".
	Policy string
	// Limits are 1 to MaxLimits limits: sliding windows on distinct
	// configured window sizes (a window limit with no (zero) window size
	// is an error) and distinct buckets, all admitted or none. The cost is
	// what a bucket takes (0 only reads).
	Limits []Limit
	// CountRejected counts Cost even when denied (penalty mode).
	CountRejected bool
	// Probe reads the limits' state for a front's own answer (the Redis
	// protocol's RL.GET): it decides as Allow does but is not reported
	// to the Observer as a decision.
	Probe bool
}
