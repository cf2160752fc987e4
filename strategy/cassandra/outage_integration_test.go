//go:build integration

package cassandra_test

import (
	"os"
	"testing"

	"github.com/limiterd/limiterd/integration/harness"
)

// TestOutagePrivateServer runs the outage test (kill and restart) on a
// private server when the other tests use a shared one, which must not be
// killed. Without LIMITERD_TEST_CASSANDRA, TestStore/Outage already runs
// it on the server TestStore started.
func TestOutagePrivateServer(t *testing.T) {
	if os.Getenv(harness.EnvCassandra) == "" {
		t.Skip("TestStore/Outage runs this on its private server")
	}
	c := harness.StartCassandra(t)
	testOutage(t, c, newEnv(t, c))
}
