//go:build integration

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
)

// cassandraStore is a store config on its own keyspace, so tests sharing
// one server stay apart.
func cassandraStore(c *harness.Cassandra, keyspace string) string {
	return fmt.Sprintf(`{type: cassandra, hosts: ["%s"], port: %d, keyspace: %s, connect_timeout: 5s, timeout: 2s}`,
		c.Host(), c.Port(), keyspace)
}

func openCassandra(t *testing.T, c *harness.Cassandra, keyspace string) *cassandrastore.Store {
	t.Helper()
	cfg := cassandrastore.DefaultConfig()
	cfg.Hosts, cfg.Port, cfg.Keyspace = []string{c.Host()}, c.Port(), keyspace
	st, err := cassandrastore.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func keyspace(prefix string) string {
	return strings.ToLower(harness.UniqueName(prefix))
}

func TestCassandraClusterConverges(t *testing.T) {
	c := harness.SharedCassandra(t)
	nodes := harness.Cluster(t, 3, clusterConfig(cassandraStore(c, keyspace("conv")), 0.1))
	checkConverges(t, nodes, 100*time.Millisecond)
}

// TestCassandraOutage kills Cassandra (SIGKILL) under load and restarts it.
func TestCassandraOutage(t *testing.T) {
	c := harness.StartCassandra(t)
	ks := keyspace("outage")
	nodes := harness.Cluster(t, 3, clusterConfig(cassandraStore(c, ks), 0.1))
	checkOutage(t, nodes, c.Kill, c.Start, openCassandra(t, c, ks))
}
