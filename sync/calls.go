package sync

import (
	"context"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// Calls serves the calls of one namespace in its mode, as the service
// makes them: LocalCalls (the node alone), or a Syncer's Calls, periodic
// (the node, its tick, escalation near a limit; periodic.go,
// escalate.go, learn.go) or synchronous (write-through with group commit;
// direct.go, group.go). The arguments are checked as node.Namespace's
// methods of the same names check them; a store that cannot serve a call
// returns an error wrapping node.ErrNotLocal (ErrNoLeaseStore for
// leases).
type Calls interface {
	// IncrementAt counts value for key at t and appends the rates after
	// counting to dst (node.Namespace.IncrementAt).
	IncrementAt(ctx context.Context, t time.Time, key string, size time.Duration, value float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error)
	// RateAt appends key's rates at t as if curDiff more were counted
	// (node.Namespace.RateAt).
	RateAt(ctx context.Context, t time.Time, key string, size time.Duration, curDiff float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error)
	// AllowAt decides req at t (node.Namespace.AllowAt).
	AllowAt(ctx context.Context, t time.Time, req ratelimit.AllowRequest, dst []ratelimit.LimitStatus) (ratelimit.Decision, error)
	// AcquireLease takes a lease of key at now (node.Leases.Acquire);
	// limit and ttl are valid.
	AcquireLease(ctx context.Context, now time.Time, key string, limit int64, ttl time.Duration) (ratelimit.LeaseGrant, error)
	// ReleaseLease ends the lease id at now; pending is set when the
	// release waits for the store.
	ReleaseLease(ctx context.Context, now time.Time, id ratelimit.LeaseID) (ok, pending bool, err error)
	// RenewLease extends the lease id to now + ttl.
	RenewLease(ctx context.Context, now time.Time, id ratelimit.LeaseID, ttl time.Duration) (ok bool, expiry int64, err error)
	// ResetAt forgets key's sliding-window counts at t.
	ResetAt(ctx context.Context, t time.Time, key string) error
	// ResetBucketsAt puts key's buckets of limits back at rest at t.
	ResetBucketsAt(ctx context.Context, t time.Time, key string, limits []ratelimit.Limit) error
	// ClearLeasesAt ends every lease of key at t, reporting whether any
	// was held.
	ClearLeasesAt(ctx context.Context, t time.Time, key string) (bool, error)
}

// LocalCalls serves ns's calls from the node alone: a local namespace's.
func LocalCalls(ns *node.Namespace) Calls { return local{ns} }

// local is a local namespace's Calls.
type local struct{ ns *node.Namespace }

func (l local) IncrementAt(_ context.Context, t time.Time, key string, size time.Duration, value float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	return l.ns.IncrementAt(t, key, size, value, dst)
}

func (l local) RateAt(_ context.Context, t time.Time, key string, size time.Duration, curDiff float64, dst []ratelimit.Rate) ([]ratelimit.Rate, error) {
	return l.ns.RateAt(t, key, size, curDiff, dst)
}

func (l local) AllowAt(_ context.Context, t time.Time, req ratelimit.AllowRequest, dst []ratelimit.LimitStatus) (ratelimit.Decision, error) {
	return l.ns.AllowAt(t, req, dst)
}

func (l local) AcquireLease(_ context.Context, now time.Time, key string, limit int64, ttl time.Duration) (ratelimit.LeaseGrant, error) {
	return l.ns.Leases().Acquire(now, key, limit, ttl)
}

func (l local) ReleaseLease(_ context.Context, now time.Time, id ratelimit.LeaseID) (bool, bool, error) {
	ok, err := l.ns.Leases().Release(now, id, false)
	return ok, false, err
}

func (l local) RenewLease(_ context.Context, now time.Time, id ratelimit.LeaseID, ttl time.Duration) (bool, int64, error) {
	return l.ns.Leases().Renew(now, id, ttl)
}

func (l local) ResetAt(_ context.Context, t time.Time, key string) error {
	_, err := l.ns.ResetKeyAt(t, key, nil)
	return err
}

func (l local) ResetBucketsAt(_ context.Context, t time.Time, key string, limits []ratelimit.Limit) error {
	return l.ns.ResetBucketsAt(t, key, limits)
}

func (l local) ClearLeasesAt(_ context.Context, t time.Time, key string) (bool, error) {
	return l.ns.Leases().Clear(t, key, false) > 0, nil
}

// shared are the calls a periodic and a synchronous namespace serve
// alike, each branching on its mode where the store's part differs:
// leases (leasesync.go) and resets (reset.go).
type shared struct{ s *Syncer }

func (c shared) AcquireLease(ctx context.Context, now time.Time, key string, limit int64, ttl time.Duration) (ratelimit.LeaseGrant, error) {
	return leaseSync{c.s}.acquire(ctx, now, key, limit, ttl)
}

func (c shared) ReleaseLease(ctx context.Context, now time.Time, id ratelimit.LeaseID) (bool, bool, error) {
	return leaseSync{c.s}.release(ctx, now, id)
}

func (c shared) RenewLease(ctx context.Context, now time.Time, id ratelimit.LeaseID, ttl time.Duration) (bool, int64, error) {
	return leaseSync{c.s}.renew(ctx, now, id, ttl)
}

func (c shared) ResetAt(ctx context.Context, t time.Time, key string) error {
	return resets{c.s}.key(ctx, t, key)
}

func (c shared) ResetBucketsAt(ctx context.Context, t time.Time, key string, limits []ratelimit.Limit) error {
	return resets{c.s}.buckets(ctx, t, key, limits)
}

func (c shared) ClearLeasesAt(ctx context.Context, t time.Time, key string) (bool, error) {
	return resets{c.s}.leases(ctx, t, key)
}
