package service_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/limiterd/limiterd/auth"
	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/service"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// clusterNode is one node of an in-process cluster over one store.
type clusterNode struct {
	svc *service.Service
	sy  *clustersync.Syncer
}

// newCluster starts n nodes serving "default" (windows of 1 s and 1 min)
// in the mode of syncRate (not local only) over one in-memory store, on
// one fake clock. Their syncers tick only when a test calls SyncOnce.
func newCluster(tb testing.TB, n int, syncRate float64) ([]clusterNode, *fakeclock.Clock) {
	tb.Helper()
	clock := fakeclock.New(now)
	store := memory.New(memory.WithClock(clock.Now))
	var out []clusterNode
	for i := range n {
		cfg := node.Config{Name: "default", WindowSizes: []time.Duration{time.Second, time.Minute}, Shared: true}
		nd, err := node.New([]node.Config{cfg}, clock)
		if err != nil {
			tb.Fatal(err)
		}
		ns, err := nd.Namespace("")
		if err != nil {
			tb.Fatal(err)
		}
		sy, err := clustersync.NewSyncer(ns, modeOf(tb, syncRate), store, clustersync.NewIncarnation(fmt.Sprintf("n%d", i)),
			clustersync.NewVersions(clock.Now), clustersync.Config{}, nil, nil)
		if err != nil {
			tb.Fatal(err)
		}
		svc, err := service.New(nd, sy)
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, clusterNode{svc: svc, sy: sy})
	}
	return out, clock
}

// tick runs one sync tick on every node.
func tick(tb testing.TB, nodes []clusterNode) {
	tb.Helper()
	for _, n := range nodes {
		if err := n.sy.SyncOnce(context.Background()); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestResetAcrossTheCluster is the in-process acceptance test of a
// reset: a key at its limit on three nodes over one store is admitted at
// once on the node that took the reset and, after one tick, on the
// others; a reset taken again is harmless (hits counted since count, the
// key is not reset twice over); the counts of other keys are untouched.
func TestResetAcrossTheCluster(t *testing.T) {
	ctx := context.Background()
	limits := []service.Limit{lim(time.Minute, 6)}
	for _, m := range modes {
		if m.syncRate < 0 {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			nodes, clock := newCluster(t, 3, m.syncRate)
			allow := func(i int, key string) bool {
				t.Helper()
				d, err := nodes[i].svc.Allow(ctx, service.AllowRequest{Key: key, Limits: limits}, nil)
				if err != nil {
					t.Fatal(err)
				}
				return d.Allowed
			}
			// Two hits on each node, and the previous minute's too: the
			// key is at its limit everywhere once the nodes synced.
			for i := range nodes {
				for range 2 {
					if !allow(i, "k") || !allow(i, "other") {
						t.Fatal("a hit under the limit is refused")
					}
				}
			}
			tick(t, nodes)
			tick(t, nodes)
			for i := range nodes {
				if allow(i, "k") {
					t.Fatalf("node %d admits a key at its limit", i)
				}
			}
			rates, err := nodes[0].svc.Reset(ctx, service.ResetRequest{Key: "k"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rates {
				if r.Rate != 0 {
					t.Errorf("the rate of %s after the reset is %g, want 0", r.Size, r.Rate)
				}
			}
			if !allow(0, "k") {
				t.Fatal("the node that took the reset refuses the key right after it")
			}
			clock.Add(100 * time.Millisecond)
			tick(t, nodes)
			for i := range nodes {
				if !allow(i, "k") {
					t.Fatalf("node %d refuses the key one tick after the reset", i)
				}
			}
			// 4 hits since the reset on a limit of 6: two more fit, a
			// third does not, once the nodes synced.
			tick(t, nodes)
			tick(t, nodes)
			if !allow(1, "k") || !allow(1, "k") {
				t.Fatal("the key is refused under its limit after the reset")
			}
			if allow(1, "k") {
				t.Error("the key is admitted past its limit after the reset: the reset forgot later hits")
			}
			// Taken again, it forgets the hits since: no more, no less.
			if _, err := nodes[2].svc.Reset(ctx, service.ResetRequest{Key: "k"}, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := nodes[2].svc.Reset(ctx, service.ResetRequest{Key: "k"}, nil); err != nil {
				t.Fatal(err)
			}
			tick(t, nodes)
			for i := range nodes {
				got, err := nodes[i].svc.SlidingWindow(ctx, service.RateRequest{Key: "k", WindowSize: time.Minute}, nil)
				if err != nil {
					t.Fatal(err)
				}
				if got[0].Rate != 0 {
					t.Errorf("node %d: rate %g after two resets, want 0", i, got[0].Rate)
				}
			}
			if !allow(1, "k") {
				t.Error("the key is refused after the second reset")
			}
			tick(t, nodes)
			got, err := nodes[0].svc.SlidingWindow(ctx, service.RateRequest{Key: "k", WindowSize: time.Minute}, nil)
			if err != nil || got[0].Rate != 1 {
				t.Errorf("rate %v, %v after one hit since the resets; want 1", got, err)
			}
			// The other key kept its counts.
			got, err = nodes[2].svc.SlidingWindow(ctx, service.RateRequest{Key: "other", WindowSize: time.Minute}, nil)
			if err != nil || got[0].Rate != 6 {
				t.Errorf("another key's rate %v, %v after the resets; want 6", got, err)
			}
		})
	}
}

// TestResetLocal: in a local namespace a reset forgets the key's counts in
// every window size, the previous windows' included, and nothing else;
// an estimator namespace refuses it.
func TestResetLocal(t *testing.T) {
	ctx := context.Background()
	s, ns := newService(t, -1)
	for _, key := range []string{"k", "j"} {
		if _, err := s.Increment(ctx, service.IncrementRequest{Key: key, Value: f64(5), At: now.Add(-40 * time.Second)}, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Increment(ctx, service.IncrementRequest{Key: key, Value: f64(3)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	rates, err := s.Reset(ctx, service.ResetRequest{Key: "k"}, nil)
	if err != nil || len(rates) != 2 || rates[0].Rate != 0 || rates[1].Rate != 0 {
		t.Fatalf("Reset = %v, %v; want two rates of 0", rates, err)
	}
	if got, _ := ns.RateAt(now, "j", time.Minute, 0, nil); got[0].Rate != 5.5 {
		t.Errorf("another key's rate %g after the reset, want 5.5 (3 + 5 × 30/60)", got[0].Rate)
	}
	if _, err := s.Increment(ctx, service.IncrementRequest{Key: "k"}, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := ns.RateAt(now, "k", 0, 0, nil); got[0].Rate != 1 || got[1].Rate != 1 {
		t.Errorf("rates %v after one hit since the reset, want 1 and 1", got)
	}
	if _, err := s.Reset(ctx, service.ResetRequest{Key: ""}, nil); !errors.Is(err, service.ErrInvalidKey) {
		t.Errorf("an empty key: %v, want ErrInvalidKey", err)
	}
	if _, err := s.Reset(ctx, service.ResetRequest{Namespace: "nope", Key: "k"}, nil); !errors.Is(err, service.ErrUnknownNamespace) {
		t.Errorf("an unknown namespace: %v, want ErrUnknownNamespace", err)
	}
	est, err := node.New([]node.Config{{Name: "default", WindowSizes: []time.Duration{time.Second}, Estimator: &node.EstimatorConfig{Hashes: 2, Slots: 16}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	es, err := service.New(est)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := es.Reset(ctx, service.ResetRequest{Key: "k"}, nil); !errors.Is(err, service.ErrFailedPrecondition) {
		t.Errorf("a reset in an estimator namespace: %v, want ErrFailedPrecondition", err)
	}
}

// TestResetNeedsAdmin: with authorization on, a reset without the admin
// grant of its namespace is refused and forgets nothing.
func TestResetNeedsAdmin(t *testing.T) {
	ctx := context.Background()
	base, ns := newService(t, -1)
	s := base.WithAuthorizer(newAuthorizer(t))
	if _, err := base.Increment(ctx, service.IncrementRequest{Key: "k"}, nil); err != nil {
		t.Fatal(err)
	}
	as := func(nsName string, ops auth.Op) context.Context {
		return auth.WithPrincipal(ctx, auth.NewPrincipal("p", []string{nsName}, ops))
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		want error
	}{
		{"anonymous", ctx, service.ErrUnauthenticated},
		{"writer", as("default", auth.Read|auth.Write), service.ErrPermissionDenied},
		{"admin elsewhere", as("other", auth.Admin), service.ErrPermissionDenied},
	} {
		if _, err := s.Reset(c.ctx, service.ResetRequest{Key: "k"}, nil); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if got, _ := ns.RateAt(now, "k", time.Minute, 0, nil); got[0].Rate != 1 {
			t.Fatalf("%s: a refused reset changed the rate to %g", c.name, got[0].Rate)
		}
	}
	if _, err := s.Reset(as("default", auth.Admin), service.ResetRequest{Key: "k"}, nil); err != nil {
		t.Fatalf("admin: %v", err)
	}
	if got, _ := ns.RateAt(now, "k", time.Minute, 0, nil); got[0].Rate != 0 {
		t.Errorf("rate %g after the admin's reset, want 0", got[0].Rate)
	}
}

// resetKinds are a bucket of each kind holding 3, that time does not
// refill within a test.
var resetKinds = []struct {
	name  string
	limit service.Limit
}{
	{"token", service.Limit{Kind: service.TokenKind, Token: service.TokenBucket{Max: 3, RefillTime: time.Hour}}},
	{"leaky", service.Limit{Kind: service.LeakyKind, Leaky: service.LeakyBucket{Size: 3, Interval: time.Hour}}},
	{"fixed", service.Limit{Kind: service.FixedKind, Fixed: service.FixedBucket{Limit: 3, Period: time.Hour}}},
}

// TestResetBucketsAcrossTheCluster is the in-process acceptance test of a
// bucket reset: a bucket at its limit on three nodes over one store is
// admitted at once on the node that took the reset and, after one tick,
// on the others; a reset taken again is harmless (takes since count once
// more, no more, no less); the key's sliding windows and other buckets
// are untouched.
func TestResetBucketsAcrossTheCluster(t *testing.T) {
	ctx := context.Background()
	for _, m := range modes {
		if m.syncRate < 0 {
			continue
		}
		for _, k := range resetKinds {
			t.Run(m.name+"/"+k.name, func(t *testing.T) {
				nodes, clock := newCluster(t, 3, m.syncRate)
				other := k.limit
				// Another bucket of the key, of the same capacity.
				other.Token.RefillTime, other.Leaky.Interval, other.Fixed.Period = 2*time.Hour, 2*time.Hour, 2*time.Hour
				allow := func(i int, l service.Limit) bool {
					t.Helper()
					d, err := nodes[i].svc.Allow(ctx, service.AllowRequest{Key: "k", Limits: []service.Limit{l}}, nil)
					if err != nil {
						t.Fatal(err)
					}
					return d.Allowed
				}
				for i := range nodes {
					if !allow(i, k.limit) || !allow(i, other) {
						t.Fatal("a take under the limit is refused")
					}
				}
				if _, err := nodes[0].svc.Increment(ctx, service.IncrementRequest{Key: "k", Value: f64(2)}, nil); err != nil {
					t.Fatal(err)
				}
				tick(t, nodes)
				tick(t, nodes)
				for i := range nodes {
					if allow(i, k.limit) {
						t.Fatalf("node %d admits a bucket at its limit", i)
					}
				}
				rates, err := nodes[0].svc.Reset(ctx, service.ResetRequest{Key: "k", Buckets: []service.Limit{k.limit}}, nil)
				if err != nil || len(rates) != 0 {
					t.Fatalf("Reset = %v, %v; want no rates", rates, err)
				}
				if !allow(0, k.limit) {
					t.Fatal("the node that took the reset refuses the bucket right after it")
				}
				clock.Add(100 * time.Millisecond)
				tick(t, nodes)
				for i := 1; i < len(nodes); i++ {
					if !allow(i, k.limit) {
						t.Fatalf("node %d refuses the bucket one tick after the reset", i)
					}
				}
				// 3 takes since the reset: the bucket is at its limit
				// again once the nodes synced.
				tick(t, nodes)
				tick(t, nodes)
				for i := range nodes {
					if allow(i, k.limit) {
						t.Errorf("node %d admits a take past the limit after the reset: the reset forgot later takes", i)
					}
				}
				// Taken again, twice (a retry): a new bucket, once.
				for range 2 {
					if _, err := nodes[2].svc.Reset(ctx, service.ResetRequest{Key: "k", Buckets: []service.Limit{k.limit}}, nil); err != nil {
						t.Fatal(err)
					}
				}
				tick(t, nodes)
				for i := range nodes {
					if !allow(i, k.limit) {
						t.Errorf("node %d refuses the bucket after the second reset", i)
					}
				}
				tick(t, nodes)
				tick(t, nodes)
				if allow(0, k.limit) {
					t.Error("a fourth take after the second reset is admitted")
				}
				// The other bucket and the windows kept their counts.
				if allow(1, other) {
					t.Error("another bucket of the key was reset")
				}
				got, err := nodes[0].svc.SlidingWindow(ctx, service.RateRequest{Key: "k", WindowSize: time.Minute}, nil)
				if err != nil || got[0].Rate != 2 {
					t.Errorf("the key's rate %v, %v after the bucket resets; want 2", got, err)
				}
			})
		}
	}
}

// TestResetLeasesAcrossTheCluster is the in-process acceptance test of a
// reset of leases: a key at its lease limit across three nodes over one
// store is freed by a reset at one node; another node acquires within a
// tick; the freed leases stay released (their Release answers false, a
// node that granted one drops it), and a reset taken again is harmless.
func TestResetLeasesAcrossTheCluster(t *testing.T) {
	ctx := context.Background()
	for _, m := range modes {
		if m.syncRate < 0 {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			nodes, _ := newCluster(t, 3, m.syncRate)
			acquire := func(i int) service.Acquired {
				t.Helper()
				a, err := nodes[i].svc.Acquire(ctx, service.AcquireRequest{Key: "job", Limit: 2, TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				return a
			}
			a0, a1 := acquire(0), acquire(1)
			if !a0.OK || !a1.OK {
				t.Fatal("a lease under the limit is refused")
			}
			tick(t, nodes)
			if acquire(2).OK {
				t.Fatal("a third lease of 2 is granted")
			}
			for range 2 {
				if _, err := nodes[0].svc.Reset(ctx, service.ResetRequest{Key: "job", Leases: true}, nil); err != nil {
					t.Fatal(err)
				}
			}
			tick(t, nodes)
			if !acquire(2).OK {
				t.Fatal("a lease is refused one tick after the reset freed the key")
			}
			if !acquire(1).OK {
				t.Fatal("a second lease is refused after the reset")
			}
			tick(t, nodes)
			tick(t, nodes)
			if acquire(0).OK {
				t.Error("a third lease of 2 is granted after the reset")
			}
			for _, l := range []string{a0.Lease, a1.Lease} {
				r, err := nodes[2].svc.Release(ctx, l)
				if err != nil || r.OK {
					t.Errorf("Release of a lease the reset freed: %+v, %v; want not held", r, err)
				}
			}
		})
	}
}

// TestResetBucketsAndLeasesLocal: in a local namespace a reset of
// buckets makes each a new one and leaves the key's windows, other
// buckets and leases alone; a reset of leases frees them all; a sliding
// window among the buckets is refused naming it.
func TestResetBucketsAndLeasesLocal(t *testing.T) {
	ctx := context.Background()
	s, _ := newService(t, -1)
	for _, k := range resetKinds {
		allow := func() bool {
			t.Helper()
			d, err := s.Allow(ctx, service.AllowRequest{Key: "k", Limits: []service.Limit{k.limit}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			return d.Allowed
		}
		for range 3 {
			allow()
		}
		if allow() {
			t.Fatalf("%s: a take past the limit is admitted", k.name)
		}
		if _, err := s.Reset(ctx, service.ResetRequest{Key: "k", Buckets: []service.Limit{k.limit}}, nil); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if !allow() {
				t.Fatalf("%s: take %d after the reset is refused", k.name, i+1)
			}
		}
		if allow() {
			t.Errorf("%s: a fourth take after the reset is admitted", k.name)
		}
	}
	a, err := s.Acquire(ctx, service.AcquireRequest{Key: "k", Limit: 1, TTL: time.Minute})
	if err != nil || !a.OK {
		t.Fatalf("Acquire: %+v, %v", a, err)
	}
	if _, err := s.Reset(ctx, service.ResetRequest{Key: "k", Leases: true}, nil); err != nil {
		t.Fatal(err)
	}
	if b, err := s.Acquire(ctx, service.AcquireRequest{Key: "k", Limit: 1, TTL: time.Minute}); err != nil || !b.OK {
		t.Errorf("Acquire after the reset of leases: %+v, %v; want granted", b, err)
	}
	if r, err := s.Release(ctx, a.Lease); err != nil || r.OK {
		t.Errorf("Release of a lease the reset freed: %+v, %v; want not held", r, err)
	}
	for _, c := range []struct {
		name, field string
		req         service.ResetRequest
	}{
		{"window", "buckets[1]", service.ResetRequest{Key: "k", Buckets: []service.Limit{resetKinds[0].limit, lim(time.Minute, 3)}}},
		{"bad bucket", "buckets[0].token.max", service.ResetRequest{Key: "k", Buckets: []service.Limit{{Kind: service.TokenKind, Token: service.TokenBucket{Max: -1, RefillTime: time.Second}}}}},
		{"twice", "buckets[1].fixed", service.ResetRequest{Key: "k", Buckets: []service.Limit{resetKinds[2].limit, resetKinds[2].limit}}},
	} {
		_, err := s.Reset(ctx, c.req, nil)
		var fe *service.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, service.ErrInvalidLimit) {
			t.Errorf("%s: %v, want ErrInvalidLimit on %s", c.name, err, c.field)
		}
	}
}

// TestResetBucketsNeedAdmin: a reset of buckets or leases needs the admin
// grant as a reset of windows does.
func TestResetBucketsNeedAdmin(t *testing.T) {
	ctx := context.Background()
	base, _ := newService(t, -1)
	s := base.WithAuthorizer(newAuthorizer(t))
	writer := auth.WithPrincipal(ctx, auth.NewPrincipal("p", []string{"default"}, auth.Read|auth.Write))
	admin := auth.WithPrincipal(ctx, auth.NewPrincipal("p", []string{"default"}, auth.Admin))
	for _, req := range []service.ResetRequest{
		{Key: "k", Buckets: []service.Limit{resetKinds[0].limit}},
		{Key: "k", Leases: true},
	} {
		if _, err := s.Reset(writer, req, nil); !errors.Is(err, service.ErrPermissionDenied) {
			t.Errorf("%+v by a writer: %v, want ErrPermissionDenied", req, err)
		}
		if _, err := s.Reset(admin, req, nil); err != nil {
			t.Errorf("%+v by an admin: %v", req, err)
		}
	}
}
