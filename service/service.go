package service

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Service serves the namespaces of one node. It is safe for concurrent
// use.
type Service struct {
	node *node.Node
	// rt is where calls go (routes.go), shared by the copies WithAuthorizer
	// and Observe make.
	rt *atomic.Pointer[routes]
	// authz, when set, authorizes every call before it is served.
	authz Authorizer
	// front is the front this copy serves, obs where it reports each
	// decision (Observe); obs is nil when none is observed.
	front Front
	obs   Observer
}

// Authorizer decides whether a call may do op in a namespace, from the
// principal in its context (auth.WithPrincipal). It must be safe for
// concurrent use. *auth.Authorizer is one.
type Authorizer interface {
	// Authorize returns nil, an error wrapping auth.ErrUnauthenticated
	// or one wrapping auth.ErrPermissionDenied.
	Authorize(ctx context.Context, namespace string, op auth.Op) error
}

// WithAuthorizer returns a Service serving the same node and syncers that
// authorizes every call with a before validating or counting anything: a
// refused call returns ErrUnauthenticated or ErrPermissionDenied and
// counts nothing. nil turns authorization off.
func (s *Service) WithAuthorizer(a Authorizer) *Service {
	c := *s
	c.authz = a
	return &c
}

// Authorize checks that ctx's caller may do op in namespace, as every
// call of the service does first: nil when authorization is off. A front
// that must refuse a caller before doing work of its own (Envoy's service
// before it matches its rules) calls it first.
func (s *Service) Authorize(ctx context.Context, namespace string, op auth.Op) error {
	return s.authorize(ctx, namespace, op)
}

// authorize checks a call of op in namespace; a nil check when
// authorization is off.
func (s *Service) authorize(ctx context.Context, namespace string, op auth.Op) error {
	if s.authz == nil {
		return nil
	}
	return s.authz.Authorize(ctx, namespace, op)
}

// New serves n's namespaces, each through the calls of its mode
// (clustersync.Calls), chosen once here: a namespace's syncer's
// (Syncer.Calls, periodic or synchronous) or, without one, the node's
// alone (clustersync.LocalCalls). Every shared namespace of n
// (node.Config.Shared) needs a syncer.
//
// The node's namespaces may change while it serves: see Reroute.
func New(n *node.Node, syncers ...*clustersync.Syncer) (*Service, error) {
	rt, err := buildRoutes(n, syncers)
	if err != nil {
		return nil, err
	}
	s := &Service{node: n, rt: new(atomic.Pointer[routes])}
	s.rt.Store(rt)
	return s, nil
}

// route is where a call goes: its namespace's destination in the routes
// table it resolved, and the slot of that table's gate it entered.
type route struct {
	*dest
	name string // the namespace as the request gave it
	slot int    // in dest.tab's gate, while the call runs (gated)
	// gated is set on a resolved route until exit.
	gated bool
}

// dest is one namespace of a routes table: the namespace and the calls
// of its mode, with its store's name when it syncs. Shared by the calls,
// never changed.
type dest struct {
	ns     *node.Namespace
	mode   Mode // Local unless a syncer is given
	calls  clustersync.Calls
	synced bool   // a syncer serves the calls
	store  string // the syncer's store
	tab    *routes
	// shadow and policies are the namespace's config, which a change
	// gives a new namespace (and so a new table).
	shadow   bool
	policies map[string]ratelimit.Policy
}

// resolve finds the namespace called name; last is the route the previous
// item of a batch took (nil for a single call), reused when it matches.
// The call runs on the route's table until it calls exit on the result,
// which it must do once it has counted (a no-op after an error).
func (s *Service) resolve(name string, last *route) (route, error) {
	for {
		rt := s.rt.Load()
		slot := rt.gate.enter()
		if s.rt.Load() != rt { // replaced meanwhile: take the new one
			rt.gate.exit(slot)
			continue
		}
		var d *dest
		if last != nil && last.dest != nil && last.tab == rt && last.name == name {
			d = last.dest
		} else {
			key := name
			if key == "" {
				key = node.DefaultNamespace
			}
			if d = rt.byName[key]; d == nil {
				rt.gate.exit(slot)
				return route{}, node.UnknownNamespace(name, len(rt.byName))
			}
			if last != nil {
				*last = route{dest: d, name: name}
			}
		}
		return route{dest: d, name: name, slot: slot, gated: true}, nil
	}
}

// target checks the start every call of the kinds ks shares, in order:
// that ctx's caller may do op in its namespace, its namespace, its time (zero: now), its key and its window size (0:
// every size, or none). It returns the call's route and time.
func (s *Service) target(ctx context.Context, op auth.Op, last *route, ks kindSet, namespace string, t time.Time, key string, size time.Duration) (route, time.Time, error) {
	if err := s.authorize(ctx, namespace, op); err != nil {
		return route{}, t, err
	}
	r, err := s.resolve(namespace, last)
	if err != nil {
		return r, t, err
	}
	if t, err = at(ks, r.ns, t); err == nil {
		if err = ratelimit.ValidateKey(key); err == nil {
			err = checkSize(r.ns, size)
		}
	}
	if err != nil {
		r.exit()
	}
	return r, t, err
}

// at validates a call's time for the kinds ks in ns, defaulting to now:
// it must be in the range of every kind.
func at(ks kindSet, ns *node.Namespace, t time.Time) (time.Time, error) {
	now := ns.Now()
	if t.IsZero() {
		return now, nil
	}
	past, future := ks.atRange(ns)
	if t.Before(now.Add(-past)) || t.After(now.Add(future)) {
		return t, &FieldError{Field: "at", Err: ErrInvalidValue,
			Reason: fmt.Sprintf("must be within [now - %s, now + %s] (now is %s), got %s",
				past, future, now.UTC().Format(time.RFC3339Nano), t.UTC().Format(time.RFC3339Nano))}
	}
	return t, nil
}

// checkSize validates a call's window size in ns; 0 passes (every size).
func checkSize(ns *node.Namespace, size time.Duration) error {
	if size < 0 {
		return &FieldError{Field: "window_size", Err: ErrInvalidWindow, Reason: fmt.Sprintf("must be positive, got %s", size)}
	}
	_, _, err := ns.SizeRange(size)
	return err
}

// checkValue validates a hit count named field.
func checkValue(field string, v float64) error {
	_, err := ratelimit.ToMicroField(field, v)
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
// dst, one per window size counted, ascending. An estimator namespace
// refuses a negative value (ErrInvalidValue on "value").
func (s *Service) Increment(ctx context.Context, req IncrementRequest, dst []Rate) ([]Rate, error) {
	return s.increment(ctx, req, nil, dst)
}

func (s *Service) increment(ctx context.Context, req IncrementRequest, last *route, dst []Rate) ([]Rate, error) {
	r, t, err := s.target(ctx, auth.Write, last, only(SlidingWindow), req.Namespace, req.At, req.Key, req.WindowSize)
	if err != nil {
		return dst, err
	}
	defer r.exit()
	value := valueOr(req.Value, 1)
	if err := checkValue("value", value); err != nil {
		return dst, err
	}
	rs, err := r.calls.IncrementAt(ctx, t, req.Key, req.WindowSize, value, engineRates(dst))
	return serviceRates(rs), err
}

// SlidingWindow appends to dst the key's sliding rates (one per window
// size asked for, ascending) as if req.CurDiff more were counted now; it
// counts nothing.
func (s *Service) SlidingWindow(ctx context.Context, req RateRequest, dst []Rate) ([]Rate, error) {
	r, t, err := s.target(ctx, auth.Read, nil, only(SlidingWindow), req.Namespace, req.At, req.Key, req.WindowSize)
	if err != nil {
		return dst, err
	}
	defer r.exit()
	// A syncing namespace's read creates state: the key joins the node's
	// table (the interest set of the next fetch) and a synchronous one's
	// store. A call that can create state is a write.
	if r.ns.Config().Shared {
		if err := s.authorize(ctx, req.Namespace, auth.Write); err != nil {
			return dst, err
		}
	}
	if err := checkValue("cur_diff", req.CurDiff); err != nil {
		return dst, err
	}
	rs, err := r.calls.RateAt(ctx, t, req.Key, req.WindowSize, req.CurDiff, engineRates(dst))
	return serviceRates(rs), err
}

// Allow decides whether req.Cost more hits fit under every limit and, if
// so (or with CountRejected), counts them; the limits' statuses are
// appended to dst. In a synchronous namespace the store decides; in a
// periodic one that escalates, the store decides near a limit.
//
// Limits may be sliding windows and buckets together: the cost is
// admitted in all or in none. Buckets cannot be served (ErrFailedPrecondition,
// after every other check) by an estimator namespace, by a namespace whose
// store cannot hold them, nor together with windows in a synchronous
// namespace. When the request is
// refused only by leaky buckets whose waits fit their WaitTimeout
// (Decision.Wait), Allow waits on the namespace clock, holding no lock,
// and decides once more; it returns ctx's error if ctx ends first.
//
// req.Policy names one of the namespace's policies instead of listing
// limits: its limits are checked as if listed (ErrUnknownPolicy on
// "policy" when the namespace holds none of that name). In shadow mode
// (the namespace's or the policy's) the call is a dry run: decided and
// counted as it would be, then admitted (Decision.DryRun, WouldAllow),
// without waiting for a leaky bucket.
func (s *Service) Allow(ctx context.Context, req AllowRequest, dst []LimitStatus) (Decision, error) {
	return s.allow(ctx, req, nil, dst)
}

func (s *Service) allow(ctx context.Context, req AllowRequest, last *route, dst []LimitStatus) (Decision, error) {
	// Every Allow is a write, one of cost 0 too: it counts nothing, but it
	// makes the key's windows or buckets (and, in a syncing namespace,
	// its store rows), so a token granted only reading could fill the
	// namespace up to its key cap and refuse every writer's new key.
	var (
		ks     kindSet
		limits []ratelimit.Limit
		shadow bool
		r      route
		t      time.Time
		err    error
	)
	if req.Policy == "" || len(req.Limits) > 0 {
		limits = engineLimits(req.Limits)
		ks = limitKinds(req.Limits)
		r, t, err = s.target(ctx, auth.Write, last, ks, req.Namespace, req.At, req.Key, 0)
	} else {
		r, t, limits, shadow, err = s.policyTarget(ctx, last, req)
		ks = engineKinds(limits)
	}
	if err != nil {
		return Decision{Limits: dst}, err
	}
	defer r.exit()
	shadow = shadow || r.shadow
	if req.Policy != "" && len(req.Limits) > 0 {
		return Decision{Limits: dst}, &FieldError{Field: "policy", Err: ErrInvalidLimit,
			Reason: fmt.Sprintf("give a policy or limits, not both (policy %q with %d limits)", req.Policy, len(req.Limits))}
	}
	// The cost and the limits: node's rules, checked here so that they
	// come after the namespace, time and key in every mode; then whether
	// the mode serves the limits' kinds. A local namespace's AllowAt is
	// the node's, which checks them first with the same errors.
	ar := ratelimit.AllowRequest{Key: req.Key, Cost: valueOr(req.Cost, 1), Limits: limits, CountRejected: req.CountRejected, Live: req.At.IsZero()}
	if r.synced {
		if _, err := r.ns.CheckAllow(ar); err != nil {
			return Decision{Limits: dst}, err
		}
	}
	d, err := r.calls.AllowAt(ctx, t, ar, engineStatuses(dst))
	// A dry run answers at once: it does not wait for a leaky bucket to
	// drain, and reports the refusal it would have waited on.
	if err == nil && d.Wait > 0 && !shadow {
		if err := r.ns.Sleep(ctx, d.Wait); err != nil {
			return Decision{Limits: dst}, err
		}
		if req.At.IsZero() {
			t = r.ns.Now()
		} else {
			t = t.Add(d.Wait)
		}
		d, err = r.calls.AllowAt(ctx, t, ar, engineStatuses(dst))
	}
	if err == nil && s.obs != nil && !req.Probe {
		s.obs.Decided(Observed{Front: s.front, Namespace: r.ns.Name(), Kind: ks.one(), Allowed: d.Allowed, Never: d.Never, Cost: ar.Cost, DryRun: shadow})
	}
	sd := serviceDecision(d)
	if sd.At.IsZero() {
		sd.At = t
	}
	if shadow && err == nil {
		sd.DryRun, sd.Allowed, sd.Wait = true, true, 0
	}
	return sd, err
}

// policyTarget is target for an Allow that names a policy: after the
// caller's authorization and the namespace, the policy (an unknown one
// is ErrUnknownPolicy on "policy"), then the time in the range of its
// limits' kinds and the key. It returns the policy's limits and whether
// it is in shadow mode.
func (s *Service) policyTarget(ctx context.Context, last *route, req AllowRequest) (route, time.Time, []ratelimit.Limit, bool, error) {
	if err := s.authorize(ctx, req.Namespace, auth.Write); err != nil {
		return route{}, req.At, nil, false, err
	}
	r, err := s.resolve(req.Namespace, last)
	if err != nil {
		return r, req.At, nil, false, err
	}
	p, ok := r.policies[req.Policy]
	if !ok {
		r.exit()
		return route{}, req.At, nil, false, &FieldError{Field: "policy", Err: ErrUnknownPolicy,
			Reason: fmt.Sprintf("policy %q is not defined in namespace %q", req.Policy, r.ns.Name())}
	}
	t, err := s.checkAllowStart(r, engineKinds(p.Limits), req)
	return r, t, p.Limits, p.Shadow, err
}

// checkAllowStart checks an Allow's time for the kinds ks and its key in
// r's namespace, leaving r on success.
func (s *Service) checkAllowStart(r route, ks kindSet, req AllowRequest) (time.Time, error) {
	t, err := at(ks, r.ns, req.At)
	if err == nil {
		err = ratelimit.ValidateKey(req.Key)
	}
	if err != nil {
		r.exit()
	}
	return t, err
}
