package node_test

import (
	"fmt"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// The seed's worked example: 40 hits in one minute, 10 in the next; half way
// through the second minute the sliding rate is 10 + 40 × 30/60 = 30.
func ExampleNamespace_IncrementAt() {
	ns, err := node.NewNamespace(node.Config{
		Name:        "default",
		WindowSizes: []time.Duration{time.Second, time.Minute},
		// local only
	}, nil)
	if err != nil {
		panic(err)
	}
	start := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC) // a minute boundary
	ns.IncrementAt(start.Add(10*time.Second), "10.0.0.1", time.Minute, 40, nil)
	ns.IncrementAt(start.Add(70*time.Second), "10.0.0.1", time.Minute, 10, nil)

	// Size 0 counts in every window size and returns one rate per size,
	// ascending. A fractional value counts exactly.
	rates, err := ns.IncrementAt(start.Add(90*time.Second), "10.0.0.1", 0, 0.5, nil)
	if err != nil {
		panic(err)
	}
	for _, r := range rates {
		fmt.Printf("%v: %g\n", r.Size, r.Rate)
	}
	// Output:
	// 1s: 0.5
	// 1m0s: 30.5
}

// Allow admits a cost when it fits under every limit, and otherwise says
// how long to wait.
func ExampleNamespace_AllowAt() {
	ns, err := node.NewNamespace(node.DefaultConfig(), nil)
	if err != nil {
		panic(err)
	}
	now := time.Date(2024, 1, 1, 12, 0, 0, 0, time.UTC)
	req := ratelimit.AllowRequest{
		Key:  "user-42",
		Cost: 1,
		Limits: []ratelimit.Limit{
			{Size: time.Second, Limit: 2},
			{Size: time.Minute, Limit: 100},
		},
	}
	for i := range 3 {
		d, err := ns.AllowAt(now, req, nil)
		if err != nil {
			panic(err)
		}
		fmt.Printf("#%d allowed=%v remaining=%g retry_after=%v\n", i+1, d.Allowed, d.Limits[0].Remaining, d.RetryAfter)
	}
	// 2 hits in the previous second weigh 2 × (1 − 0.5) = 1 half way
	// through the next one: one more fits.
	d, _ := ns.AllowAt(now.Add(1500*time.Millisecond), req, nil)
	fmt.Printf("at +1.5s allowed=%v rate=%g\n", d.Allowed, d.Limits[0].Rate)

	req.Cost = 3
	d, _ = ns.AllowAt(now.Add(time.Hour), req, nil)
	fmt.Printf("cost 3: allowed=%v never=%v\n", d.Allowed, d.Never)
	// Output:
	// #1 allowed=true remaining=1 retry_after=0s
	// #2 allowed=true remaining=0 retry_after=0s
	// #3 allowed=false remaining=0 retry_after=1.5s
	// at +1.5s allowed=true rate=2
	// cost 3: allowed=false never=true
}
