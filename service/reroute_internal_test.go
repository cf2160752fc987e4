package service

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
)

// TestRerouteWaitsForCallsOnThePreviousRoutes: a call still running on
// the previous routes keeps Reroute waiting (its namespace cannot be
// retired yet); Reroute returns once it exits, or when its ctx ends.
func TestRerouteWaitsForCallsOnThePreviousRoutes(t *testing.T) {
	n, err := node.New([]node.Config{{Name: "a", WindowSizes: []time.Duration{time.Second}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(n)
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.resolve("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	rerouted := make(chan error, 1)
	go func() { rerouted <- Reroute(context.Background(), s) }()
	select {
	case err := <-rerouted:
		t.Fatalf("Reroute returned (%v) while a call was running on the previous routes", err)
	case <-time.After(20 * time.Millisecond):
	}
	r.exit()
	if err := <-rerouted; err != nil {
		t.Fatal(err)
	}
	r, err = s.resolve("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := Reroute(ctx, s); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Reroute with a call running: err = %v, want its ctx's deadline", err)
	}
	r.exit()
	// A batch's remembered route is of the old table: resolved again.
	last := r
	r2, err := s.resolve("a", &last)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.exit()
	if r2.tab != s.rt.Load() {
		t.Error("a batch kept a route of replaced routes")
	}
}
