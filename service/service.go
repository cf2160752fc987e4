package service

import (
	"context"
	"fmt"
	"time"

	"github.com/limiterd/limiterd/node"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Service serves the namespaces of one node. It is safe for concurrent
// use.
type Service struct {
	node *node.Node
	// syncers holds the syncer of every synchronous namespace, by name.
	syncers map[string]*clustersync.Syncer
}

// New serves n's namespaces, routing the synchronous ones through their
// syncers. Every synchronous namespace of n needs one; syncers of periodic
// namespaces may be passed too (they run in the background and serve no
// call) and are ignored.
func New(n *node.Node, syncers ...*clustersync.Syncer) (*Service, error) {
	s := &Service{node: n, syncers: map[string]*clustersync.Syncer{}}
	for _, sy := range syncers {
		ns, err := n.Namespace(sy.Namespace().Name())
		if err != nil || ns != sy.Namespace() {
			return nil, fmt.Errorf("service: the syncer of %s is not of this node's namespaces", sy.Namespace())
		}
		if ns.Config().Mode() == node.Synchronous {
			s.syncers[ns.Name()] = sy
		}
	}
	for _, ns := range n.Namespaces() {
		if ns.Config().Mode() == node.Synchronous && s.syncers[ns.Name()] == nil {
			return nil, fmt.Errorf("service: synchronous namespace %q has no syncer", ns.Name())
		}
	}
	return s, nil
}

// Node returns the node served.
func (s *Service) Node() *node.Node { return s.node }

// route is where a call goes: the namespace and, when it is synchronous,
// its syncer.
type route struct {
	name string // as the request gave it
	ns   *node.Namespace
	sy   *clustersync.Syncer
}

// resolve finds the namespace called name; last is the route the previous
// item of a batch took (nil for a single call), reused when it matches.
func (s *Service) resolve(name string, last *route) (route, error) {
	if last != nil && last.ns != nil && last.name == name {
		return *last, nil
	}
	ns, err := s.node.Namespace(name)
	if err != nil {
		return route{}, err
	}
	r := route{name: name, ns: ns, sy: s.syncers[ns.Name()]}
	if last != nil {
		*last = r
	}
	return r, nil
}

// target checks the start every call of kind k shares, in order: its
// namespace, its time (zero: now), its key and its window size (0: every
// size, or none). It returns the call's route and time.
func (s *Service) target(last *route, k Kind, namespace string, t time.Time, key string, size time.Duration) (route, time.Time, error) {
	r, err := s.resolve(namespace, last)
	if err != nil {
		return r, t, err
	}
	if t, err = at(k, r.ns, t); err != nil {
		return r, t, err
	}
	if err := node.ValidateKey(key); err != nil {
		return r, t, err
	}
	return r, t, checkSize(r.ns, "window_size", size)
}

// at validates a call's time for kind in ns, defaulting to now.
func at(k Kind, ns *node.Namespace, t time.Time) (time.Time, error) {
	now := ns.Now()
	if t.IsZero() {
		return now, nil
	}
	past, future := kinds[k].atRange(ns)
	if t.Before(now.Add(-past)) || t.After(now.Add(future)) {
		return t, &FieldError{Field: "at", Err: ErrInvalidValue,
			Reason: fmt.Sprintf("must be within [now - %s, now + %s] (now is %s), got %s",
				past, future, now.UTC().Format(time.RFC3339Nano), t.UTC().Format(time.RFC3339Nano))}
	}
	return t, nil
}

// checkSize validates a window size of ns named field; 0 passes (every
// size, where the call allows it).
func checkSize(ns *node.Namespace, field string, size time.Duration) error {
	if size < 0 {
		return &FieldError{Field: field, Err: ErrInvalidWindow, Reason: fmt.Sprintf("must be positive, got %s", size)}
	}
	if size == 0 {
		return nil
	}
	if _, _, err := ns.SizeRange(size); err != nil {
		return renamed(err, field)
	}
	return nil
}

// checkValue validates a hit count named field.
func checkValue(field string, v float64) error {
	if _, err := node.ToMicro(v); err != nil {
		return renamed(err, field)
	}
	return nil
}

// renamed sets the field of err, a *FieldError, to field.
func renamed(err error, field string) error {
	if fe, ok := err.(*FieldError); ok {
		fe.Field = field
	}
	return err
}

// valueOr is *v, or def when v is nil.
func valueOr(v *float64, def float64) float64 {
	if v == nil {
		return def
	}
	return *v
}

// Increment counts req.Value hits and appends the rates after counting to
// dst, one per window size counted, ascending.
func (s *Service) Increment(ctx context.Context, req IncrementRequest, dst []Rate) ([]Rate, error) {
	return s.increment(ctx, req, nil, dst)
}

func (s *Service) increment(ctx context.Context, req IncrementRequest, last *route, dst []Rate) ([]Rate, error) {
	r, t, err := s.target(last, SlidingWindow, req.Namespace, req.At, req.Key, req.WindowSize)
	if err != nil {
		return dst, err
	}
	value := valueOr(req.Value, 1)
	if err := checkValue("value", value); err != nil {
		return dst, err
	}
	if r.sy != nil {
		return r.sy.IncrementAt(ctx, t, req.Key, req.WindowSize, value, dst)
	}
	return r.ns.IncrementAt(t, req.Key, req.WindowSize, value, dst)
}

// SlidingWindow appends to dst the key's sliding rates (one per window
// size asked for, ascending) as if req.CurDiff more were counted now; it
// counts nothing.
func (s *Service) SlidingWindow(ctx context.Context, req RateRequest, dst []Rate) ([]Rate, error) {
	r, t, err := s.target(nil, SlidingWindow, req.Namespace, req.At, req.Key, req.WindowSize)
	if err != nil {
		return dst, err
	}
	if err := checkValue("cur_diff", req.CurDiff); err != nil {
		return dst, err
	}
	if r.sy != nil {
		return r.sy.RateAt(ctx, t, req.Key, req.WindowSize, req.CurDiff, dst)
	}
	return r.ns.RateAt(t, req.Key, req.WindowSize, req.CurDiff, dst)
}

// Allow decides whether req.Cost more hits fit under every limit and, if
// so (or with CountRejected), counts them; the limits' statuses are
// appended to dst. In a synchronous namespace the store decides.
func (s *Service) Allow(ctx context.Context, req AllowRequest, dst []LimitStatus) (Decision, error) {
	return s.allow(ctx, req, nil, dst)
}

func (s *Service) allow(ctx context.Context, req AllowRequest, last *route, dst []LimitStatus) (Decision, error) {
	r, t, err := s.target(last, SlidingWindow, req.Namespace, req.At, req.Key, 0)
	if err != nil {
		return Decision{Limits: dst}, err
	}
	cost := valueOr(req.Cost, 1)
	if err := checkCost(cost); err != nil {
		return Decision{Limits: dst}, err
	}
	if err := checkLimits(r.ns, req.Limits); err != nil {
		return Decision{Limits: dst}, err
	}
	ar := node.AllowRequest{Key: req.Key, Cost: cost, Limits: req.Limits, CountRejected: req.CountRejected}
	if r.sy != nil {
		return r.sy.AllowAt(ctx, t, ar, dst)
	}
	return r.ns.AllowAt(t, ar, dst)
}

// checkCost validates an Allow's cost: a hit count that is not negative.
func checkCost(cost float64) error {
	m, err := node.ToMicro(cost)
	if err != nil {
		return renamed(err, "cost")
	}
	if m < 0 {
		return &FieldError{Field: "cost", Err: ErrInvalidValue, Reason: fmt.Sprintf("must not be negative, got %g", cost)}
	}
	return nil
}

// checkLimits validates an Allow's limits: their count, then each limit's
// window size (given, configured, not given before) and limit.
func checkLimits(ns *node.Namespace, limits []Limit) error {
	switch n := len(limits); {
	case n == 0:
		return &FieldError{Field: "limits", Err: ErrInvalidLimit, Reason: "at least one limit is required"}
	case n > MaxLimits:
		return &FieldError{Field: "limits", Err: ErrInvalidLimit, Reason: fmt.Sprintf("at most %d limits, got %d", MaxLimits, n)}
	}
	for i, l := range limits {
		if l.Size == 0 {
			return &FieldError{Field: limitField(i, "window_size"), Err: ErrInvalidLimit, Reason: "is required"}
		}
		if err := checkSize(ns, "window_size", l.Size); err != nil {
			return renamed(err, limitField(i, "window_size"))
		}
		if m, err := node.ToMicro(l.Limit); err != nil || m < 0 {
			return &FieldError{Field: limitField(i, "limit"), Err: ErrInvalidLimit,
				Reason: fmt.Sprintf("must be a finite number between 0 and %g, got %g", float64(node.MaxValue), l.Limit)}
		}
		for _, prev := range limits[:i] {
			if prev.Size == l.Size {
				return &FieldError{Field: limitField(i, "window_size"), Err: ErrInvalidLimit, Reason: fmt.Sprintf("window size %s given twice", l.Size)}
			}
		}
	}
	return nil
}

func limitField(i int, name string) string { return fmt.Sprintf("limits[%d].%s", i, name) }
