package service

import (
	"context"
	"time"

	"github.com/limiterd/limiterd/auth"
)

// ResetRequest forgets one key's sliding-window counts in a namespace.
type ResetRequest struct {
	// Namespace; empty means "default".
	Namespace string
	// Key is non-empty UTF-8 of at most 1 KiB.
	Key string
}

// Reset forgets req.Key's sliding-window counts in every window size of
// its namespace: the windows that still count read 0 after it, on this
// node at once and, in a syncing namespace, in the store, so that every
// node forgets them at its next fetch (see the package sync's ResetAt).
// It appends to dst the key's rates after the reset, one per window size.
// It needs the admin grant (ErrPermissionDenied without it). An estimator
// namespace cannot forget one key (ErrFailedPrecondition); a store that
// cannot be reached is ErrUnavailable, and the reset, taken again, is
// harmless.
func (s *Service) Reset(ctx context.Context, req ResetRequest, dst []Rate) ([]Rate, error) {
	r, t, err := s.target(ctx, auth.Admin, nil, only(SlidingWindow), req.Namespace, time.Time{}, req.Key, 0)
	if err != nil {
		return dst, err
	}
	defer r.exit()
	if r.cl != nil {
		err = r.cl.ResetAt(ctx, t, req.Key)
	} else {
		_, err = r.ns.ResetKeyAt(t, req.Key, nil)
	}
	if err != nil {
		return dst, err
	}
	rs, err := r.ns.RateAt(t, req.Key, 0, 0, engineRates(dst))
	return serviceRates(rs), err
}
