package sync_test

import (
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestNewSyncerRefusesWhatDoesNotSync: a syncer is for a shared
// namespace in a syncing mode with a period in bounds; anything else is
// refused, naming the namespace and the reason.
func TestNewSyncerRefusesWhatDoesNotSync(t *testing.T) {
	shared, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Second}, Shared: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := node.NewNamespace(node.Config{Name: "alone", WindowSizes: []time.Duration{time.Second}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ns   *node.Namespace
		mode clustersync.Mode
		err  string // "": accepted
	}{
		{shared, clustersync.Periodic{Period: time.Millisecond}, ""},
		{shared, clustersync.Periodic{Period: 24 * time.Hour}, ""},
		{shared, clustersync.Synchronous{}, ""},
		{shared, clustersync.Local{}, `namespace "api": mode local does not sync`},
		{shared, nil, `namespace "api": mode <nil> does not sync`},
		{shared, clustersync.Periodic{}, `namespace "api": period 0s out of [1ms, 24h0m0s]`},
		{shared, clustersync.Periodic{Period: 25 * time.Hour}, `period 25h0m0s out of`},
		{alone, clustersync.Periodic{Period: time.Second}, `namespace "alone" does not keep its changes for a sync`},
	} {
		_, err := clustersync.NewSyncer(tc.ns, tc.mode, memory.New(), "inc", clustersync.NewVersions(time.Now), clustersync.Config{}, nil, nil)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s in mode %v: %v, want %q", tc.ns.Name(), tc.mode, err, tc.err)
		}
	}
}
