package redis

import (
	"context"
	"fmt"

	clustersync "github.com/limiterd/limiterd/sync"
)

// Allow decides req in one script call over the current and previous
// window of every limit, exactly as clustersync.AtomicAllower specifies.
// All rows of req must be windows of one (namespace, key): on a cluster
// they then share a hash slot.
func (s *Store) Allow(ctx context.Context, req clustersync.AllowRequest) (clustersync.AllowResult, error) {
	if s.closed.Load() {
		return clustersync.AllowResult{}, fmt.Errorf("redis: allow: %w", clustersync.ErrClosed)
	}
	if len(req.Limits) == 0 {
		return clustersync.AllowResult{Allowed: true}, nil
	}
	call := encodeAllow(s.prefix, s.rowPrefix(req.Inc), &req)
	reply, err := allowScript.Run(ctx, scripter{s.c}, call.keys, call.args...).Int64Slice()
	if err != nil {
		return clustersync.AllowResult{}, s.fail("allow", err)
	}
	res, err := decodeAllow(reply, len(req.Limits))
	if err != nil {
		return clustersync.AllowResult{}, fmt.Errorf("redis: allow: %w", err)
	}
	return res, nil
}
