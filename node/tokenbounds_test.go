package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestStrictTokenReadKeepsTheRefillClock: a read (a take of 0) of an
// empty token bucket with strict set takes nothing, so it does not
// restart the refill clock: the next refill is still one refill time
// after the take that emptied it.
func TestStrictTokenReadKeepsTheRefillClock(t *testing.T) {
	b := newNS(t, localConfig(time.Second), nil).Buckets()
	p := ratelimit.TokenBucket{Max: 1, RefillTime: 10 * time.Second}
	if st, err := b.TakeTokenAt(epoch, "k", p, 1, true); err != nil || !st.Allowed {
		t.Fatalf("first take = %+v, %v; want admitted", st, err)
	}
	st, err := b.TakeTokenAt(epoch.Add(3*time.Second), "k", p, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if st.ResetAfter != 7*time.Second || st.Remaining != 0 {
		t.Errorf("strict read 3 s after emptying: ResetAfter %v, remaining %v; want 7s, 0", st.ResetAfter, st.Remaining)
	}
	if st, _ := b.TakeTokenAt(epoch.Add(10*time.Second), "k", p, 1, false); !st.Allowed {
		t.Errorf("take at the refill after a strict read: refused %+v", st)
	}
}

// TestTokenRetryAfterPaysTheDebt: a token bucket in debt (other nodes'
// takes forced past its tokens) refuses with a retry-after long enough
// for the refills to pay the debt and the take: 3 tokens, 1 per second,
// 5 taken elsewhere leave -2, so a take of 1 waits 3 refills.
func TestTokenRetryAfterPaysTheDebt(t *testing.T) {
	ns := newNS(t, syncedConfig(time.Second), newFakeClock(epoch))
	token := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 3, RefillTime: time.Second, RefillAmount: 1}}
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{token}}
	// The store answers with the bucket at -2 (and leaves it so), and no
	// verdict: the node decides from that state.
	d := exchange(t, ns, epoch, req, func(tx *node.BucketTx) {
		b := &tx.Buckets[0]
		s := b.Spec.Init(epoch.UnixNano())
		b.Spec.Force(&s, epoch.UnixNano(), 5*ratelimit.Micro)
		b.Got, b.Before, b.After, b.Seq = true, s, s, 1
		tx.Decide = true
	})
	if d.Allowed || d.RetryAfter != 3*time.Second {
		t.Errorf("take of 1 from a bucket at -2: allowed %v, RetryAfter %v; want refused, 3s", d.Allowed, d.RetryAfter)
	}
}
