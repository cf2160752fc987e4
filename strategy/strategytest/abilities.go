package strategytest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// withoutAbility is what Run checks of a store that does not declare an
// ability (any of needs): a Syncer over it refuses what needs the
// ability, cleanly, or serves without it.
var withoutAbility = []struct {
	name  string
	needs clustersync.Abilities
	run   func(t *testing.T, e *env)
}{
	{"without atomic decision: synchronous refused, no escalation", clustersync.Decide, testWithoutDecide},
	{"without buckets: bucket limits refused", clustersync.Buckets, testWithoutBuckets},
	{"without leases: concurrency limits refused", clustersync.Leases, testWithoutLeases},
	// A tick without push-fetch pushes, then fetches; without change
	// reads it fetches every key: one check covers a store lacking
	// either or both.
	{"without push-fetch or change reads: ticks converge", clustersync.PushFetch | clustersync.Changes, testTicksConverge},
}

// syncerOn returns a Syncer in mode over e's store, on a namespace of
// one-minute windows of e's.
func syncerOn(t *testing.T, e *env, mode clustersync.Mode, name string) (*clustersync.Syncer, error) {
	t.Helper()
	ns, err := node.NewNamespace(node.Config{Name: e.ns, WindowSizes: []time.Duration{time.Minute}, Shared: true}, node.SystemClock{})
	if err != nil {
		t.Fatal(err)
	}
	return clustersync.NewSyncer(ns, mode, e.s, clustersync.NewIncarnation(name), clustersync.NewVersions(time.Now),
		clustersync.Config{StoreName: "conformance", NoJitter: true}, nil, nil)
}

var periodic = clustersync.Periodic{Period: time.Second}

func mustSyncer(t *testing.T, e *env, mode clustersync.Mode, name string) *clustersync.Syncer {
	t.Helper()
	sy, err := syncerOn(t, e, mode, name)
	if err != nil {
		t.Fatalf("NewSyncer over %T: %v", e.s, err)
	}
	return sy
}

func testWithoutDecide(t *testing.T, e *env) {
	_, err := syncerOn(t, e, clustersync.Synchronous{}, "a")
	if err == nil || !strings.Contains(err.Error(), "no atomic decision") {
		t.Errorf("a synchronous namespace over a store that cannot decide: %v; want it refused, naming the ability", err)
	}
	if sy := mustSyncer(t, e, periodic, "a"); sy.Escalates() {
		t.Error("a periodic namespace over a store that cannot decide escalates")
	}
}

func testWithoutBuckets(t *testing.T, e *env) {
	sy := mustSyncer(t, e, periodic, "a")
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 1, RefillTime: time.Second}}}}
	_, err := sy.Calls().AllowAt(ctx(t, callTimeout), time.Now(), req, nil)
	var fe *ratelimit.FieldError
	if !errors.As(err, &fe) || fe.Field != "limits[0]" || !errors.Is(err, node.ErrNotLocal) {
		t.Errorf("a token bucket over a store without buckets: %v; want limits[0] refused (node.ErrNotLocal)", err)
	}
}

func testWithoutLeases(t *testing.T, e *env) {
	sy := mustSyncer(t, e, periodic, "a")
	if _, err := sy.Calls().AcquireLease(ctx(t, callTimeout), time.Now(), "k", 1, time.Minute); !errors.Is(err, clustersync.ErrNoLeaseStore) {
		t.Errorf("a lease over a store without leases: %v; want ErrNoLeaseStore", err)
	}
}

// testTicksConverge: two periodic nodes over the store see each other's
// hits after a tick each, whatever the store lacks of the abilities that
// only make a tick cheaper.
func testTicksConverge(t *testing.T, e *env) {
	a, b := mustSyncer(t, e, periodic, "a"), mustSyncer(t, e, periodic, "b")
	now := time.Now()
	if _, err := a.Calls().IncrementAt(ctx(t, callTimeout), now, "k", 0, 3, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Calls().IncrementAt(ctx(t, callTimeout), now, "k", 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	for _, sy := range []*clustersync.Syncer{a, b, a} {
		if err := sy.SyncOnce(context.Background()); err != nil {
			t.Fatalf("tick: %v", err)
		}
	}
	for name, sy := range map[string]*clustersync.Syncer{"a": a, "b": b} {
		rates, err := sy.Calls().RateAt(ctx(t, callTimeout), now, "k", 0, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(rates) != 1 || rates[0].Rate < 4-1e-9 {
			t.Errorf("%s's rate after the ticks: %v; want 4 (its hits and the other's)", name, rates)
		}
	}
}
