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

func named(name string, rate float64, sizes ...time.Duration) node.Config {
	return node.Config{Name: name, WindowSizes: sizes, Shared: rate >= 0}
}

func TestPrepareSortsNamespacesIntoKeptAddedReplacedRemoved(t *testing.T) {
	n, err := node.New([]node.Config{
		named("kept", -1, time.Second),
		named("changed", -1, time.Second, time.Minute),
		named("gone", -1, time.Second),
	}, newFakeClock(epoch))
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := n.Namespace("kept")
	changed, _ := n.Namespace("changed")
	gone, _ := n.Namespace("gone")
	c, err := n.Prepare([]node.Config{
		named("kept", -1, time.Second),
		named("changed", -1, time.Minute, time.Hour),
		named("new", -1, time.Second),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Kept) != 1 || c.Kept[0] != kept {
		t.Errorf("kept = %v, want the running namespace itself", c.Kept)
	}
	if len(c.Removed) != 1 || c.Removed[0] != gone {
		t.Errorf("removed = %v", c.Removed)
	}
	if len(c.Added) != 1 || c.Added[0].Name() != "new" {
		t.Errorf("added = %v", c.Added)
	}
	if len(c.Replaced) != 1 || c.Replaced[0].Old != changed || c.Replaced[0].New.Name() != "changed" {
		t.Fatalf("replaced = %v", c.Replaced)
	}
	r := c.Replaced[0]
	if r.New.Buckets() != changed.Buckets() || r.New.Leases() != changed.Leases() {
		t.Error("a successor must carry on with its predecessor's buckets and leases")
	}
	if got := n.Namespaces(); len(got) != 3 || got[0] != changed {
		t.Fatalf("before Commit the node serves %v", got)
	}
	if err := n.Commit(c); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Namespace("gone"); !errors.Is(err, node.ErrUnknownNamespace) {
		t.Errorf("removed namespace: err = %v", err)
	}
	if got, _ := n.Namespace("changed"); got != r.New {
		t.Error("after Commit the node must serve the successor")
	}
	if got, _ := n.Namespace("kept"); got != kept {
		t.Error("an unchanged namespace must stay the same")
	}
}

func TestPrepareReportsEveryErrorAndChangesNothing(t *testing.T) {
	n, err := node.New([]node.Config{named("a", -1, time.Second)}, newFakeClock(epoch))
	if err != nil {
		t.Fatal(err)
	}
	_, err = n.Prepare([]node.Config{
		named("a", -1, 0),
		named("b", -1, time.Second),
		named("bad name", -1, time.Second),
		named("b", -1, time.Second),
	})
	if err == nil {
		t.Fatal("want errors")
	}
	for _, want := range []string{"namespaces[0].window_sizes", "namespaces[2].name", "namespaces[3].name"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if got := n.Namespaces(); len(got) != 1 || got[0].Name() != "a" {
		t.Errorf("a refused change changed the node: %v", got)
	}
}

func TestCommitRefusesAStaleChange(t *testing.T) {
	n, err := node.New([]node.Config{named("a", -1, time.Second)}, newFakeClock(epoch))
	if err != nil {
		t.Fatal(err)
	}
	c1, err1 := n.Prepare([]node.Config{named("b", -1, time.Second)})
	c2, err2 := n.Prepare([]node.Config{named("c", -1, time.Second)})
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if err := n.Commit(c1); err != nil {
		t.Fatal(err)
	}
	if err := n.Commit(c2); !errors.Is(err, node.ErrConcurrentChange) {
		t.Errorf("stale commit: err = %v, want ErrConcurrentChange", err)
	}
	if got := n.Namespaces(); len(got) != 1 || got[0].Name() != "b" {
		t.Errorf("node serves %v, want b", got)
	}
}

func TestCopyWindowsCarriesTheCountsOfKeptSizes(t *testing.T) {
	clock := newFakeClock(epoch)
	n, err := node.New([]node.Config{named("ns", 0.1, time.Second, time.Minute)}, clock)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := n.Namespace("ns")
	// One hit in the previous minute, two in the current one; p has a
	// hit in the previous minute only.
	clock.Set(epoch.Add(-30 * time.Second))
	mustIncrement(t, old, "k", 0, 1)
	mustIncrement(t, old, "p", 0, 1)
	clock.Set(epoch.Add(10 * time.Second))
	mustIncrement(t, old, "k", 0, 2)
	for _, w := range old.CollectInterest(clock.Now(), nil) {
		if w.Size == time.Minute {
			old.SetOthers(w, 5*ratelimit.Micro)
		}
	}

	// q: a hit in the previous minute only, and no others read since.
	clock.Set(epoch.Add(-30 * time.Second))
	mustIncrement(t, old, "q", 0, 1)
	clock.Set(epoch.Add(10 * time.Second))

	c, err := n.Prepare([]node.Config{named("ns", 0.1, time.Minute, time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Commit(c); err != nil {
		t.Fatal(err)
	}
	r := c.Replaced[0]
	mustIncrement(t, r.New, "k", 0, 4) // counted in the successor meanwhile
	if refused := r.CopyWindows(clock.Now(), true); refused != 0 {
		t.Fatalf("refused %d keys", refused)
	}

	rates, err := r.New.RateAt(clock.Now(), "k", 0, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Minute: own 2+4 and others 5 in the current window, 1+5 in the
	// previous one weighted by 50/60; hour: the successor's 4 only.
	wantMinute := 11 + 6*50.0/60
	if len(rates) != 2 || !near(rates[0].Rate, wantMinute) || rates[1].Rate != 4 {
		t.Errorf("rates = %v, want minute %.3f, hour 4", rates, wantMinute)
	}
	// p: own 1 and others 5 in the previous minute, others 5 in the
	// current one.
	if rates, err := r.New.RateAt(clock.Now(), "p", 0, 0, nil); err != nil || !near(rates[0].Rate, 5+6*50.0/60) {
		t.Errorf("p's rates = %v (%v), want minute %.3f: a key whose last window is the previous one is carried", rates, err, 5+6*50.0/60)
	}
	if rates, err := r.New.RateAt(clock.Now(), "q", 0, 0, nil); err != nil || !near(rates[0].Rate, 50.0/60) {
		t.Errorf("q's rates = %v (%v), want minute %.3f: a key whose last window is the previous one is carried", rates, err, 50.0/60)
	}
	var dirty []string
	for _, p := range r.New.CollectDirty(clock.Now(), nil) {
		dirty = append(dirty, p.Size.String()+"@"+time.Unix(0, p.Start).Sub(epoch).String())
		if p.Size == time.Minute && p.Start == epoch.UnixNano() && p.Total != 6*ratelimit.Micro {
			t.Errorf("current minute's own total %d, want 6 hits", p.Total)
		}
	}
	if len(dirty) != 5 {
		t.Errorf("dirty windows %v, want k's two minutes and p's and q's previous one copied, and the hour counted", dirty)
	}
}

func TestCopyWindowsWithoutOthersKeepsOnlyOwnCounts(t *testing.T) {
	clock := newFakeClock(epoch.Add(time.Second / 2))
	n, err := node.New([]node.Config{named("ns", 0.1, time.Second)}, clock)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := n.Namespace("ns")
	mustIncrement(t, old, "k", 0, 3)
	for _, w := range old.CollectInterest(clock.Now(), nil) {
		old.SetOthers(w, 7*ratelimit.Micro)
	}
	cfg := named("ns", 0.1, time.Second)
	// Another store: renewed by its owner.
	c, err := n.Prepare([]node.Config{cfg}, "ns")
	if err != nil {
		t.Fatal(err)
	}
	c.Replaced[0].CopyWindows(clock.Now(), false)
	rates, err := c.Replaced[0].New.RateAt(clock.Now(), "k", 0, 0, nil)
	if err != nil || len(rates) != 1 || rates[0].Rate != 3 {
		t.Errorf("rates = %v, %v; want own 3 only (the others are of the old store)", rates, err)
	}
}

func TestPrepareRefusesResizingAnEstimator(t *testing.T) {
	est := named("est", -1, time.Second)
	est.Estimator = &node.EstimatorConfig{Hashes: 2, Slots: 1024}
	n, err := node.New([]node.Config{est}, newFakeClock(epoch))
	if err != nil {
		t.Fatal(err)
	}
	resized := est
	resized.WindowSizes = []time.Duration{time.Minute}
	if _, err := n.Prepare([]node.Config{resized}); err == nil || !strings.Contains(err.Error(), "namespaces[0].estimator") {
		t.Errorf("err = %v, want a refusal naming namespaces[0].estimator", err)
	}
	capped := est
	capped.MaxKeys = 10
	c, err := n.Prepare([]node.Config{capped})
	if err != nil {
		t.Fatal(err)
	}
	old, _ := n.Namespace("est")
	mustIncrement(t, old, "k", 0, 2)
	rates, err := c.Replaced[0].New.RateAt(epoch, "k", 0, 0, nil)
	if err != nil || len(rates) != 1 || rates[0].Rate < 2 {
		t.Errorf("rates = %v, %v: the successor must share the sketch", rates, err)
	}
}

func mustIncrement(t *testing.T, ns *node.Namespace, key string, size time.Duration, v float64) {
	t.Helper()
	if _, err := ns.Increment(key, size, v, nil); err != nil {
		t.Fatal(err)
	}
}

// TestInterestWindow: a held key's current and previous windows are
// found by key, as CollectInterest lists them; a window after the
// current one is ahead; an unheld key, an old window or an unknown size
// is not found.
func TestInterestWindow(t *testing.T) {
	clock := newFakeClock(epoch.Add(90 * time.Second))
	n, err := node.New([]node.Config{named("ns", 0.1, time.Minute)}, clock)
	if err != nil {
		t.Fatal(err)
	}
	ns, _ := n.Namespace("ns")
	mustIncrement(t, ns, "k", 0, 1)
	now := clock.Now()
	cur := epoch.Add(time.Minute).UnixNano()
	for _, c := range []struct {
		key         string
		size        time.Duration
		start       int64
		ok, ahead   bool
		description string
	}{
		{"k", time.Minute, cur, true, false, "current window"},
		{"k", time.Minute, cur - int64(time.Minute), true, false, "previous window"},
		{"k", time.Minute, cur - 2*int64(time.Minute), false, false, "older window"},
		{"k", time.Minute, cur + int64(time.Minute), false, true, "next window"},
		{"k", time.Hour, cur, false, false, "unknown size"},
		{"other", time.Minute, cur, false, false, "key not held"},
	} {
		w, ok, ahead := ns.InterestWindow(now, c.key, c.size, c.start)
		if ok != c.ok || ahead != c.ahead {
			t.Errorf("%s: ok %v ahead %v, want %v %v", c.description, ok, ahead, c.ok, c.ahead)
		}
		if ok {
			ns.SetOthers(w, 2*ratelimit.Micro)
		}
	}
	rates, err := ns.RateAt(now, "k", time.Minute, 0, nil)
	// 1 own + 2 others now, 2 others in the previous minute weighted by 30/60.
	if err != nil || !near(rates[0].Rate, 4) {
		t.Errorf("rate %v, %v; want 4 after the others were set through the windows found", rates, err)
	}
}

// TestChangedCapsReachBucketsAndLeases: a namespace whose max_keys or
// max_bytes changes keeps its buckets and leases, under the new caps
// from the commit on: a raised cap admits new keys, a lowered one refuses
// them while the keys held stay.
func TestChangedCapsReachBucketsAndLeases(t *testing.T) {
	clock := newFakeClock(epoch)
	cfg := func(maxKeys int, maxBytes int64) []node.Config {
		return []node.Config{{Name: "api", WindowSizes: []time.Duration{time.Minute}, MaxKeys: maxKeys, MaxBytes: maxBytes}}
	}
	n, err := node.New(cfg(2, 0), clock)
	if err != nil {
		t.Fatal(err)
	}
	fixed := func(key string) error {
		ns, _ := n.Namespace("api")
		_, err := ns.AllowAt(clock.Now(), ratelimit.AllowRequest{Key: key, Cost: 1,
			Limits: []ratelimit.Limit{{Kind: ratelimit.FixedLimit, Fixed: ratelimit.FixedBucket{Period: time.Hour, Limit: 10}}}}, nil)
		return err
	}
	lease := func(key string) error {
		ns, _ := n.Namespace("api")
		_, err := ns.Leases().Acquire(clock.Now(), key, 5, time.Minute)
		return err
	}
	change := func(maxKeys int, maxBytes int64) {
		t.Helper()
		c, err := n.Prepare(cfg(maxKeys, maxBytes))
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Replaced) != 1 {
			t.Fatalf("change to max_keys %d: %+v, want api replaced", maxKeys, c)
		}
		if err := n.Commit(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"a", "b"} {
		if fixed(k) != nil || lease(k) != nil {
			t.Fatalf("key %s under max_keys 2 refused", k)
		}
	}
	if !errors.Is(fixed("c"), node.ErrKeyLimit) || !errors.Is(lease("c"), node.ErrKeyLimit) {
		t.Fatal("a third key under max_keys 2 admitted")
	}
	change(3, 0)
	if err := fixed("c"); err != nil {
		t.Errorf("bucket of a third key after max_keys 2 -> 3: %v", err)
	}
	if err := lease("c"); err != nil {
		t.Errorf("lease of a third key after max_keys 2 -> 3: %v", err)
	}
	change(1, 0)
	if !errors.Is(fixed("d"), node.ErrKeyLimit) || !errors.Is(lease("d"), node.ErrKeyLimit) {
		t.Error("a new key admitted after max_keys 3 -> 1")
	}
	if fixed("a") != nil || lease("a") != nil {
		t.Error("a key held refused after max_keys 3 -> 1")
	}
	change(2000, node.MinMaxBytes)
	// Keys of 1 KiB until the budget refuses one: what max_bytes holds
	// beside a, b and c's buckets.
	want := int((node.MinMaxBytes - 3*node.BucketCost(1)) / node.BucketCost(1024))
	for i := range 2000 {
		err := fixed(fmt.Sprintf("%01024d", i))
		if err == nil {
			continue
		}
		if i != want || !strings.Contains(err.Error(), "max_bytes") {
			t.Errorf("max_bytes %d refused the %dth bucket of a 1 KiB key (%v), want the %dth", node.MinMaxBytes, i+1, err, want+1)
		}
		return
	}
	t.Errorf("max_bytes %d admitted 2000 buckets of 1 KiB keys", node.MinMaxBytes)
}
