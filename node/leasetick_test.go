package node_test

import (
	"testing"
	"time"

	"github.com/limiterd/limiterd/node"
	"github.com/limiterd/limiterd/ratelimit"
)

// opsOf returns the range of t's ops on key (lo == hi: none), checking
// they are together.
func opsOf(t *testing.T, lt *node.LeaseTick, key string) (lo, hi int) {
	t.Helper()
	lo, hi = -1, -1
	for i, k := range lt.OpKey {
		if k != key {
			continue
		}
		if lo < 0 {
			lo = i
		} else if hi != i {
			t.Fatalf("the ops of %q are not together: %v", key, lt.OpKey)
		}
		hi = i + 1
	}
	if lo < 0 {
		return 0, 0
	}
	return lo, hi
}

// answer records the store's answers to ops lo to hi: every write
// stored, each count held, next.
func answer(lt *node.LeaseTick, lo, hi int, held, next int64) {
	for i := lo; i < hi; i++ {
		lt.Got[i], lt.OK[i] = true, true
		if lt.OpID[i] == "" {
			lt.Held[i], lt.Next[i] = held, next
		}
	}
}

// TestLeaseTickListsOpsByKey: a tick lists a key's releases, then its
// leases' writes, then (All) its count, each key's ops together, with
// room for the answers; without All only the keys with something to
// send.
func TestLeaseTickListsOpsByKey(t *testing.T) {
	l := node.NewLeases("ns", 0)
	var gs []ratelimit.LeaseGrant
	for range 3 {
		g, err := l.Acquire(t0, "a", 5, time.Minute)
		if err != nil || !g.OK {
			t.Fatalf("Acquire: %+v, %v", g, err)
		}
		gs = append(gs, g)
	}
	if ok, _ := l.Release(t0, gs[0].ID, true); !ok {
		t.Fatal("Release")
	}
	gb, _ := l.Acquire(t0, "b", 5, time.Minute)
	if ok, _ := l.Release(t0, gb.ID, false); !ok { // b held, nothing to send
		t.Fatal("Release of b")
	}

	var lt node.LeaseTick
	l.TakeTick(t0, &lt)
	if len(lt.OpKey) != 3 || len(lt.Got) != 3 || len(lt.OK) != 3 || len(lt.Held) != 3 || len(lt.Next) != 3 {
		t.Fatalf("tick: %+v; want a's 3 ops with room for their answers", lt)
	}
	if lt.OpKey[0] != "a" || !lt.OpRelease[0] || lt.OpID[0] != node.StoreID(gs[0].ID) || lt.OpUntil[0] != gs[0].Expiry {
		t.Errorf("op 0: %s %s until %d (release %v); want a's release of %s until %d",
			lt.OpKey[0], lt.OpID[0], lt.OpUntil[0], lt.OpRelease[0], node.StoreID(gs[0].ID), gs[0].Expiry)
	}
	writes := map[string]int64{}
	for i := 1; i < 3; i++ {
		if lt.OpKey[i] != "a" || lt.OpRelease[i] || lt.OpID[i] == "" {
			t.Fatalf("op %d: %s %q (release %v); want a write of a", i, lt.OpKey[i], lt.OpID[i], lt.OpRelease[i])
		}
		writes[lt.OpID[i]] = lt.OpUntil[i]
	}
	for _, g := range gs[1:] {
		if writes[node.StoreID(g.ID)] != g.Expiry {
			t.Errorf("writes %v; want %s until %d", writes, node.StoreID(g.ID), g.Expiry)
		}
	}

	lt.All = true
	l.TakeTick(t0, &lt)
	for _, key := range []string{"a", "b"} {
		lo, hi := opsOf(t, &lt, key)
		if hi == lo || lt.OpID[hi-1] != "" || lt.OpUntil[hi-1] != 0 {
			t.Errorf("ops of %s: %v %q; want a count last", key, lt.OpKey[lo:hi], lt.OpID[lo:hi])
		}
	}
	if len(lt.OpKey) != 5 || !lt.All {
		t.Errorf("tick with All: %d ops (All %v); want 5, All kept", len(lt.OpKey), lt.All)
	}
}

// TestLeaseTickAppliesEachBatchOnce: a tick applied batch by batch, as
// each is answered, applies every answered key once; a key whose batch
// failed keeps its release and leases for the next tick.
func TestLeaseTickAppliesEachBatchOnce(t *testing.T) {
	l := node.NewLeases("ns", 0)
	for _, key := range []string{"a", "b", "c"} {
		if err := l.SetRead(t0, key, 0, 0); err != nil {
			t.Fatal(err)
		}
		g, _ := l.Acquire(t0, key, 10, time.Minute)
		if ok, _ := l.Release(t0, g.ID, true); !ok {
			t.Fatal("Release")
		}
		if g, _ := l.Acquire(t0, key, 10, time.Minute); !g.OK {
			t.Fatal("Acquire")
		}
	}
	// A synchronous namespace's tick: the store decides the leases it
	// took, which leave the node's own count.
	lt := node.LeaseTick{All: true}
	l.TakeTick(t0, &lt)
	// Batches in the order of the ops: a key's whole, one key each.
	var keys []string
	for i, k := range lt.OpKey {
		if i == 0 || k != lt.OpKey[i-1] {
			keys = append(keys, k)
		}
	}
	failed := keys[1]
	for _, key := range keys {
		if key == failed {
			continue
		}
		lo, hi := opsOf(t, &lt, key)
		answer(&lt, lo, hi, 3, t0.Add(time.Second).UnixNano()) // this node's and 2 others'
		if err := l.ApplyTick(t0, &lt); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range keys {
		// Applied once: the store's 3 but this node's 1 (dropped, the
		// store decides it) are the others', 2. Twice would count 3.
		want := int64(2)
		if key == failed {
			want = 1 // this node's, the count not read
		}
		if g, _ := l.Acquire(t0, key, 10, time.Minute); !g.OK || g.Held != want+1 {
			t.Errorf("Acquire of %s: %+v; want granted, %d held", key, g, want+1)
		}
	}
	next := node.LeaseTick{}
	l.TakeTick(t0, &next)
	for _, key := range keys {
		lo, hi := opsOf(t, &next, key)
		releases := 0
		for i := lo; i < hi; i++ {
			if next.OpRelease[i] {
				releases++
			}
		}
		want := 0
		if key == failed {
			want = 1
		}
		if releases != want {
			t.Errorf("%s: %d releases still to send, want %d", key, releases, want)
		}
	}
}

// TestLeaseTickCall: a call's exchange names its lease (a new one of Key
// when ID is zero) and whether this table granted it; what it leaves is
// applied: an unsent release, sent by the next tick, and a first read.
func TestLeaseTickCall(t *testing.T) {
	l := node.NewLeases("ns", 0)
	lt := node.LeaseTick{Key: "k"}
	l.TakeTick(t0, &lt)
	if lt.ID.Namespace != "ns" || lt.ID.Key != "k" || !lt.Mine || lt.StoreID != node.StoreID(lt.ID) || len(lt.StoreID) != 32 {
		t.Fatalf("new lease: %+v, store id %q, mine %v", lt.ID, lt.StoreID, lt.Mine)
	}
	if len(lt.OpKey) != 0 || len(lt.Got) != 0 {
		t.Errorf("a call's exchange lists ops: %v", lt.OpKey)
	}
	first := lt.ID
	l.TakeTick(t0, &lt)
	if lt.ID != first {
		t.Errorf("a call's ID changed from %+v to %+v on a second TakeTick", first, lt.ID)
	}

	other := node.NewLeases("ns", 0).NewID("k")
	call := node.LeaseTick{Key: "k", ID: other}
	l.TakeTick(t0, &call)
	if call.Mine || call.StoreID != node.StoreID(other) {
		t.Errorf("another table's lease: mine %v, store id %q; want not mine, %q", call.Mine, call.StoreID, node.StoreID(other))
	}
	call.Unsent, call.Until = true, t0.Add(time.Minute).UnixNano()
	if err := l.ApplyTick(t0, &call); err != nil {
		t.Fatal(err)
	}
	tick := node.LeaseTick{}
	l.TakeTick(t0, &tick)
	if len(tick.OpKey) != 1 || !tick.OpRelease[0] || tick.OpID[0] != node.StoreID(other) || tick.OpUntil[0] != call.Until {
		t.Errorf("tick after an unsent release: %+v; want its release", tick)
	}

	if l.Read(t0, "j") {
		t.Fatal("j read before its count")
	}
	read := node.LeaseTick{Key: "j", Counted: true, KeyHeld: 2}
	if err := l.ApplyTick(t0, &read); err != nil {
		t.Fatal(err)
	}
	if g, _ := l.Acquire(t0, "j", 3, time.Minute); !l.Read(t0, "j") || !g.OK || g.Held != 3 {
		t.Errorf("after the first read of j (2 held): %+v, read %v; want granted, 3 held", g, l.Read(t0, "j"))
	}
}
