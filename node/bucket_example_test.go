package node_test

import (
	"fmt"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// Smyte's transcript: RL.REDUCE twoPerMin 2 60, three times. Each answer
// is the tokens before the take; the third take is refused.
func ExampleBuckets_TakeTokenAt() {
	b := node.NewBuckets(node.BucketsConfig{Name: "default"}, nil)
	p := ratelimit.TokenBucket{Max: 2, RefillTime: time.Minute}
	t := time.Date(2016, 10, 12, 12, 0, 0, 0, time.UTC)
	for range 3 {
		st, err := b.TakeTokenAt(t, "twoPerMin", p, 1, false)
		if err != nil {
			panic(err)
		}
		fmt.Println(st.Before, st.Allowed, st.RetryAfter)
	}
	// Output:
	// 2 true 0s
	// 1 true 0s
	// 0 false 1m0s
}

// Sidekiq's leaky(name, 10, 10 s): one drop drains a second; the 11th call
// within a second is refused until the next drip.
func ExampleBuckets_TakeLeakyAt() {
	b := node.NewBuckets(node.BucketsConfig{Name: "default"}, nil)
	p := ratelimit.LeakyBucket{Size: 10, Interval: 10 * time.Second}
	t := time.Date(2020, 11, 9, 12, 0, 0, 0, time.UTC)
	for range 10 {
		b.TakeLeakyAt(t, "ip-10.0.0.1", p, 1)
	}
	st, _ := b.TakeLeakyAt(t.Add(220*time.Millisecond), "ip-10.0.0.1", p, 1)
	fmt.Println(st.Allowed, "next drip in", st.ResetAfter)
	st, _ = b.TakeLeakyAt(t.Add(time.Second), "ip-10.0.0.1", p, 1)
	fmt.Println(st.Allowed)
	// Output:
	// false next drip in 780ms
	// true
}
