package redis

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// RedisKey returns the Redis key of the hash holding window k under prefix.
func RedisKey(prefix string, k clustersync.WindowKey) string {
	return redisKey(escapePrefix(prefix), &k)
}

// SumField and RowField return the fields of window k's sum and of
// incarnation inc's row in that hash.
func SumField(k clustersync.WindowKey) string { return sumPrefix + k.Key }

func RowField(inc string, k clustersync.WindowKey) string { return rowPrefix(inc) + k.Key }

// BucketsKey returns the Redis key of bucket b's hash in namespace ns
// under prefix.
func BucketsKey(prefix, ns string, b ratelimit.BucketSpec) string {
	return bucketsKey(escapePrefix(prefix), ns, &b)
}

// LeaseKeys returns the Redis keys of the lease set and index of
// (ns, key) under prefix.
func LeaseKeys(prefix, ns, key string) [2]string {
	return leaseKeys(escapePrefix(prefix), ns, key)
}

// TrimChanges empties the change logs of namespace as trimming would
// after a minute: every cursor issued before reads as lost
// (strategytest.ChangeTrimmer).
func (s *Store) TrimChanges(ctx context.Context, namespace string) error {
	const trim = `local n = redis.call('ZSCORE', KEYS[1], '!n')
if n then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, '+inf')
  redis.call('ZADD', KEYS[1], 'LT', n, '!t')
end
return 0`
	for b := range buckets {
		log := string(appendLogBase(nil, s.prefix, namespace, b)) + "c"
		cmd := redis.NewCmd(ctx, "eval", trim, 1, log)
		if err := s.c.Process(ctx, cmd); err != nil {
			return err
		}
	}
	return nil
}
