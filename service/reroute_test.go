package service_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

// TestRerouteLosesNoCountUnderLoad changes a namespace's window sizes
// again and again while callers count in it and in an untouched one:
// no call fails, and every hit acknowledged is in the final counts.
func TestRerouteLosesNoCountUnderLoad(t *testing.T) {
	clock := fakeclock.New(now)
	cfg := func(name string, sizes ...time.Duration) node.Config {
		return node.Config{Name: name, WindowSizes: sizes}
	}
	n, err := node.New([]node.Config{cfg("changing", time.Minute), cfg("untouched", time.Minute)}, clock)
	if err != nil {
		t.Fatal(err)
	}
	s, err := service.New(n)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var acked [2]atomic.Int64
	stop := make(chan struct{})
	done := make(chan error, 4)
	for w := range 4 {
		name := []string{"changing", "untouched"}[w%2]
		go func() {
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				if _, err := s.Increment(ctx, service.IncrementRequest{Namespace: name, Key: "k", WindowSize: time.Minute}, nil); err != nil {
					done <- err
					return
				}
				acked[w%2].Add(1)
			}
		}()
	}
	sizes := [][]time.Duration{{time.Minute, time.Hour}, {time.Minute}, {time.Second, time.Minute}}
	for i := range 30 {
		c, err := n.Prepare([]node.Config{cfg("changing", sizes[i%len(sizes)]...), cfg("untouched", time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if err := n.Commit(c); err != nil {
			t.Fatal(err)
		}
		if err := service.Reroute(ctx, s); err != nil {
			t.Fatal(err)
		}
		for _, r := range c.Replaced {
			r.CopyWindows(clock.Now(), false)
		}
		if len(c.Kept) != 1 || c.Kept[0].Name() != "untouched" {
			t.Fatalf("change %d kept %v", i, c.Kept)
		}
	}
	close(stop)
	for range 4 {
		if err := <-done; err != nil {
			t.Fatalf("a call failed during the changes: %v", err)
		}
	}
	for i, name := range []string{"changing", "untouched"} {
		rates, err := s.SlidingWindow(ctx, service.RateRequest{Namespace: name, Key: "k", WindowSize: time.Minute}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := rates[0].Rate, float64(acked[i].Load()); got != want {
			t.Errorf("%s: rate %v, want the %v hits acknowledged", name, got, want)
		}
	}
}
