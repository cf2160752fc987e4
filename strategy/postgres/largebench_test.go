//go:build largebench

package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	"github.com/limiterd/limiterd/strategy/strategytest"
)

// BenchmarkIdleKeysTick measures a periodic tick of one node holding n
// active keys (one 1-minute window size, sync_rate 0.1) of which 10 000
// change per tick: 5 000 counted by this node, 5 000 by another
// incarnation (pushed to the store between ticks). It reports the tick's
// wall time, the CPU per tick of the store's backends (/proc) and of this
// process. Run it alone (go test -tags largebench): a million keys take
// minutes to set up.
func BenchmarkIdleKeysTick(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			dsn := harness.SharedPostgres(b).DSN() // a fresh database
			s := openStore(b, testConfig(dsn, pgstore.DefaultTable))
			strategytest.BenchIdleKeysTick(b, s, n, func() time.Duration {
				var sum time.Duration
				for _, pid := range backendPIDs(b, dsn) {
					if d, ok := procCPU(pid); ok {
						sum += d
					}
				}
				return sum
			})
		})
	}
}
