package service

import (
	"time"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/node"
	clustersync "github.com/limiterd/limiterd/sync"
)

// The engine's types and errors, as fronts see them: a front imports this
// package, not node.
type (
	// Rate is one window size's sliding rate.
	Rate = node.Rate
	// Limit is "at most Limit hits per sliding window of Size".
	Limit = node.Limit
	// LimitStatus is one limit's state after an Allow decision.
	LimitStatus = node.LimitStatus
	// Decision is the answer to an Allow.
	Decision = node.Decision
	// FieldError names the request field that was wrong and wraps one of
	// the sentinels below.
	FieldError = node.FieldError
	// LimitKind is the kind of a Limit: a sliding window (the zero value)
	// or a bucket.
	LimitKind = node.LimitKind
	// TokenBucket is a token bucket's parameters (Smyte's).
	TokenBucket = node.TokenBucket
	// LeakyBucket is a leaky bucket's parameters (Sidekiq's leaky).
	LeakyBucket = node.LeakyBucket
	// FixedBucket is a fixed bucket's parameters (Sidekiq's bucket).
	FixedBucket = node.FixedBucket
)

// The kinds of Limit.
const (
	WindowLimit = node.WindowLimit
	TokenLimit  = node.TokenLimit
	LeakyLimit  = node.LeakyLimit
	FixedLimit  = node.FixedLimit
)

// Sentinel errors, wrapped by every FieldError a call returns.
var (
	ErrInvalidKey       = node.ErrInvalidKey
	ErrInvalidValue     = node.ErrInvalidValue
	ErrInvalidWindow    = node.ErrInvalidWindow
	ErrUnknownWindow    = node.ErrUnknownWindow
	ErrInvalidLimit     = node.ErrInvalidLimit
	ErrUnknownNamespace = node.ErrUnknownNamespace
	ErrKeyLimit         = node.ErrKeyLimit
	// ErrFailedPrecondition: the request is valid but the namespace's mode
	// cannot serve it: a bucket limit in an estimator namespace
	// (node.ErrEstimatorKind wraps it) or on a store that cannot hold
	// buckets, or windows and buckets in one synchronous Allow.
	ErrFailedPrecondition = node.ErrNotLocal
	// ErrInvalidLease: a lease id limiterd did not make.
	ErrInvalidLease = node.ErrInvalidLease
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
	// Limits are 1 to MaxLimits limits: sliding windows on distinct
	// configured window sizes (a window limit with no (zero) window size
	// is an error) and distinct buckets, all admitted or none. The cost is
	// what a bucket takes (0 only reads).
	Limits []Limit
	// CountRejected counts Cost even when denied (penalty mode).
	CountRejected bool
}
