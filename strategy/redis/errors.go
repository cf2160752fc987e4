package redis

import (
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	clustersync "github.com/limiterd/limiterd/sync"
)

// fail wraps err from operation op: clustersync.ErrClosed once the client
// is closed; a reply error of the server that retrying cannot cure (a
// script or type error, refused credentials) as is; anything else — no
// connection, a timeout, ctx done, a server loading, failing over or out
// of memory — with clustersync.ErrUnavailable.
func (s *Store) fail(op string, err error) error {
	if errors.Is(err, redis.ErrClosed) || s.closed.Load() {
		return fmt.Errorf("redis: %s: %w: %w", op, clustersync.ErrClosed, err)
	}
	var re redis.Error
	if errors.As(err, &re) && !transient(err) {
		return fmt.Errorf("redis: %s: %w", op, err)
	}
	return fmt.Errorf("redis: %s: %w: %w", op, clustersync.ErrUnavailable, err)
}

// transient reports whether a server reply error is one a later retry may
// not see: the server is loading, failing over, busy, out of memory or
// out of connections, lost the script, or the cluster is reconfiguring.
func transient(err error) bool {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask ||
		redis.IsLoadingError(err) || redis.IsReadOnlyError(err) ||
		redis.IsClusterDownError(err) || redis.IsTryAgainError(err) ||
		redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsOOMError(err) ||
		// go-redis has no typed errors for these.
		redis.HasErrorPrefix(err, "BUSY") || redis.HasErrorPrefix(err, "NOREPLICAS") ||
		redis.HasErrorPrefix(err, "NOSCRIPT")
}
