package service_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
)

func Example() {
	clock := fakeclock.New(time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC))
	n, _ := node.New([]node.Config{node.DefaultConfig()}, clock) // 1s and 1m, local only
	s, _ := service.New(n)
	ctx := context.Background()

	rates, _ := s.Increment(ctx, service.IncrementRequest{Key: "10.0.0.1"}, nil)
	for _, r := range rates {
		fmt.Printf("%v window: %g\n", r.Size, r.Rate)
	}
	limits := []service.Limit{{Size: time.Second, Limit: 2}}
	for range 2 {
		d, _ := s.Allow(ctx, service.AllowRequest{Key: "10.0.0.1", Limits: limits}, nil)
		fmt.Printf("allowed: %v, remaining %g\n", d.Allowed, d.Limits[0].Remaining)
	}
	clock.Add(500 * time.Millisecond)
	d, _ := s.Allow(ctx, service.AllowRequest{Key: "10.0.0.1", Limits: limits}, nil)
	fmt.Println("half a second later:", d.Allowed)

	// Output:
	// 1s window: 1
	// 1m0s window: 1
	// allowed: true, remaining 0
	// allowed: false, remaining 0
	// half a second later: false
}

// Every mode and every front gets the same first error: here the key's,
// which comes before the window size's.
func ExampleFieldError() {
	n, _ := node.New([]node.Config{node.DefaultConfig()}, fakeclock.New(time.Unix(0, 0)))
	s, _ := service.New(n)
	_, err := s.Increment(context.Background(), service.IncrementRequest{Key: "\xff", WindowSize: 7 * time.Second}, nil)
	var fe *service.FieldError
	if errors.As(err, &fe) {
		fmt.Println(fe.Field, "|", fe.Reason, "|", errors.Is(err, service.ErrInvalidKey))
	}
	// Output:
	// key | must be valid UTF-8 | true
}

func ExampleService_AtRange() {
	n, _ := node.New([]node.Config{node.DefaultConfig()}, fakeclock.New(time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)))
	s, _ := service.New(n)
	earliest, latest, _ := s.AtRange(service.SlidingWindow, "default")
	fmt.Println(earliest.Format(time.TimeOnly), "to", latest.Format(time.TimeOnly))
	// Output:
	// 11:59:00 to 12:00:01
}
