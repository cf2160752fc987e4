package service

import (
	"time"

	"github.com/limiterd/limiterd/node"
)

// Kind is a limiter kind. Every kind lives in the same namespaces and
// modes; what differs between kinds is gathered in one rules entry each.
type Kind int

// The limiter kinds.
const (
	// SlidingWindow is Kong's sliding window: Increment, SlidingWindow and
	// Allow.
	SlidingWindow Kind = iota
)

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
}

// String names the kind.
func (k Kind) String() string { return kinds[k].name }

// AtRange returns the times a call of kind k may give in namespace, now
// being the namespace clock's time: [earliest, latest].
func (s *Service) AtRange(k Kind, namespace string) (earliest, latest time.Time, err error) {
	ns, err := s.node.Namespace(namespace)
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	now := ns.Now()
	past, future := kinds[k].atRange(ns)
	return now.Add(-past), now.Add(future), nil
}
