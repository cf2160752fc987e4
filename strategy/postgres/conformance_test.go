package postgres_test

import (
	"testing"

	"github.com/limiterd/limiterd/integration/harness"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	"github.com/limiterd/limiterd/strategy/strategytest"
	clustersync "github.com/limiterd/limiterd/sync"
)

var (
	_ strategytest.Purger      = (*pgstore.Store)(nil)
	_ clustersync.ChangeReader = (*pgstore.Store)(nil)
)

// TestConformance runs the suite every store must pass, on one table of
// one database (each subtest writes its own namespace).
func TestConformance(t *testing.T) {
	cfg := pgdb{dsn: harness.SharedPostgres(t).DSN()}.config()
	strategytest.Run(t, func(t *testing.T) clustersync.Store {
		return openStore(t, cfg)
	})
}
