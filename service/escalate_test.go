package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestPeriodicAllowEscalates: a periodic namespace's sliding-window Allow
// goes through its syncer when it escalates (the store decides for a key
// new to the node), and stays in the node when it does not.
func TestPeriodicAllowEscalates(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       clustersync.Config
		wantCalls int64
	}{
		{"auto", clustersync.Config{}, 1},
		{"never", clustersync.Config{NoEscalate: true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(now)
			n, err := node.New([]node.Config{{Name: "default", WindowSizes: []time.Duration{time.Second}, Shared: true}}, clock)
			if err != nil {
				t.Fatal(err)
			}
			ns, _ := n.Namespace("")
			store := memory.NewFaulty(memory.New(memory.WithClock(clock.Now)))
			sy, err := clustersync.NewSyncer(ns, clustersync.Periodic{Period: 100 * time.Millisecond}, store, clustersync.NewIncarnation("test"), clustersync.NewVersions(clock.Now), tc.cfg, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			s, err := service.New(n, sy)
			if err != nil {
				t.Fatal(err)
			}
			d, err := s.Allow(context.Background(), service.AllowRequest{Key: "k", Limits: []service.Limit{{Size: time.Second, Limit: 10}}}, nil)
			if err != nil || !d.Allowed {
				t.Fatalf("Allow: %+v, %v", d, err)
			}
			if got := store.Calls().Allow; got != tc.wantCalls {
				t.Errorf("store Allow calls %d, want %d", got, tc.wantCalls)
			}
		})
	}
}
