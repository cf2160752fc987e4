package service

import (
	"context"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
)

// TestRerouteReturnsOnceCallsExit: calls that entered the routes and
// exited leave them idle, so Reroute returns at once; given 10 s (it
// needs microseconds), it does not run into its ctx's deadline.
func TestRerouteReturnsOnceCallsExit(t *testing.T) {
	n, err := node.New([]node.Config{{Name: "a", WindowSizes: []time.Duration{time.Second}, SyncRate: -1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(n)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 * gateSlots {
		r, err := s.resolve("a", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.exit()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Reroute(ctx); err != nil {
		t.Fatalf("Reroute after every call exited: %v", err)
	}
}
