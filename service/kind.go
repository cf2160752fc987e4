package service

import (
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// Kind is a limiter kind: of a Limit, of a LimitStatus, and of a decision
// as an Observer sees it. Every kind lives in the same namespaces and
// modes; what differs between kinds is gathered in one rules entry each.
type Kind uint8

// The limiter kinds.
const (
	// SlidingWindow is Kong's sliding window: Increment, SlidingWindow and
	// Allow.
	SlidingWindow Kind = iota
	// TokenKind is Smyte's token bucket: a TokenBucket limit in Allow.
	TokenKind
	// LeakyKind is Sidekiq's leaky bucket: a LeakyBucket limit in Allow.
	LeakyKind
	// FixedKind is Sidekiq's fixed bucket: a FixedBucket limit in Allow.
	FixedKind
	// ConcurrencyKind is a concurrency limit: Acquire's leases.
	ConcurrencyKind
	// MixedKind is an Allow whose limits are of several kinds.
	MixedKind
	numKinds
)

// kindSet is a set of kinds, one bit each: the kinds one call involves.
type kindSet uint8

// only is the set of k alone.
func only(k Kind) kindSet { return 1 << k }

// limitKinds is the set of the kinds of limits; a sliding window when
// there is none (such an Allow is refused later, as a sliding window's).
func limitKinds(limits []Limit) kindSet {
	var s kindSet
	for i := range limits {
		s |= only(limits[i].Kind)
	}
	if s == 0 {
		s = only(SlidingWindow)
	}
	return s
}

// engineKinds is limitKinds of the engine's limits (a policy's).
func engineKinds(limits []ratelimit.Limit) kindSet {
	var s kindSet
	for i := range limits {
		s |= only(Kind(limits[i].Kind))
	}
	if s == 0 {
		s = only(SlidingWindow)
	}
	return s
}

// one returns the kind of a set of one kind, MixedKind for several.
func (s kindSet) one() Kind {
	for k := range numKinds {
		if s == only(k) {
			return k
		}
	}
	return MixedKind
}

// atRange is the range of times every kind of s accepts: the narrowest
// of their ranges.
func (s kindSet) atRange(ns *node.Namespace) (past, future time.Duration) {
	past, future = ratelimit.MaxBucketDuration, MaxFuture
	for k := range kinds {
		if s&only(Kind(k)) != 0 && kinds[k].atRange != nil {
			p, f := kinds[k].atRange(ns)
			past, future = min(past, p), min(future, f)
		}
	}
	return past, future
}

// MaxFuture is how far ahead of the namespace clock a call's `at` may be:
// room for the clock skew between a caller and the node.
const MaxFuture = time.Second

// rules is what one kind decides for itself.
type rules struct {
	name string
	// atRange is how far before and after now a call's time may be in ns.
	atRange func(ns *node.Namespace) (past, future time.Duration)
}

// kinds holds every kind's rules, indexed by Kind.
var kinds = [...]rules{
	SlidingWindow: {
		name: "sliding window",
		// Back to the start of the largest window's previous window that
		// still counts: a time before it could touch no count.
		atRange: func(ns *node.Namespace) (time.Duration, time.Duration) {
			sizes := ns.Sizes()
			return sizes[len(sizes)-1], MaxFuture
		},
	},
	TokenKind: {name: "token bucket", atRange: bucketAtRange},
	LeakyKind: {name: "leaky bucket", atRange: bucketAtRange},
	FixedKind: {name: "fixed bucket", atRange: bucketAtRange},
	// Leases take no time from a call; mixed is no kind of its own.
	ConcurrencyKind: {name: "concurrency"},
	MixedKind:       {name: "mixed"},
}

// bucketAtRange is the range of a bucket's time: client time for
// historical data (Smyte's AT), as far back as the longest refill time,
// interval or period. A time before a bucket's last update counts as that
// update (node: a bucket's time never moves backwards), so an old time
// never undoes a later take; it only refills or drains nothing.
func bucketAtRange(*node.Namespace) (time.Duration, time.Duration) {
	return ratelimit.MaxBucketDuration, MaxFuture
}

// String names the kind.
func (k Kind) String() string {
	if k >= numKinds {
		return "unknown kind"
	}
	return kinds[k].name
}

// AtRange returns the times a call of kind k may give in namespace, now
// being the namespace clock's time: [earliest, latest].
func (s *Service) AtRange(k Kind, namespace string) (earliest, latest time.Time, err error) {
	ns, err := s.node.Namespace(namespace)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	now := ns.Now()
	past, future := only(k).atRange(ns)
	return now.Add(-past), now.Add(future), nil
}
