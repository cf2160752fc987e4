package client_test

import (
	"context"
	"fmt"
	"net"
	"time"

	limiterv1 "github.com/limiterd/limiterd/api/proto/limiter/v1"
	"github.com/limiterd/limiterd/client"
)

// Sidekiq's leaky bucket, 10 per 10 s, asked 11 times in a row. (The
// server here is an in-process stand-in over bufconn; use limiterd's
// address, e.g. "127.0.0.1:7070", and no dial option in real code.)
func Example() {
	dial, stop := startFake(&fakeLimiter{})
	defer stop()
	c, err := client.New("passthrough:///bufconn", dial, client.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	req := &limiterv1.AllowRequest{
		Key:    "ip-127.0.0.1",
		Limits: []*limiterv1.Limit{client.Leaky(10, 10*time.Second, 0)},
	}
	for i := 1; i <= 11; i++ {
		d := c.Allow(context.Background(), req)
		if i >= 9 {
			fmt.Printf("call %d: allowed %v, remaining %v, retry after %v\n",
				i, d.Allowed, d.Limits[0].GetRemaining(), d.RetryAfter)
		}
	}
	// Output:
	// call 9: allowed true, remaining 1, retry after 0s
	// call 10: allowed true, remaining 0, retry after 0s
	// call 11: allowed false, remaining 0, retry after 1s
}

// With nothing listening, Allow admits (fail-open, the default) or refuses
// (WithFailClosed), and says why in Err.
func ExampleWithFailClosed() {
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	target := lis.Addr().String()
	lis.Close() // limiterd is down
	req := &limiterv1.AllowRequest{Key: "k", Limits: []*limiterv1.Limit{client.Window(10, time.Second)}}
	for _, opts := range [][]client.Option{nil, {client.WithFailClosed()}} {
		c, err := client.New(target, opts...)
		if err != nil {
			panic(err)
		}
		d := c.Allow(context.Background(), req)
		fmt.Printf("allowed %v, error %v\n", d.Allowed, d.Err != nil)
		c.Close()
	}
	// Output:
	// allowed true, error true
	// allowed false, error true
}

// A concurrency limit: at most 2 jobs write to the database at once. Each
// job takes a lease, works, and releases it when done (defer), also when
// the work fails; a lease never released expires after its ttl. (The
// server is an in-process stand-in, as in Example.)
func ExampleClient_Acquire() {
	dial, stop := startFake(&fakeLimiter{})
	defer stop()
	c, err := client.New("passthrough:///bufconn", dial, client.WithTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	defer c.Close()

	job := func(ctx context.Context, name string, inner func(context.Context)) {
		lease, err := c.Acquire(ctx, client.Lease("db-writes", 2, 30*time.Second))
		if err != nil {
			fmt.Printf("%s: limiterd did not answer: %v\n", name, err)
			return
		}
		if !lease.GetAcquired() {
			fmt.Printf("%s: busy (%d held), retry within %v\n", name, lease.GetHeld(), lease.GetRetryAfter().AsDuration())
			return
		}
		// WithoutCancel: the lease is released even when ctx was cancelled.
		defer c.Release(context.WithoutCancel(ctx), lease.GetLease())
		fmt.Printf("%s: writing (%d held)\n", name, lease.GetHeld())
		if inner != nil {
			inner(ctx) // more jobs start while this one holds its lease
		}
	}
	ctx := context.Background()
	job(ctx, "a", func(ctx context.Context) {
		job(ctx, "b", func(ctx context.Context) { job(ctx, "c", nil) })
	})
	job(ctx, "d", nil) // a and b have released theirs
	// Output:
	// a: writing (1 held)
	// b: writing (2 held)
	// c: busy (2 held), retry within 30s
	// d: writing (1 held)
}
