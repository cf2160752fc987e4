package service

import (
	"context"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
)

// TestRerouteReturnsOnceCallsExit: calls that entered the routes and
// exited, having counted or failed, leave them idle, so Reroute returns
// at once. Given 10 s (it all takes microseconds), neither a call nor
// Reroute may run into that bound.
func TestRerouteReturnsOnceCallsExit(t *testing.T) {
	n, err := node.New([]node.Config{{Name: "a", WindowSizes: []time.Duration{time.Second}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(n)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		for range 3 * gateSlots {
			r, err := s.resolve("a", nil)
			if err != nil {
				done <- err
				return
			}
			r.exit()
		}
		// A call refused after it entered the routes (its time is an
		// hour ahead) exits them too.
		if _, err := s.Increment(ctx, IncrementRequest{Namespace: "a", Key: "k", At: time.Now().Add(time.Hour)}, nil); err == nil {
			t.Error("Increment an hour ahead: no error")
		}
		done <- Reroute(ctx, s)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Reroute after every call exited: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("calls and Reroute still running after 10 s")
	}
}
