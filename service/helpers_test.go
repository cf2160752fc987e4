package service_test

import (
	"github.com/limiterd/limiterd/internal/config"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// now is the fake clock's time in these tests: 30 s into a minute.
var now = time.Unix(1_700_000_040, 0).UTC().Add(30 * time.Second)

// The sync_rate of each mode.
var modes = []struct {
	name     string
	syncRate float64
}{
	{"local", -1},
	{"periodic", 0.1},
	{"synchronous", 0},
}

// newService serves one namespace, "default", with windows of 1 s and
// 1 min in the mode of syncRate, over the in-memory store when it syncs.
// It returns the service and its namespace.
func newService(tb testing.TB, syncRate float64) (*service.Service, *node.Namespace) {
	tb.Helper()
	return newServiceOn(tb, syncRate, nil)
}

// newServiceOn is newService syncing through store (nil: a new in-memory
// store).
func newServiceOn(tb testing.TB, syncRate float64, store clustersync.Store) (*service.Service, *node.Namespace) {
	tb.Helper()
	clock := fakeclock.New(now)
	mode := modeOf(tb, syncRate)
	cfg := node.Config{Name: "default", WindowSizes: []time.Duration{time.Second, time.Minute}, Shared: shared(mode)}
	n, err := node.New([]node.Config{cfg}, clock)
	if err != nil {
		tb.Fatal(err)
	}
	ns, err := n.Namespace("")
	if err != nil {
		tb.Fatal(err)
	}
	var syncers []*clustersync.Syncer
	if shared(mode) {
		if store == nil {
			store = memory.New(memory.WithClock(clock.Now))
		}
		sy, err := clustersync.NewSyncer(ns, mode, store, clustersync.NewIncarnation("test"),
			clustersync.NewVersions(clock.Now), clustersync.Config{}, nil, nil)
		if err != nil {
			tb.Fatal(err)
		}
		syncers = append(syncers, sy)
	}
	s, err := service.New(n, syncers...)
	if err != nil {
		tb.Fatal(err)
	}
	return s, ns
}

func f64(v float64) *float64 { return &v }

// modeOf is the mode sync_rate rate selects, decoded as the config
// loader decodes it.
func modeOf(tb testing.TB, rate float64) clustersync.Mode {
	tb.Helper()
	m, err := config.DecodeSyncRate(&rate)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// shared reports whether mode m syncs.
func shared(m clustersync.Mode) bool { return m != clustersync.Mode(clustersync.Local{}) }
