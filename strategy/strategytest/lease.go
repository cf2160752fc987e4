package strategytest

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// The LeaseStore subtests. Every reply is compared with the reference,
// clustersync.ApplyLease run here on one LeaseSet per (namespace, key):
// OK, Held and Next must agree exactly.

const sec = int64(time.Second)

// leaseRef is the reference's lease sets, by namespace and key.
type leaseRef map[[2]string]*clustersync.LeaseSet

// apply runs ops at now on r and returns the reference's replies.
func (r leaseRef) apply(now int64, ops []clustersync.LeaseOp) []clustersync.LeaseReply {
	want := make([]clustersync.LeaseReply, len(ops))
	for i, op := range ops {
		k := [2]string{op.Namespace, op.Key}
		s := r[k]
		if s == nil {
			s = &clustersync.LeaseSet{}
			r[k] = s
		}
		want[i] = clustersync.ApplyLease(s, now, op)
	}
	return want
}

// leaseStart returns the first now of a lease subtest: a minute ahead of
// the wall clock. A store may drop a key's sets by the wall clock once
// its latest expiry has passed; keeping the test's clock ahead of the wall
// clock for the subtest's whole run means nothing the test still counts
// as live can have been dropped that way. The subtests then only move now
// forward by adding to it.
func leaseStart() int64 { return time.Now().UnixNano() + int64(time.Minute) }

// leases sends ops at now to the store in one call, applies them to ref,
// fails t unless every reply equals the reference's, and returns the
// store's replies.
func (e *env) leases(t *testing.T, ref leaseRef, now int64, ops ...clustersync.LeaseOp) []clustersync.LeaseReply {
	t.Helper()
	ls := as[clustersync.LeaseStore](t, e)
	got := make([]clustersync.LeaseReply, len(ops))
	for i := range got {
		got[i] = clustersync.LeaseReply{OK: true, Held: unset, Next: unset} // the store must overwrite every reply
	}
	if err := ls.Leases(ctx(t, callTimeout), now, ops, got); err != nil {
		t.Fatalf("Leases(%d ops at %d): %v", len(ops), now, err)
	}
	if ref == nil {
		return got
	}
	want := ref.apply(now, ops)
	for i := range ops {
		if got[i] != want[i] {
			t.Errorf("Leases at %d, op %d of %d (%s):\n got %+v\nwant %+v", now, i, len(ops), showOp(ops[i], now), got[i], want[i])
		}
	}
	return got
}

// lease sends one op and checks its reply against the reference, and its
// OK against ok, what the script expects (a mismatch with the reference
// there is a bug of the script).
func (e *env) lease(t *testing.T, ref leaseRef, now int64, op clustersync.LeaseOp, ok bool) clustersync.LeaseReply {
	t.Helper()
	var c clustersync.LeaseSet // a copy: the reference applies op in leases
	if s := ref[[2]string{op.Namespace, op.Key}]; s != nil {
		c = clustersync.LeaseSet{Live: maps.Clone(s.Live), Released: maps.Clone(s.Released)}
	}
	if want := clustersync.ApplyLease(&c, now, op).OK; want != ok {
		t.Fatalf("script: %s: expects OK = %v, the reference says %v", showOp(op, now), ok, want)
	}
	return e.leases(t, ref, now, op)[0]
}

// showOp formats op for messages, with its expiry relative to now.
func showOp(op clustersync.LeaseOp, now int64) string {
	key := op.Key
	if len(key) > 40 {
		key = key[:40] + "…"
	}
	s := fmt.Sprintf("%s ns=%q key=%q (%d bytes)", op.Kind, op.Namespace, key, len(op.Key))
	switch op.Kind {
	case clustersync.LeaseCount:
		return s
	case clustersync.LeaseClear:
		return s + fmt.Sprintf(" expiry=now%+.3fs", float64(op.Expiry-now)/float64(sec))
	}
	s += fmt.Sprintf(" id=%q", op.ID)
	if op.Kind == clustersync.LeaseAcquire {
		s += fmt.Sprintf(" limit=%d", op.Limit)
	}
	return s + fmt.Sprintf(" expiry=now%+.3fs", float64(op.Expiry-now)/float64(sec))
}

// leaseKey builds ops on one (namespace, key).
type leaseKey struct{ ns, key string }

func (e *env) lkey(key string) leaseKey { return leaseKey{e.ns, key} }

func (k leaseKey) acquire(id string, limit, expiry int64) clustersync.LeaseOp {
	return clustersync.LeaseOp{Kind: clustersync.LeaseAcquire, Namespace: k.ns, Key: k.key, ID: id, Limit: limit, Expiry: expiry}
}

func (k leaseKey) put(id string, expiry int64) clustersync.LeaseOp {
	return clustersync.LeaseOp{Kind: clustersync.LeasePut, Namespace: k.ns, Key: k.key, ID: id, Expiry: expiry}
}

func (k leaseKey) release(id string, until int64) clustersync.LeaseOp {
	return clustersync.LeaseOp{Kind: clustersync.LeaseRelease, Namespace: k.ns, Key: k.key, ID: id, Expiry: until}
}

func (k leaseKey) renew(id string, expiry int64) clustersync.LeaseOp {
	return clustersync.LeaseOp{Kind: clustersync.LeaseRenew, Namespace: k.ns, Key: k.key, ID: id, Expiry: expiry}
}

func (k leaseKey) count() clustersync.LeaseOp {
	return clustersync.LeaseOp{Kind: clustersync.LeaseCount, Namespace: k.ns, Key: k.key}
}

func testLeaseArithmetic(t *testing.T, e *env) {
	ref := leaseRef{}
	t0 := leaseStart()
	at := func(s int64) int64 { return t0 + s*sec }
	k1, k2 := e.lkey("k1"), e.lkey("k2")
	now := at(0)
	do := func(op clustersync.LeaseOp, ok bool) clustersync.LeaseReply {
		t.Helper()
		return e.lease(t, ref, now, op, ok)
	}

	// Up to the limit of 3, then refused.
	do(k1.count(), true) // nothing yet: Held 0, Next 0
	do(k1.acquire("a", 3, at(60)), true)
	do(k1.acquire("b", 3, at(30)), true)
	do(k1.acquire("c", 3, at(90)), true)
	do(k1.acquire("d", 3, at(60)), false)
	// A replayed acquire at the limit is granted and counted once; it
	// keeps the later expiry.
	do(k1.acquire("a", 3, at(120)), true)
	do(k1.acquire("b", 3, at(10)), true)
	do(k1.acquire("a", 2, at(120)), true) // a lower limit does not refuse a live id

	// Release frees a slot and is remembered: a late put or acquire of
	// the same id is refused; a second release finds nothing live.
	now = at(1)
	do(k1.release("b", at(5)), true) // remembered until b's expiry, at(30)
	do(k1.acquire("d", 3, at(60)), true)
	do(k1.put("b", at(60)), false)
	do(k1.acquire("b", 4, at(60)), false)
	do(k1.release("b", at(5)), false)

	// Renew longer and shorter; renew of a released or unknown id.
	now = at(2)
	do(k1.renew("a", at(200)), true)
	do(k1.renew("c", at(20)), true) // shorter: c is now the next to expire
	do(k1.renew("b", at(100)), false)
	do(k1.renew("zz", at(100)), false)

	// Put adds whatever the limit, and only moves an expiry later.
	do(k1.put("e", at(40)), true)
	do(k1.put("e", at(80)), true)
	do(k1.put("e", at(50)), true)
	do(k1.put("a", at(150)), true) // existing, earlier: unchanged
	do(k1.acquire("f", 10, at(60)), true)
	do(k1.count(), true)

	// The second key is counted apart.
	do(k2.acquire("a", 2, at(15)), true)
	do(k2.acquire("b", 2, at(25)), true)
	do(k2.acquire("c", 2, at(25)), false)
	do(k2.count(), true)

	// Expiry by moving now: k2's a expires at 15.
	now = at(15)
	do(k2.count(), true)
	do(k2.acquire("c", 2, at(45)), true)
	do(k2.acquire("d", 2, at(45)), false)
	do(k1.put("b", at(60)), false) // still released until at(30)
	// c (renewed to at(20)) and b's release (at(30)) pass.
	now = at(30)
	do(k1.count(), true)
	do(k1.put("b", at(70)), true)
	do(k2.acquire("d", 2, at(45)), true) // k2's b expired at 25

	// Ops whose expiry is at or before now change nothing; a release
	// still removes the id.
	do(k2.acquire("x", 5, now), false)
	do(k1.put("y", now-1), false)
	do(k1.renew("a", now), false)
	do(k1.acquire("a", 5, now-sec), false) // a replay of a live id too
	do(k1.release("a", now), true)         // remembered until a's own expiry, at(200)
	do(k1.acquire("a", 10, at(300)), false)
	do(k1.release("ghost", now), false) // unknown and already past: nothing to remember
	do(k1.put("ghost", at(90)), true)

	// Past every expiry the sets are empty and a is granted again.
	now = at(201)
	do(k1.count(), true)
	do(k2.count(), true)
	do(k1.acquire("a", 1, at(260)), true)
	do(k1.count(), true)
}

func testLeaseBatchOrder(t *testing.T, e *env) {
	ref := leaseRef{}
	t0 := leaseStart()
	at := func(s int64) int64 { return t0 + s*sec }
	ns2 := namespace(t)
	k1, k2, other := e.lkey("k1"), e.lkey("k2"), leaseKey{ns2, "k1"}
	// One call, keys interleaved: each op sees the ops before it.
	replies := e.leases(t, ref, at(0),
		k1.acquire("a", 1, at(60)),
		other.acquire("a", 1, at(60)), // another namespace: its own limit
		k1.acquire("b", 1, at(60)),    // refused: a holds k1
		k2.put("x", at(30)),
		k1.release("a", at(10)),
		k1.acquire("b", 1, at(60)), // granted now that a is released
		k2.renew("x", at(20)),
		k1.put("a", at(90)), // refused: released earlier in this call
		other.count(),
		k2.count(),
		k1.count(),
	)
	wantOK := []bool{true, true, false, true, true, true, true, false, true, true, true}
	for i, r := range replies {
		if r.OK != wantOK[i] {
			t.Errorf("op %d: OK = %v, want %v", i, r.OK, wantOK[i])
		}
	}
	// A second call: b's release frees k1's one slot for c, not for d.
	e.leases(t, ref, at(1),
		k1.release("b", at(5)),
		k1.acquire("c", 1, at(60)),
		k1.acquire("d", 1, at(60)),
		other.release("a", at(5)),
		other.acquire("b", 1, at(60)),
		k2.renew("x", at(25)),
		k2.put("x", at(20)),
	)
	// A call whose replies do not match its ops is refused.
	ls := as[clustersync.LeaseStore](t, e)
	ops := []clustersync.LeaseOp{k1.count(), k2.count()}
	for _, n := range []int{0, 1, 3} {
		if err := ls.Leases(ctx(t, callTimeout), at(2), ops, make([]clustersync.LeaseReply, n)); err == nil {
			t.Errorf("Leases(2 ops, %d replies): got nil error, want one", n)
		}
	}
	// An empty call is fine.
	if err := ls.Leases(ctx(t, callTimeout), at(2), nil, nil); err != nil {
		t.Errorf("Leases(no ops): %v", err)
	}
	e.leases(t, ref, at(2), k1.count(), k2.count(), other.count())
}

func testLeaseKeys(t *testing.T, e *env) {
	ref := leaseRef{}
	t0 := leaseStart()
	now := t0
	long := strings.Repeat("κ", 512) // 1 KiB
	keys := []string{"k", "k:1", "k:", "{k}", "{k", "k}", "{}", "k 1", " k", "ключ", "鍵🔑", "k\x00", long, long[:1022] + "x"}
	// A key that is a prefix of another, and the namespace's last
	// characters moved into the key.
	keys = append(keys, "kk", "k1")
	var lks []leaseKey
	for _, k := range keys {
		lks = append(lks, e.lkey(k))
	}
	ns2 := namespace(t)
	lks = append(lks, leaseKey{ns2, "k"}, leaseKey{e.ns[:len(e.ns)-1], e.ns[len(e.ns)-1:] + "k"})
	for i, k := range lks {
		for j := range i + 1 {
			e.leases(t, ref, now, k.acquire(fmt.Sprintf("id%d", j), 100, now+int64(i+1)*sec*10))
		}
	}
	now += sec
	for i, k := range lks {
		r := e.leases(t, ref, now, k.count())[0]
		if r.Held != int64(i+1) {
			t.Errorf("ns=%q key %q (%d bytes): Held = %d, want %d", k.ns, showKey(k.key), len(k.key), r.Held, i+1)
		}
	}
	// Several keys in one call, each its own set.
	ops := make([]clustersync.LeaseOp, 0, 2*len(lks))
	for _, k := range lks {
		ops = append(ops, k.release("id0", now+sec), k.count())
	}
	e.leases(t, ref, now, ops...)
}

func showKey(k string) string {
	if len(k) > 40 {
		return k[:40] + "…"
	}
	return k
}

func testLeaseExact(t *testing.T, e *env) {
	const workers, per, limit = 16, 20, 25
	ls := as[clustersync.LeaseStore](t, e)
	now := leaseStart()
	k := e.lkey("exact")
	c := ctx(t, callTimeout)
	var granted atomic.Int64
	var wg gosync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			<-start
			for i := range per {
				op := k.acquire(fmt.Sprintf("w%d.%d", w, i), limit, now+int64(time.Minute))
				r := make([]clustersync.LeaseReply, 1)
				// A store that times out under the contention (Cassandra's
				// lightweight transactions) is retried with the same op,
				// as its callers do: a replay, counted once.
				err := ls.Leases(c, now, []clustersync.LeaseOp{op}, r)
				for tries := 1; err != nil && errors.Is(err, clustersync.ErrUnavailable) && c.Err() == nil && tries < 5; tries++ {
					err = ls.Leases(c, now, []clustersync.LeaseOp{op}, r)
				}
				if err != nil {
					t.Errorf("Leases(acquire %s): %v", op.ID, err)
					return
				}
				if r[0].OK {
					granted.Add(1)
				}
				if r[0].Held > limit {
					t.Errorf("acquire %s: Held = %d, over the limit %d", op.ID, r[0].Held, limit)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := granted.Load(); got != limit {
		t.Errorf("%d goroutines × %d acquires of distinct ids, limit %d: %d granted, want %d", workers, per, limit, got, limit)
	}
	r := e.leases(t, nil, now, k.count())[0]
	if r.Held != limit || r.Next != now+int64(time.Minute) {
		t.Errorf("after the race: Held %d, Next %d; want %d, %d", r.Held, r.Next, limit, now+int64(time.Minute))
	}
}

func testLeaseReleasesRemembered(t *testing.T, e *env) {
	ref := leaseRef{}
	t0 := leaseStart()
	at := func(s int64) int64 { return t0 + s*sec }
	k := e.lkey("r")
	now := at(0)
	do := func(op clustersync.LeaseOp, ok bool) {
		t.Helper()
		e.lease(t, ref, now, op, ok)
	}
	// A release that arrives before its put (from another node, say).
	do(k.release("ghost", at(10)), false)
	do(k.put("ghost", at(60)), false)
	do(k.acquire("ghost", 5, at(60)), false)
	now = at(9)
	do(k.put("ghost", at(60)), false)
	do(k.count(), true)
	now = at(10)
	do(k.put("ghost", at(60)), true)

	// A release remembered past its own time by the lease's expiry.
	do(k.put("x", at(100)), true)
	do(k.release("x", at(20)), true)
	now = at(50)
	do(k.put("x", at(120)), false)
	do(k.renew("x", at(120)), false)
	// Released again later: remembered until the later time.
	do(k.release("x", at(150)), false)
	now = at(120)
	do(k.acquire("x", 5, at(200)), false)
	now = at(150)
	do(k.acquire("x", 5, at(200)), true)

	// Releases of several ids in one call, then their late puts.
	e.leases(t, ref, now, k.release("p", at(160)), k.release("q", at(170)), k.put("p", at(200)), k.put("q", at(200)))
	now = at(165)
	e.leases(t, ref, now, k.put("p", at(200)), k.put("q", at(200)), k.count())
}
