package sync_test

import (
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// overclaims declares every ability but implements Store only.
type overclaims struct{ minimalStore }

func (overclaims) Abilities() clustersync.Abilities { return memory.Abilities }

// minimalStore is a Store with no ability beside Push, Fetch and Close.
type minimalStore struct{ clustersync.Store }

func (minimalStore) Abilities() clustersync.Abilities { return 0 }

// TestNewSyncerReadsTheDeclaration: a syncer refuses a store that
// declares an ability it does not implement, and a synchronous namespace
// on a store that cannot decide; a periodic one there runs and does not
// escalate.
func TestNewSyncerReadsTheDeclaration(t *testing.T) {
	clock := fakeclock.New(start)
	syncer := func(mode clustersync.Mode, store clustersync.Store) (*clustersync.Syncer, error) {
		ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Minute}, Shared: true}, clock)
		if err != nil {
			t.Fatal(err)
		}
		return clustersync.NewSyncer(ns, mode, store, clustersync.NewIncarnation("a"), clustersync.NewVersions(clock.Now),
			clustersync.Config{StoreName: "main"}, nil, nil)
	}
	periodic := clustersync.Periodic{Period: time.Second}
	if _, err := syncer(periodic, overclaims{minimalStore{memory.New()}}); err == nil || !strings.Contains(err.Error(), "declares") {
		t.Errorf("a store declaring what it lacks: %v, want refused", err)
	}
	_, err := syncer(clustersync.Synchronous{}, minimalStore{memory.New()})
	if err == nil || !strings.Contains(err.Error(), `store "main"`) || !strings.Contains(err.Error(), "no atomic decision") {
		t.Errorf("synchronous on a store that cannot decide: %v, want refused naming the store and the ability", err)
	}
	sy, err := syncer(periodic, minimalStore{memory.New()})
	if err != nil || sy.Escalates() {
		t.Errorf("periodic on a store that cannot decide: %v, escalates %v; want it to run, deciding in the node", err, sy != nil && sy.Escalates())
	}
	if sy, err := syncer(periodic, memory.New()); err != nil || !sy.Escalates() {
		t.Errorf("periodic on a store that decides: %v; want it to escalate", err)
	}
}

// TestAbilitiesString: an ability's name is what a message says.
func TestAbilitiesString(t *testing.T) {
	for a, want := range map[clustersync.Abilities]string{
		0:                                        "none",
		clustersync.Decide:                       "atomic decision",
		clustersync.Buckets | clustersync.Leases: "buckets, leases",
		clustersync.PushFetch | clustersync.Window: "push and fetch in one call, window reads",
	} {
		if got := a.String(); got != want {
			t.Errorf("%d: %q, want %q", a, got, want)
		}
	}
}
