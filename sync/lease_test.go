package sync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/limiterd/limiterd/internal/fakeclock"
	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

func newLeaseNode(t testing.TB, name string, syncRate float64, onDown clustersync.StoreDownPolicy, store clustersync.Store, clock node.Clock) testNode {
	t.Helper()
	ns, err := node.NewNamespace(node.Config{Name: "api", WindowSizes: []time.Duration{time.Second}, Shared: true}, clock)
	if err != nil {
		t.Fatal(err)
	}
	sy, err := clustersync.NewSyncer(ns, modeOf(t, syncRate), store, clustersync.NewIncarnation(name), clustersync.NewVersions(clock.Now),
		clustersync.Config{NoJitter: true, OnStoreDown: onDown}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return testNode{ns: ns, sy: sy}
}

func (n testNode) acquire(t testing.TB, key string, limit int64) ratelimit.LeaseGrant {
	t.Helper()
	g, err := n.sy.Calls().AcquireLease(context.Background(), n.ns.Now(), key, limit, time.Minute)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	return g
}

func (n testNode) release(t testing.TB, id ratelimit.LeaseID) (ok, pending bool) {
	t.Helper()
	ok, pending, err := n.sy.Calls().ReleaseLease(context.Background(), n.ns.Now(), id)
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	return ok, pending
}

// storeHeld is the key's live leases in the store.
func storeHeld(t testing.TB, ls clustersync.LeaseStore, clock node.Clock, key string) int64 {
	t.Helper()
	r := make([]clustersync.LeaseReply, 1)
	if err := ls.Leases(context.Background(), clock.Now().UnixNano(),
		[]clustersync.LeaseOp{{Kind: clustersync.LeaseCount, Namespace: "api", Key: key}}, r); err != nil {
		t.Fatal(err)
	}
	return r[0].Held
}

// TestLeasesSynchronousExact: nodes taking turns are granted exactly the
// limit; a release at any node frees one; a renewal at another node moves
// the expiry.
func TestLeasesSynchronousExact(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New()
	nodes := []testNode{newLeaseNode(t, "a", 0, "", mem, clock), newLeaseNode(t, "b", 0, "", mem, clock), newLeaseNode(t, "c", 0, "", mem, clock)}
	var held []ratelimit.LeaseID
	for i := range 12 {
		if g := nodes[i%3].acquire(t, "k", 5); g.OK {
			held = append(held, g.ID)
		} else if g.Held != 5 || g.Next != start.Add(time.Minute).UnixNano() {
			t.Fatalf("refusal %+v: want held 5, next at the first expiry", g)
		}
	}
	if len(held) != 5 {
		t.Fatalf("granted %d, want 5", len(held))
	}
	if ok, pending := nodes[2].release(t, held[0]); !ok || pending {
		t.Fatalf("release at another node: ok %v pending %v", ok, pending)
	}
	if ok, _ := nodes[1].release(t, held[0]); ok {
		t.Fatal("a second release reported live")
	}
	clock.Add(30 * time.Second)
	ok, exp, err := nodes[0].sy.Calls().RenewLease(context.Background(), clock.Now(), held[1], time.Minute)
	if err != nil || !ok || exp != clock.Now().Add(time.Minute).UnixNano() {
		t.Fatalf("renew at another node: %v %d %v", ok, exp, err)
	}
	clock.Add(31 * time.Second) // every lease but the renewed one expired
	if got := storeHeld(t, mem, clock, "k"); got != 1 {
		t.Fatalf("store holds %d leases, want 1", got)
	}
}

// TestLeasesSynchronousOutage: with on_store_down refuse an Acquire fails
// with ErrUnavailable; with local it is decided from the node's own
// leases, written to the store when it is back. A release that could not
// reach the store is sent by the tick, and an Acquire whose reply was
// lost is released: afterwards the store holds only leases callers hold.
func TestLeasesSynchronousOutage(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New()
	store := memory.NewFaulty(mem)
	refuse := newLeaseNode(t, "a", 0, "", store, clock)
	local := newLeaseNode(t, "b", 0, clustersync.StoreDownLocal, store, clock)
	before := refuse.acquire(t, "k", 10)
	store.Fail(nil)
	if _, err := refuse.sy.Calls().AcquireLease(context.Background(), clock.Now(), "k", 10, time.Minute); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Fatalf("acquire while down, refuse: %v, want ErrUnavailable", err)
	}
	var granted []ratelimit.LeaseID
	for range 3 {
		g := local.acquire(t, "k", 2)
		if g.OK {
			granted = append(granted, g.ID)
		}
	}
	if len(granted) != 2 {
		t.Fatalf("local fallback granted %d with limit 2, want 2 (this node's own)", len(granted))
	}
	if ok, pending := local.release(t, before.ID); ok || !pending {
		t.Fatalf("release while down: ok %v pending %v, want pending", ok, pending)
	}
	store.Heal()
	clock.Add(time.Second) // past the presumed outage
	syncAll(t, []testNode{refuse, local})
	// The store holds the two fallback leases only: the released one is
	// gone, and the refused node's failed Acquire was released.
	if got := storeHeld(t, mem, clock, "k"); got != 2 {
		t.Fatalf("store holds %d leases after recovery, want 2", got)
	}
	// The fallback leases now live in the store: released at another node.
	for _, id := range granted {
		if ok, _ := refuse.release(t, id); !ok {
			t.Fatalf("release of a fallback lease at another node: not live")
		}
	}
	if got := storeHeld(t, mem, clock, "k"); got != 0 {
		t.Fatalf("store holds %d leases, want 0", got)
	}
	syncAll(t, []testNode{refuse, local})
	if got := storeHeld(t, mem, clock, "k"); got != 0 {
		t.Fatalf("a tick brought back released leases: %d held", got)
	}
}

// lostAcquire applies Acquire ops but reports a failure, like a reply
// lost on the way back.
type lostAcquire struct{ *memory.Store }

func (s lostAcquire) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	err := s.Store.Leases(ctx, now, ops, replies)
	if err == nil && ops[0].Kind == clustersync.LeaseAcquire {
		return clustersync.ErrUnavailable
	}
	return err
}

func TestLeasesLostAcquireReleased(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New()
	n := newLeaseNode(t, "a", 0, "", lostAcquire{mem}, clock)
	if _, err := n.sy.Calls().AcquireLease(context.Background(), clock.Now(), "k", 1, time.Minute); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Fatalf("acquire: %v, want ErrUnavailable", err)
	}
	if got := storeHeld(t, mem, clock, "k"); got != 1 {
		t.Fatalf("store holds %d, want the lost grant (1)", got)
	}
	syncAll(t, []testNode{n})
	if got := storeHeld(t, mem, clock, "k"); got != 0 {
		t.Fatalf("store holds %d after the tick, want 0", got)
	}
}

// TestLeasesPeriodic: nodes decide from their own leases and the others'
// count of the last tick; a release at another node frees the lease in
// the store and, at its granting node's next tick, there too; a node's
// leases expire with their TTL when it is gone.
func TestLeasesPeriodic(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New()
	a := newLeaseNode(t, "a", 1, "", mem, clock)
	b := newLeaseNode(t, "b", 1, "", mem, clock)
	var fromA []ratelimit.LeaseID
	for range 3 {
		fromA = append(fromA, a.acquire(t, "k", 4).ID)
	}
	// b has not synced: it sees none of a's leases.
	if g := b.acquire(t, "k", 4); !g.OK || g.Held != 1 {
		t.Fatalf("b before a tick: %+v", g)
	}
	syncAll(t, []testNode{a, b, a})
	if g := b.acquire(t, "k", 4); g.OK || g.Held != 4 {
		t.Fatalf("b after the ticks: %+v, want refused at 4", g)
	}
	// Released at b (another node's lease): freed in the store at once.
	if ok, pending := b.release(t, fromA[0]); !ok || pending {
		t.Fatalf("release at b: %v %v", ok, pending)
	}
	if got := storeHeld(t, mem, clock, "k"); got != 3 {
		t.Fatalf("store holds %d, want 3", got)
	}
	syncAll(t, []testNode{a, b})
	if g := a.acquire(t, "k", 4); !g.OK || g.Held != 4 {
		t.Fatalf("a after b's release: %+v, want granted at 4", g)
	}
	if ok, _ := a.release(t, fromA[0]); ok {
		t.Fatal("a still held the lease released at b")
	}
	// a is gone (no more ticks): its leases expire with their TTL.
	syncAll(t, []testNode{a, b})
	clock.Add(time.Minute + time.Second)
	syncAll(t, []testNode{b})
	if g := b.acquire(t, "k", 1); !g.OK || g.Held != 1 {
		t.Fatalf("b after a's leases expired: %+v", g)
	}
}

func TestLeasesStoreWithout(t *testing.T) {
	clock := fakeclock.New(start)
	n := newLeaseNode(t, "a", 0, "", &recordingStore{mem: memory.New(), decides: true}, clock)
	if _, err := n.sy.Calls().AcquireLease(context.Background(), clock.Now(), "k", 1, time.Minute); !errors.Is(err, clustersync.ErrNoLeaseStore) {
		t.Fatalf("acquire on a store without leases: %v", err)
	}
}

// applyThenWait applies lease ops, then answers only when the call's
// context ends: a reply that never comes back in time.
type applyThenWait struct{ *memory.Store }

func (s applyThenWait) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	if err := s.Store.Leases(ctx, now, ops, replies); err != nil {
		return err
	}
	<-ctx.Done()
	return errors.Join(clustersync.ErrUnavailable, ctx.Err())
}

// TestLeasesCallerGivesUp: a caller whose deadline ends while the store
// holds its Acquire or Release loses nothing: the tick releases the lease
// no one holds, and sends the release.
func TestLeasesCallerGivesUp(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New()
	n := newLeaseNode(t, "a", 0, "", applyThenWait{mem}, clock)
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	if _, err := n.sy.Calls().AcquireLease(short(), clock.Now(), "k", 1, time.Minute); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire: %v, want the caller's deadline", err)
	}
	if got := storeHeld(t, mem, clock, "k"); got != 1 {
		t.Fatalf("store holds %d, want the grant no one holds (1)", got)
	}
	clock.Add(time.Second)     // past the presumed outage
	_ = n.sy.SyncOnce(short()) // applied, then not answered in time
	if got := storeHeld(t, mem, clock, "k"); got != 0 {
		t.Fatalf("store holds %d after the tick, want 0", got)
	}
}

// TestLeasesPeriodicRenewedElsewhere: a lease renewed at another node than
// the granting one stays held at the granting node past its first expiry:
// the granting node keeps it counted until its next tick reads the
// renewal from the store, then frees it at the renewed expiry. (It was
// freed at its first expiry, and granted again while its holder held it.)
func TestLeasesPeriodicRenewedElsewhere(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New()
	a := newLeaseNode(t, "a", 1, "", mem, clock)
	b := newLeaseNode(t, "b", 1, "", mem, clock)
	g := a.acquire(t, "k", 1) // expires at start + 1 min
	syncAll(t, []testNode{a, b})
	clock.Add(50 * time.Second)
	if ok, _, err := b.sy.Calls().RenewLease(context.Background(), clock.Now(), g.ID, time.Minute); !ok || err != nil {
		t.Fatalf("renew at b: %v %v", ok, err)
	}
	clock.Add(11 * time.Second) // past the first expiry, before a's next tick
	if got := a.acquire(t, "k", 1); got.OK {
		t.Fatalf("a granted the key's only lease while its renewed holder holds it: %+v", got)
	}
	syncAll(t, []testNode{a})
	if got := a.acquire(t, "k", 1); got.OK {
		t.Fatalf("a granted it after its tick: %+v", got)
	}
	clock.Add(50 * time.Second) // past the renewed expiry
	syncAll(t, []testNode{a})
	if got := a.acquire(t, "k", 1); !got.OK {
		t.Fatalf("a refused after the renewed expiry: %+v", got)
	}
}

// meanwhile runs during a lease call, after the store answered it: what
// a node does while its tick's answer is on the way back.
type meanwhile struct {
	*memory.Store
	during func()
}

func (s *meanwhile) Leases(ctx context.Context, now int64, ops []clustersync.LeaseOp, replies []clustersync.LeaseReply) error {
	err := s.Store.Leases(ctx, now, ops, replies)
	if f := s.during; f != nil && err == nil && ops[len(ops)-1].Kind == clustersync.LeaseCount {
		s.during = nil
		f()
	}
	return err
}

// TestLeasesExpiredDuringTick: a lease of the node that expires while its
// tick's answer is on the way (renewed at another node in the store, so
// still held) stays counted when the answer arrives: the answer's count of
// the node's own leases holds only those still the node's. (The tick took
// it from the others' count though the node no longer counted it as its
// own, and the key's two places were granted again.)
func TestLeasesExpiredDuringTick(t *testing.T) {
	clock := fakeclock.New(start)
	mem := memory.New(memory.WithClock(clock.Now))
	st := &meanwhile{Store: mem}
	a := newLeaseNode(t, "a", 1, "", st, clock)
	b := newLeaseNode(t, "b", 1, "", mem, clock)
	g, err := a.sy.Calls().AcquireLease(context.Background(), clock.Now(), "k", 2, time.Second)
	if err != nil || !g.OK {
		t.Fatalf("acquire: %+v %v", g, err)
	}
	syncAll(t, []testNode{a}) // the lease in the store
	clock.Add(500 * time.Millisecond)
	if ok, _, err := b.sy.Calls().RenewLease(context.Background(), clock.Now(), g.ID, time.Second); !ok || err != nil {
		t.Fatalf("renew at b: %v %v", ok, err)
	}
	clock.Add(490 * time.Millisecond) // 10 ms before the first expiry
	granted := 0
	st.during = func() {
		clock.Add(20 * time.Millisecond) // past it
		if g, err := a.sy.Calls().AcquireLease(context.Background(), clock.Now(), "k", 2, time.Second); err == nil && g.OK {
			granted++
		}
	}
	syncAll(t, []testNode{a})
	if g, err := a.sy.Calls().AcquireLease(context.Background(), clock.Now(), "k", 2, time.Second); err == nil && g.OK {
		granted++
	}
	if granted != 1 {
		t.Errorf("a granted %d leases of a limit of 2 while the lease renewed at b is held, want 1", granted)
	}
}
