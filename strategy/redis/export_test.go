package redis

import clustersync "github.com/limiterd/limiterd/sync"

// RedisKey returns the Redis key of window k under prefix.
func RedisKey(prefix string, k clustersync.WindowKey) string {
	return string(appendKey(nil, escapePrefix(prefix), keyTag(k.Namespace, k.Key), &k))
}
