package node_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// TestFormatDuration: whole seconds as seconds, shorter whole
// milliseconds as milliseconds, anything else in Go's syntax.
func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                        "0s",
		time.Minute:              "60s",
		-time.Second:             "-1s",
		250 * time.Millisecond:   "250ms",
		999 * time.Millisecond:   "999ms",
		-250 * time.Millisecond:  "-250ms",
		1500 * time.Millisecond:  "1.5s",
		-1500 * time.Millisecond: "-1.5s",
		1001 * time.Millisecond:  "1.001s",
		time.Microsecond:         "1µs",
	} {
		if got := ratelimit.FormatDuration(d); got != want {
			t.Errorf("FormatDuration(%d) = %q, want %q", d, got, want)
		}
	}
}

// TestValidatePolicies: a namespace's policies are checked as an Allow's
// limits are, in its window sizes and mode, each error naming its policy.
func TestValidatePolicies(t *testing.T) {
	win := ratelimit.Limit{Size: time.Second, Limit: 5}
	fixed := ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Minute, Limit: 5}}
	many := map[string]ratelimit.Policy{}
	for i := range node.MaxPolicies {
		many[fmt.Sprint("p", i)] = ratelimit.Policy{Limits: []ratelimit.Limit{win}}
	}
	tooMany := map[string]ratelimit.Policy{"extra": {Limits: []ratelimit.Limit{win}}}
	for k, v := range many {
		tooMany[k] = v
	}
	shared := func(c node.Config) node.Config { c.Shared = true; return c }
	est := func(c node.Config) node.Config {
		c.Estimator = &node.EstimatorConfig{Hashes: 2, Slots: 1024}
		return c
	}
	limits := func(n int) []ratelimit.Limit {
		ls := make([]ratelimit.Limit, n)
		for i := range ls {
			ls[i] = ratelimit.Limit{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Duration(i+1) * time.Second, Limit: 5}}
		}
		return ls
	}
	for _, tc := range []struct {
		name     string
		mode     func(node.Config) node.Config
		policies map[string]ratelimit.Policy
		field    string // "": valid
	}{
		{"as many as allowed", nil, many, ""},
		{"one too many", nil, tooMany, "policies"},
		{"windows and buckets", nil, map[string]ratelimit.Policy{"login": {Limits: []ratelimit.Limit{win, fixed}}}, ""},
		{"a bad name", nil, map[string]ratelimit.Policy{"a b": {Limits: []ratelimit.Limit{win}}}, "policies.a b"},
		{"an unknown size", nil, map[string]ratelimit.Policy{"login": {Limits: []ratelimit.Limit{{Size: time.Hour, Limit: 5}}}}, "policies.login.limits[0].window_size"},
		{"as many limits as allowed", nil, map[string]ratelimit.Policy{"login": {Limits: limits(node.MaxLimits)}}, ""},
		{"one limit too many", nil, map[string]ratelimit.Policy{"login": {Limits: limits(node.MaxLimits + 1)}}, "policies.login.limits"},
		{"a bucket in an estimator namespace", est, map[string]ratelimit.Policy{"login": {Limits: []ratelimit.Limit{fixed}}}, "policies.login.limits"},
		{"windows in an estimator namespace", est, map[string]ratelimit.Policy{"login": {Limits: []ratelimit.Limit{win}}}, ""},
		{"both kinds, shared", shared, map[string]ratelimit.Policy{"login": {Limits: []ratelimit.Limit{win, fixed}}}, ""},
		{"buckets alone, shared", shared, map[string]ratelimit.Policy{"login": {Limits: []ratelimit.Limit{fixed}}}, ""},
	} {
		c := localConfig(time.Second)
		if tc.mode != nil {
			c = tc.mode(c)
		}
		c.Policies = tc.policies
		err := c.Validate()
		if tc.field == "" && err != nil || tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.field)
		}
	}
}

// TestWindowSizeBounds: window sizes from MinWindowSize to MaxWindowSize,
// both included.
func TestWindowSizeBounds(t *testing.T) {
	for _, tc := range []struct {
		size time.Duration
		ok   bool
	}{
		{node.MinWindowSize, true}, {node.MaxWindowSize, true},
		{node.MinWindowSize - time.Millisecond, false}, {node.MaxWindowSize + time.Millisecond, false},
	} {
		if err := node.ValidateWindowSize(tc.size); (err == nil) != tc.ok {
			t.Errorf("window size %v: %v, want ok %v", tc.size, err, tc.ok)
		}
	}
}

// TestNamespaceKeepsItsPolicies: a namespace holds a copy of its
// config's policies: they are there, and a change to the config's map
// afterwards does not reach it.
func TestNamespaceKeepsItsPolicies(t *testing.T) {
	c := localConfig(time.Second)
	c.Policies = map[string]ratelimit.Policy{"login": {Limits: []ratelimit.Limit{{Size: time.Second, Limit: 5}}}}
	ns := newNS(t, c, nil)
	c.Policies["login"].Limits[0].Limit = 9
	delete(c.Policies, "login")
	p, ok := ns.Config().Policies["login"]
	if !ok || len(p.Limits) != 1 || p.Limits[0].Limit != 5 {
		t.Errorf("the namespace's policy login: %+v (%v), want its limit of 5 as configured", p, ok)
	}
}

// TestLongKeysDifferingInTheMiddle: keys that share their first and
// last 8 bytes and differ between are counted apart, however the table
// probes them.
func TestLongKeysDifferingInTheMiddle(t *testing.T) {
	ns := newNS(t, localConfig(time.Second), newFakeClock(epoch))
	const n = 2000
	key := func(i int) string { return fmt.Sprintf("aaaaaaaa%08daaaaaaaa", i) }
	for i := range n {
		mustIncrement(t, ns, key(i), 0, 1)
	}
	if got := ns.ActiveKeys(); got != n {
		t.Errorf("%d keys held, want %d", got, n)
	}
	for i := range n {
		if r := rateOf(t, ns, epoch, key(i), time.Second); r != 1 {
			t.Fatalf("key %q: rate %v, want 1", key(i), r)
		}
	}
}

// TestManyKeysInserted: inserting thousands of keys returns (a 10 s
// bound on a hang: a table that filled up would probe for ever), and
// every key is held.
func TestManyKeysInserted(t *testing.T) {
	ns := newNS(t, localConfig(time.Second), newFakeClock(epoch))
	const n = 3000
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if _, err := ns.Increment(fmt.Sprint("key-", i), 0, 1, nil); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("inserting %d keys did not return in 10 s", n)
	}
	if got := ns.ActiveKeys(); got != n {
		t.Errorf("%d keys held, want %d", got, n)
	}
}
