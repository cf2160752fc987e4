//go:build largebench

package redis_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redisstore "github.com/limiterd/limiterd/strategy/redis"
	"github.com/limiterd/limiterd/strategy/strategytest"
)

// BenchmarkIdleKeysTick measures a periodic tick of one node holding n
// active keys (one 1-minute window size, sync_rate 0.1) of which 10 000
// change per tick: 5 000 counted by this node, 5 000 by another
// incarnation (pushed to the store between ticks). It reports the tick's
// wall time, the server's CPU per tick (INFO cpu, main thread) and this
// process's CPU per tick. Run it alone (go test -tags largebench), on a
// Redis of its own: a million keys take minutes to set up.
func BenchmarkIdleKeysTick(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			c := redis.NewClient(&redis.Options{Addr: redisAddr(b), ContextTimeoutEnabled: true})
			b.Cleanup(func() { _ = c.Close() })
			s := redisstore.New(c, newPrefix())
			strategytest.BenchIdleKeysTick(b, s, n, func() time.Duration { return serverCPU(b, c) })
		})
	}
}
