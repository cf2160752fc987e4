package sync_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"testing"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// TestApplyLeaseAtItsTimes: ApplyLease, step by step on one key's set, at
// the instants where a lease or a release ends. A lease is live until
// its expiry, not at it; a release is remembered until its time, not at
// it, nor at all when that time has come (a caller whose clock is behind
// may then put the id); an op whose expiry is its now is not valid; Next
// is 0 when nothing is held.
func TestApplyLeaseAtItsTimes(t *testing.T) {
	var s clustersync.LeaseSet
	steps := []struct {
		name string
		now  int64
		op   clustersync.LeaseOp
		ok   bool
		held int64
		next int64
	}{
		{"a count of nothing", 10, clustersync.LeaseOp{Kind: clustersync.LeaseCount}, true, 0, 0},
		{"an acquire expiring at its now", 10, clustersync.LeaseOp{Kind: clustersync.LeaseAcquire, ID: "a", Limit: 2, Expiry: 10}, false, 0, 0},
		{"an acquire to 20", 10, clustersync.LeaseOp{Kind: clustersync.LeaseAcquire, ID: "a", Limit: 2, Expiry: 20}, true, 1, 20},
		{"a count just before", 19, clustersync.LeaseOp{Kind: clustersync.LeaseCount}, true, 1, 20},
		{"a count at its expiry", 20, clustersync.LeaseOp{Kind: clustersync.LeaseCount}, true, 0, 0},
		{"a release of b remembered to 30", 20, clustersync.LeaseOp{Kind: clustersync.LeaseRelease, ID: "b", Expiry: 30}, false, 0, 0},
		{"a put of b before 30", 29, clustersync.LeaseOp{Kind: clustersync.LeasePut, ID: "b", Expiry: 50}, false, 0, 0},
		{"a put of b at 30", 30, clustersync.LeaseOp{Kind: clustersync.LeasePut, ID: "b", Expiry: 50}, true, 1, 50},
		{"a release of c to its now", 40, clustersync.LeaseOp{Kind: clustersync.LeaseRelease, ID: "c", Expiry: 40}, false, 1, 50},
		{"a put of c from a clock behind", 35, clustersync.LeaseOp{Kind: clustersync.LeasePut, ID: "c", Expiry: 60}, true, 2, 50},
		{"a clear", 41, clustersync.LeaseOp{Kind: clustersync.LeaseClear}, true, 0, 0},
		{"a put of b after the clear", 42, clustersync.LeaseOp{Kind: clustersync.LeasePut, ID: "b", Expiry: 70}, false, 0, 0},
	}
	for _, st := range steps {
		st.op.Namespace, st.op.Key = "api", "k"
		r := clustersync.ApplyLease(&s, st.now, st.op)
		if r.OK != st.ok || r.Held != st.held || r.Next != st.next {
			t.Errorf("%s: ok %v, held %d, next %d; want %v, %d, %d", st.name, r.OK, r.Held, r.Next, st.ok, st.held, st.next)
		}
	}
}

// TestLeasesPeriodicNewKeyReadsTheCount: a periodic node's first Acquire
// of a key it does not hold reads the others' count first, so a key the
// others hold at its limit is refused at once, with no tick of its own.
func TestLeasesPeriodicNewKeyReadsTheCount(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New()
	a := newLeaseNode(t, "a", 1, "", mem, clock)
	b := newLeaseNode(t, "b", 1, "", mem, clock)
	for range 3 {
		a.acquire(t, "k", 3)
	}
	syncAll(t, []testNode{a})
	if g := b.acquire(t, "k", 3); g.OK || g.Held != 3 {
		t.Errorf("b's first acquire of a key a holds at its limit: %+v, want refused at 3", g)
	}
}

// TestLeasesRenewAndReleaseWhereGranted: the node that granted a lease
// renews and releases it, in a periodic namespace in the node (the tick
// tells the store), in a synchronous one in the store at once.
func TestLeasesRenewAndReleaseWhereGranted(t *testing.T) {
	for _, syncRate := range []float64{1, 0} {
		t.Run(fmt.Sprint("sync_rate=", syncRate), func(t *testing.T) {
			clock := fakeclock.New(start)
			mem := memory.New()
			a := newLeaseNode(t, "a", syncRate, "", mem, clock)
			g := a.acquire(t, "k", 1)
			if !g.OK {
				t.Fatalf("acquire: %+v", g)
			}
			syncAll(t, []testNode{a})
			clock.Add(30 * time.Second)
			ok, exp, err := a.sy.Calls().RenewLease(context.Background(), clock.Now(), g.ID, time.Minute)
			if err != nil || !ok || exp != clock.Now().Add(time.Minute).UnixNano() {
				t.Fatalf("renew at the granting node: %v, %d, %v; want ok to a minute from now", ok, exp, err)
			}
			syncAll(t, []testNode{a})
			clock.Add(45 * time.Second) // past the first expiry, before the renewed one
			if got := storeHeld(t, mem, clock, "k"); got != 1 {
				t.Fatalf("store holds %d after the renewal, want 1", got)
			}
			ok, pending := a.release(t, g.ID)
			if !ok || pending {
				t.Fatalf("release at the granting node: ok %v, pending %v; want ok, not pending", ok, pending)
			}
			syncAll(t, []testNode{a})
			if got := storeHeld(t, mem, clock, "k"); got != 0 {
				t.Errorf("store holds %d after the release, want 0", got)
			}
		})
	}
}

// leaseBatches records the ops of every Leases call.
type leaseBatches struct {
	*memory.Store
	ops []int
}

func (l *leaseBatches) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	l.ops = append(l.ops, len(ops))
	return l.Store.Leases(ctx, now, ops, replies)
}

// TestLeasesTickInBatches: a tick sends its lease ops in calls of
// BatchSize ops or a little more (a key's ops are not split): with a
// batch of 4 and each of 6 keys writing a lease and reading its count,
// three calls of 4.
func TestLeasesTickInBatches(t *testing.T) {
	clock := fakeclock.New(start)
	rec := &leaseBatches{Store: memory.New()}
	ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Second}, Shared: true}, clock)
	if err != nil {
		t.Fatal(err)
	}
	sy, err := clustersync.NewSyncer(ns, clustersync.Periodic{Period: time.Second}, rec, clustersync.NewIncarnation("a"), clustersync.NewVersions(clock.Now),
		clustersync.Config{NoJitter: true, BatchSize: 4}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := testNode{ns: ns, sy: sy}
	for i := range 6 {
		a.acquire(t, fmt.Sprint("k", i), 1)
	}
	rec.ops = nil // the first acquires' count reads
	syncAll(t, []testNode{a})
	if !slices.Equal(rec.ops, []int{4, 4, 4}) {
		t.Errorf("a tick's lease calls of %v ops, want [4 4 4]", rec.ops)
	}
}
