package service

import (
	"context"
	"time"

	"github.com/limiterd/limiterd/auth"
)

// ResetRequest forgets one key's counts in a namespace: its sliding-window
// counts when it names neither buckets nor leases; else only the buckets
// it names and, with Leases, its leases.
type ResetRequest struct {
	// Namespace; empty means "default".
	Namespace string
	// Key is non-empty UTF-8 of at most 1 KiB.
	Key string
	// Buckets are the key's buckets to start again as new ones: token,
	// leaky or fixed limits as Allow takes them (WaitTimeout and Strict
	// aside), at most MaxLimits, none twice.
	Buckets []Limit
	// Leases frees every concurrency lease of the key.
	Leases bool
}

// Reset forgets req.Key's counts in its namespace, on this node at once
// and, in a syncing namespace, in the store, so that every node forgets
// them at its next sync:
//
//   - with neither Buckets nor Leases, its sliding-window counts in every
//     window size: the windows that still count read 0 after it (see the
//     package sync's ResetAt); it appends to dst the key's rates after
//     the reset, one per window size;
//   - each bucket of Buckets starts again as a new bucket (a token bucket
//     full, a leaky one empty, a fixed one with nothing counted in its
//     period; sync's ResetBucketsAt);
//   - with Leases, every lease of the key is freed (sync's ClearLeasesAt).
//
// It needs the admin grant (ErrPermissionDenied without it). An estimator
// namespace cannot forget one key (ErrFailedPrecondition); a sliding
// window among Buckets is an ErrInvalidLimit on buckets[i]; a store that
// cannot hold buckets or leases is ErrFailedPrecondition; a store that
// cannot be reached is ErrUnavailable, and the reset, taken again, is
// harmless.
func (s *Service) Reset(ctx context.Context, req ResetRequest, dst []Rate) ([]Rate, error) {
	windows := len(req.Buckets) == 0 && !req.Leases
	ks := kindSet(0)
	if windows {
		ks = only(SlidingWindow)
	} else if len(req.Buckets) > 0 {
		ks = limitKinds(req.Buckets)
	}
	r, t, err := s.target(ctx, auth.Admin, nil, ks, req.Namespace, time.Time{}, req.Key, 0)
	if err != nil {
		return dst, err
	}
	defer r.exit()
	if windows {
		if err := r.calls.ResetAt(ctx, t, req.Key); err != nil {
			return dst, err
		}
		rs, err := r.ns.RateAt(t, req.Key, 0, 0, engineRates(dst))
		return serviceRates(rs), err
	}
	limits := engineLimits(req.Buckets)
	if err := r.ns.CheckResetBuckets(limits); err != nil {
		return dst, err
	}
	if len(limits) > 0 {
		if err := r.calls.ResetBucketsAt(ctx, t, req.Key, limits); err != nil {
			return dst, err
		}
	}
	if req.Leases {
		if _, err := r.calls.ClearLeasesAt(ctx, t, req.Key); err != nil {
			return dst, leaseErr(r, err)
		}
	}
	return dst, nil
}
