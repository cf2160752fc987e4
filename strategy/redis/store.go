package redis

import (
	"context"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	clustersync "github.com/limiterd/limiterd/sync"
)

// Client is the part of a go-redis client the Store uses: *redis.Client
// (standalone or Sentinel-managed), *redis.ClusterClient and *redis.Ring
// all satisfy it. The Store sends only EVALSHA, EVAL, HMGET and HGET, each
// routed by its (first) key; a synchronous call is one command, sent
// without a pipeline's overhead.
type Client interface {
	Pipeline() redis.Pipeliner
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Store is a clustersync.Store on Redis: standalone, Sentinel or Cluster.
// It also implements clustersync.PushFetcher, clustersync.GroupAllower,
// clustersync.BucketStore and clustersync.LeaseStore.
// It is safe for concurrent use.
//
// Rows are grouped by the hash that holds them (one per window and bucket,
// see keys.go). On a single server (the Client is a *redis.Client) one
// push script call covers up to keysPerScript rows of any hashes; on a
// cluster or ring it covers rows of hashes of one hash tag.
type Store struct {
	c      Client
	closer io.Closer // the client Open made; nil after New
	prefix string
	single bool
	closed atomic.Bool
	// rp caches the row prefix of the last incarnation asked for (a node
	// has one), sparing a synchronous call the allocation.
	rp atomic.Pointer[[2]string]
}

// rowPrefix returns rowPrefix(inc), cached.
func (s *Store) rowPrefix(inc string) string {
	if p := s.rp.Load(); p != nil && p[0] == inc {
		return p[1]
	}
	rp := rowPrefix(inc)
	s.rp.Store(&[2]string{inc, rp})
	return rp
}

// New returns a Store using c, with every Redis key starting with
// keyPrefix (DefaultKeyPrefix when empty; braces are escaped so they
// cannot break the hash tag). Close does not close c: the caller owns it.
//
// The Store honours ctx deadlines only if c does: build c with
// ContextTimeoutEnabled set, as Open does.
func New(c Client, keyPrefix string) *Store {
	if keyPrefix == "" {
		keyPrefix = DefaultKeyPrefix
	}
	_, single := c.(*redis.Client)
	return &Store{c: c, prefix: escapePrefix(keyPrefix), single: single}
}

// Abilities are what a Redis store can do: every ability, each decision
// in one Lua script.
const Abilities = clustersync.PushFetch | clustersync.Decide | clustersync.Buckets | clustersync.Leases | clustersync.Changes | clustersync.Window

// Abilities returns the package's Abilities.
func (s *Store) Abilities() clustersync.Abilities { return Abilities }

// Close marks the store closed, so every later call returns
// clustersync.ErrClosed, and closes the client if Open made it.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return fmt.Errorf("redis: close: %w", clustersync.ErrClosed)
	}
	if s.closer != nil {
		if err := s.closer.Close(); err != nil {
			return fmt.Errorf("redis: close: %w", err)
		}
	}
	return nil
}
