package node_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// status is the part of a LimitStatus a step checks.
type status struct {
	kind             ratelimit.LimitKind
	before, rate, rm float64
}

func checkStatuses(t *testing.T, step string, d ratelimit.Decision, want []status) {
	t.Helper()
	if len(d.Limits) != len(want) {
		t.Fatalf("%s: %d statuses, want %d: %+v", step, len(d.Limits), len(want), d.Limits)
	}
	for i, w := range want {
		if g := d.Limits[i]; g.Kind != w.kind || g.Before != w.before || g.Rate != w.rate || g.Remaining != w.rm {
			t.Errorf("%s: limits[%d] = %+v; want %s before %v, rate %v, remaining %v", step, i, g, w.kind, w.before, w.rate, w.rm)
		}
	}
}

// TestAllowWindowAndBucketsAllOrNone: an Allow with a window limit and
// buckets admits its cost in all of them or in none, with every status in
// request order. Hand-computed, at one instant: a window of 3 a minute, a
// token bucket of 2 refilled each minute and a fixed bucket of 5 a minute.
func TestAllowWindowAndBucketsAllOrNone(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	win := ratelimit.Limit{Size: time.Minute, Limit: 3}
	tok := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 2, RefillTime: time.Minute}}
	fix := ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Minute, Limit: 5}}
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{tok, win, fix}}
	W, T, F := ratelimit.WindowLimit, ratelimit.TokenLimit, ratelimit.FixedLimit

	d := allow(t, ns, epoch, req)
	if !d.Allowed {
		t.Fatalf("first: %+v, want allowed", d)
	}
	checkStatuses(t, "first", d, []status{{T, 2, 1, 1}, {W, 0, 1, 2}, {F, 0, 1, 4}})
	d = allow(t, ns, epoch, req)
	checkStatuses(t, "second", d, []status{{T, 1, 2, 0}, {W, 1, 2, 1}, {F, 1, 2, 3}})
	// The token bucket is empty: the window and the fixed bucket would
	// admit, and count nothing; the retry is the token's refill.
	d = allow(t, ns, epoch, req)
	if d.Allowed || d.Never || d.RetryAfter != time.Minute || d.Wait != 0 {
		t.Errorf("third: %+v; want denied, retry after 1m, no wait", d)
	}
	checkStatuses(t, "third", d, []status{{T, 0, 2, 0}, {W, 2, 2, 1}, {F, 2, 2, 3}})
	// CountRejected counts in the window only.
	req.CountRejected = true
	d = allow(t, ns, epoch, req)
	checkStatuses(t, "counted rejected", d, []status{{T, 0, 2, 0}, {W, 2, 3, 0}, {F, 2, 2, 3}})
	// Now the window refuses too; the fixed bucket still counts 2.
	req.CountRejected = false
	d = allow(t, ns, epoch, ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{fix}})
	if !d.Allowed {
		t.Errorf("the fixed bucket alone: %+v; want allowed", d)
	}
	checkStatuses(t, "fixed alone", d, []status{{F, 2, 3, 2}})
	// A cost above the token bucket's capacity can never be admitted.
	d = allow(t, ns, epoch, ratelimit.AllowRequest{Key: "k", Cost: 3, Limits: []ratelimit.Limit{win, tok}})
	if d.Allowed || !d.Never || d.RetryAfter != 0 || !strings.Contains(d.Reason, "cost 3 exceeds the token bucket's capacity 2") {
		t.Errorf("cost 3: %+v; want never, for the token bucket's capacity", d)
	}
}

// TestAllowBucketAdmittingAloneIsLeftUnchanged: when a window refuses
// the cost, a token bucket that would have admitted it is left as it was
// and answers as a read.
func TestAllowBucketAdmittingAloneIsLeftUnchanged(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	win := ratelimit.Limit{Size: time.Minute, Limit: 1}
	tok := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 5, RefillTime: time.Minute}}
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{win, tok}}
	if d := allow(t, ns, epoch, req); !d.Allowed {
		t.Fatalf("first: %+v, want allowed", d)
	}
	d := allow(t, ns, epoch, req)
	if d.Allowed || d.RetryAfter <= 0 {
		t.Errorf("second: %+v; want denied by the window, with a retry", d)
	}
	checkStatuses(t, "second", d, []status{{ratelimit.WindowLimit, 1, 1, 0}, {ratelimit.TokenLimit, 4, 1, 4}})
	d = allow(t, ns, epoch, ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{tok}})
	checkStatuses(t, "the token bucket alone", d, []status{{ratelimit.TokenLimit, 4, 2, 3}})
}

// TestAllowLeakyWaitOnlyWhenTheWindowsAdmit: an Allow refused by a full
// leaky bucket alone reports the wait for it to drain a drop, within its
// wait timeout; refused by a window as well, it reports no wait.
func TestAllowLeakyWaitOnlyWhenTheWindowsAdmit(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	leaky := ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 2, Interval: 2 * time.Second}, WaitTimeout: 5 * time.Second}
	win := ratelimit.Limit{Size: time.Minute, Limit: 2}
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{win, leaky}}
	for i := range 2 {
		if d := allow(t, ns, epoch, req); !d.Allowed {
			t.Fatalf("#%d: %+v, want allowed", i+1, d)
		}
	}
	// Full: one drop drains in 1 s.
	d := allow(t, ns, epoch, ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{leaky}})
	if d.Allowed || d.Wait != time.Second || d.RetryAfter != time.Second {
		t.Errorf("leaky alone, full: %+v; want denied, wait 1s, retry after 1s", d)
	}
	d = allow(t, ns, epoch, req)
	if d.Allowed || d.Wait != 0 {
		t.Errorf("window and leaky, both full: %+v; want denied with no wait", d)
	}
}

// TestCheckAllowCountsBuckets: CheckAllow lists the window limits and
// counts the bucket limits apart.
func TestCheckAllowCountsBuckets(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	c, err := ns.CheckAllow(ratelimit.AllowRequest{Key: "k", Cost: 2, Limits: []ratelimit.Limit{
		{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 2, RefillTime: time.Minute}},
		{Size: time.Minute, Limit: 3},
		{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Minute, Limit: 5}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Buckets != 2 || c.Cost != 2*ratelimit.Micro || len(c.Limits()) != 1 || c.Limits()[0].Size != time.Minute || c.Limits()[0].Limit != 3*ratelimit.Micro {
		t.Errorf("CheckAllow = %d buckets, cost %d, limits %+v; want 2 buckets, cost 2e6, one limit of 3e6 a minute", c.Buckets, c.Cost, c.Limits())
	}
}

// TestAllowSameBucketTwice: a bucket given twice in one Allow is refused,
// naming both; two buckets of different kinds are not the same.
func TestAllowSameBucketTwice(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	tok := ratelimit.Limit{Kind: ratelimit.TokenLimit, Token: ratelimit.TokenBucket{Max: 2, RefillTime: time.Minute}}
	fix := ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Minute, Limit: 5}}
	_, err := ns.AllowAt(epoch, ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{tok, fix, tok}}, nil)
	var fe *ratelimit.FieldError
	if !errors.As(err, &fe) || fe.Field != "limits[2].token" || !strings.Contains(err.Error(), "same token bucket as limits[0]") {
		t.Errorf("the same token bucket twice: %v; want limits[2].token named the same as limits[0]", err)
	}
	if d, err := ns.AllowAt(epoch, ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{tok, fix}}, nil); err != nil || !d.Allowed {
		t.Errorf("a token and a fixed bucket: %+v, %v; want allowed", d, err)
	}
}

// TestAllowBucketsInAnyOrder: Allows that give one key's buckets in
// opposite orders, at once, all finish (each locks them in one order)
// and each is counted once.
func TestAllowBucketsInAnyOrder(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	fix := ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Hour, Limit: 1e6}}
	leaky := ratelimit.Limit{Kind: ratelimit.LeakyLimit, Leaky: ratelimit.LeakyBucket{Size: 1e6, Interval: time.Hour}}
	const workers, each = 8, 20000
	done := make(chan error, workers)
	for w := range workers {
		lims := []ratelimit.Limit{fix, leaky}
		if w%2 == 1 {
			lims = []ratelimit.Limit{leaky, fix}
		}
		go func() {
			for range each {
				if d, err := ns.AllowAt(epoch, ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: lims}, nil); err != nil || !d.Allowed {
					done <- fmt.Errorf("%+v, %v", d, err)
					return
				}
			}
			done <- nil
		}()
	}
	deadline := time.After(time.Minute)
	for range workers {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Allow: %v; want allowed", err)
			}
		case <-deadline:
			t.Fatal("Allows on the same buckets in opposite orders still running after a minute (deadlocked)")
		}
	}
	d := allow(t, ns, epoch, ratelimit.AllowRequest{Key: "k", Cost: 0, Limits: []ratelimit.Limit{fix}})
	if d.Limits[0].Before != workers*each {
		t.Errorf("the fixed bucket counts %v, want %d", d.Limits[0].Before, workers*each)
	}
}

// TestChangeChanged: a change changes something when it adds, removes or
// replaces a namespace, alone or with the others; keeping them is no
// change.
func TestChangeChanged(t *testing.T) {
	ns := newNS(t, localConfig(time.Second), nil)
	one, r := []*node.Namespace{ns}, []node.Replacement{{Old: ns, New: ns}}
	for _, c := range []struct {
		name string
		c    node.Change
		want bool
	}{
		{"nothing", node.Change{}, false},
		{"kept", node.Change{Kept: one}, false},
		{"added", node.Change{Added: one}, true},
		{"removed", node.Change{Removed: one}, true},
		{"replaced", node.Change{Replaced: r}, true},
		{"added and removed", node.Change{Added: one, Removed: one}, true},
		{"removed and replaced", node.Change{Removed: one, Replaced: r}, true},
	} {
		if got := c.c.Changed(); got != c.want {
			t.Errorf("%s: Changed() = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestCopyWindowsCountsRefusedKeys: keys that the successor's key cap
// leaves no room for are skipped and counted.
func TestCopyWindowsCountsRefusedKeys(t *testing.T) {
	clock := newFakeClock(epoch)
	n, err := node.New([]node.Config{named("ns", -1, time.Minute)}, clock)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := n.Namespace("ns")
	for _, k := range []string{"a", "b", "c"} {
		mustIncrement(t, old, k, 0, 1)
	}
	cfg := named("ns", -1, time.Minute)
	cfg.MaxKeys = 1
	c, err := n.Prepare([]node.Config{cfg})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Commit(c); err != nil {
		t.Fatal(err)
	}
	if len(c.Replaced) != 1 {
		t.Fatalf("change %+v, want ns replaced", c)
	}
	if refused := c.Replaced[0].CopyWindows(clock.Now(), false); refused != 2 {
		t.Errorf("CopyWindows refused %d keys, want 2 (a key cap of 1, 3 keys)", refused)
	}
}

// TestAllowSmallestWindowWithABucket: a window limit of the namespace's
// smallest size, beside a bucket, is decided like any window.
func TestAllowSmallestWindowWithABucket(t *testing.T) {
	ns := newNS(t, localConfig(time.Second, time.Minute), nil)
	req := ratelimit.AllowRequest{Key: "k", Cost: 1, Limits: []ratelimit.Limit{
		{Size: time.Second, Limit: 1},
		{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Minute, Limit: 5}},
	}}
	if d := allow(t, ns, epoch, req); !d.Allowed {
		t.Fatalf("first: %+v, want allowed", d)
	}
	d := allow(t, ns, epoch, req)
	if d.Allowed || d.Limits[0].Rate != 1 || d.Limits[0].Remaining != 0 {
		t.Errorf("second in the same second: %+v; want denied by the 1s window at rate 1", d)
	}
}
