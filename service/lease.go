package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// AcquireRequest asks for one of at most Limit concurrent leases of Key.
type AcquireRequest struct {
	// Namespace; empty means "default".
	Namespace string
	// Key is non-empty UTF-8 of at most 1 KiB.
	Key string
	// Limit is the most leases of Key held at once, at least 1.
	Limit int64
	// TTL is how long the lease lives unless released or renewed:
	// positive and at most the namespace's MaxLeaseTTL.
	TTL time.Duration
}

// Acquired is the answer to an Acquire.
type Acquired struct {
	// OK reports whether a lease was granted: then Lease is its id, for
	// Release and Renew at any node, and ExpiresAt its expiry.
	OK        bool
	Lease     string
	ExpiresAt time.Time
	// Held is the leases of the key held after the call, as this node
	// knows them (exact in a synchronous namespace).
	Held int64
	// RetryAfter, when refused, is how long until the earliest held lease
	// expires (0: unknown).
	RetryAfter time.Duration
}

// Released is the answer to a Release.
type Released struct {
	// OK reports whether the lease was held until this call; false for a
	// lease unknown, expired or already released, which is harmless.
	OK bool
	// Pending: the store could not be reached; the release is retried
	// until the lease would have expired.
	Pending bool
}

// Renewed is the answer to a Renew.
type Renewed struct {
	// OK reports whether the lease was live and now expires at ExpiresAt.
	OK        bool
	ExpiresAt time.Time
}

// Acquire takes a lease of a concurrency limit, or refuses it with the
// leases held and a retry hint. In a synchronous namespace the store
// decides (exact across nodes); a store that cannot be reached refuses
// the call with ErrUnavailable unless the namespace's OnStoreDown is
// "local". A periodic namespace decides from its own leases and the
// others' as of its last sync.
func (s *Service) Acquire(ctx context.Context, req AcquireRequest) (Acquired, error) {
	return s.acquire(ctx, req, nil)
}

// Release frees a lease granted by any node (a local-only namespace's
// only at the node that granted it: ErrFailedPrecondition elsewhere). A
// malformed lease is an ErrInvalidLease on "lease".
func (s *Service) Release(ctx context.Context, lease string) (Released, error) {
	return s.release(ctx, lease, nil)
}

// Renew sets a live lease to expire ttl from now.
func (s *Service) Renew(ctx context.Context, lease string, ttl time.Duration) (Renewed, error) {
	return s.renew(ctx, lease, ttl, nil)
}

// Acquire is Service.Acquire for one item.
func (b *Batch) Acquire(ctx context.Context, req AcquireRequest) (Acquired, error) {
	return b.s.acquire(ctx, req, &b.last)
}

// Release is Service.Release for one item.
func (b *Batch) Release(ctx context.Context, lease string) (Released, error) {
	return b.s.release(ctx, lease, &b.last)
}

// Renew is Service.Renew for one item.
func (b *Batch) Renew(ctx context.Context, lease string, ttl time.Duration) (Renewed, error) {
	return b.s.renew(ctx, lease, ttl, &b.last)
}

// checkLeaseTTL validates a lease's TTL in ns.
func checkLeaseTTL(ns *node.Namespace, ttl time.Duration) error {
	if m := ns.Config().MaxLeaseTTL; ttl <= 0 || ttl > m {
		return &FieldError{Field: "ttl", Err: ErrInvalidValue,
			Reason: fmt.Sprintf("must be positive and at most the namespace's max_lease_ttl %s, got %s", m, ttl)}
	}
	return nil
}

// leaseErr turns the syncer's errors into the service's: a store that
// cannot hold leases is a failed precondition on the namespace.
func leaseErr(r route, err error) error {
	if errors.Is(err, clustersync.ErrNoLeaseStore) {
		return &FieldError{Field: "namespace", Err: ErrFailedPrecondition,
			Reason: fmt.Sprintf("namespace %q: its store %q cannot hold concurrency leases", r.name, r.store)}
	}
	return err
}

func (s *Service) acquire(ctx context.Context, req AcquireRequest, last *route) (Acquired, error) {
	if err := s.authorize(ctx, req.Namespace, auth.Write); err != nil {
		return Acquired{}, err
	}
	r, err := s.resolve(req.Namespace, last)
	if err != nil {
		return Acquired{}, err
	}
	defer r.exit()
	if err := ratelimit.ValidateKey(req.Key); err != nil {
		return Acquired{}, err
	}
	if req.Limit < 1 {
		return Acquired{}, &FieldError{Field: "limit", Err: ErrInvalidLimit, Reason: fmt.Sprintf("must be at least 1, got %d", req.Limit)}
	}
	if err := checkLeaseTTL(r.ns, req.TTL); err != nil {
		return Acquired{}, err
	}
	now := r.ns.Now()
	g, err := r.calls.AcquireLease(ctx, now, req.Key, req.Limit, req.TTL)
	if err != nil {
		return Acquired{}, leaseErr(r, err)
	}
	if s.obs != nil {
		s.obs.Decided(Observed{Front: s.front, Namespace: r.ns.Name(), Kind: ConcurrencyKind, Allowed: g.OK, Cost: 1})
	}
	a := Acquired{OK: g.OK, Held: g.Held}
	if g.OK {
		a.Lease, a.ExpiresAt = g.ID.String(), time.Unix(0, g.Expiry)
	} else if g.Next > now.UnixNano() {
		a.RetryAfter = time.Duration(g.Next - now.UnixNano())
	}
	return a, nil
}

// lease parses a lease, checks that ctx's caller may write in its
// namespace and resolves it. A caller without credentials learns nothing
// of the lease, not even whether it is well formed.
func (s *Service) lease(ctx context.Context, lease string, last *route) (route, ratelimit.LeaseID, error) {
	id, err := ratelimit.ParseLeaseID(lease)
	if err != nil {
		if aerr := s.authorize(ctx, "", 0); errors.Is(aerr, ErrUnauthenticated) {
			return route{}, id, aerr
		}
		return route{}, id, err
	}
	if err := s.authorize(ctx, id.Namespace, auth.Write); err != nil {
		return route{}, id, err
	}
	r, err := s.resolve(id.Namespace, last)
	return r, id, err
}

func (s *Service) release(ctx context.Context, lease string, last *route) (Released, error) {
	r, id, err := s.lease(ctx, lease, last)
	if err != nil {
		return Released{}, err
	}
	defer r.exit()
	now := r.ns.Now()
	var rel Released
	rel.OK, rel.Pending, err = r.calls.ReleaseLease(ctx, now, id)
	return rel, leaseErr(r, err)
}

func (s *Service) renew(ctx context.Context, lease string, ttl time.Duration, last *route) (Renewed, error) {
	r, id, err := s.lease(ctx, lease, last)
	if err != nil {
		return Renewed{}, err
	}
	defer r.exit()
	if err := checkLeaseTTL(r.ns, ttl); err != nil {
		return Renewed{}, err
	}
	now := r.ns.Now()
	ok, exp, err := r.calls.RenewLease(ctx, now, id, ttl)
	if err != nil || !ok {
		return Renewed{}, leaseErr(r, err)
	}
	return Renewed{OK: true, ExpiresAt: time.Unix(0, exp)}, nil
}
