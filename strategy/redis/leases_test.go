package redis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	redisstore "github.com/limiterd/limiterd/strategy/redis"
	clustersync "github.com/limiterd/limiterd/sync"
)

func leaseOp(kind clustersync.LeaseOpKind, ns, key, id string, limit, expiry int64) clustersync.LeaseOp {
	return clustersync.LeaseOp{Kind: kind, Namespace: ns, Key: key, ID: id, Limit: limit, Expiry: expiry}
}

// leases sends ops at now and returns the replies.
func leases(tb testing.TB, s *redisstore.Store, now int64, ops ...clustersync.LeaseOp) []clustersync.LeaseReply {
	tb.Helper()
	replies := make([]clustersync.LeaseReply, len(ops))
	if err := s.Leases(ctxT(tb), now, ops, replies); err != nil {
		tb.Fatalf("Leases(%d ops): %v", len(ops), err)
	}
	return replies
}

// ceilMs is Unix ns t in Unix ms, rounded up.
func ceilMs(t int64) int64 { return (t + 999_999) / 1_000_000 }

// TestLeasesMatchReference sends random calls (several keys and
// namespaces per call, every kind, times a nanosecond apart, expiries at
// or before now, replays, late puts) to the store and to the reference,
// clustersync.ApplyLease, and wants the same replies. After every call
// each key's set and index must expire no earlier than the latest time
// the reference holds for the key.
func TestLeasesMatchReference(t *testing.T) {
	for _, seed := range []uint64{1, 2} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			s, prefix := newStoreAt(t, redisAddr(t))
			raw := rawClient(t, redisAddr(t))
			r := rand.New(rand.NewPCG(seed, 11))
			type nsKey struct{ ns, key string }
			keys := []nsKey{{"a", "k"}, {"a", "k\x00{x}"}, {"b", "k"}, {"a", "ключ:1"}}
			ids := []string{"n1.1", "n1.2", "n2.1", "n2.2", "n3.1", "", "id:{x}", "n4.1"}
			ref := map[nsKey]*clustersync.LeaseSet{}
			now := time.Now().UnixNano() + int64(time.Minute) // ahead of the wall clock: see strategytest
			for step := range 1500 {
				switch x := r.IntN(10); {
				case x < 5:
				case x < 8:
					now += r.Int64N(300) // within what one double cannot tell apart
				default:
					now += r.Int64N(int64(3 * time.Second))
				}
				ops := make([]clustersync.LeaseOp, 1+r.IntN(6))
				k := keys[r.IntN(len(keys))]
				for i := range ops {
					if r.IntN(3) == 0 {
						k = keys[r.IntN(len(keys))]
					}
					exp := now + []int64{-1, 0, 1, 255, 256, 257, r.Int64N(int64(time.Second)), r.Int64N(int64(5 * time.Second))}[r.IntN(8)]
					kind := clustersync.LeaseOpKind(1 + r.IntN(5))
					ops[i] = leaseOp(kind, k.ns, k.key, ids[r.IntN(len(ids))], int64(r.IntN(6)), exp)
				}
				got := leases(t, s, now, ops...)
				for i, op := range ops {
					k := nsKey{op.Namespace, op.Key}
					if ref[k] == nil {
						ref[k] = &clustersync.LeaseSet{}
					}
					want := clustersync.ApplyLease(ref[k], now, op)
					if got[i] != want {
						t.Fatalf("step %d op %d (%s %q %q id %q limit %d expiry now%+d):\n got %+v\nwant %+v",
							step, i, op.Kind, op.Namespace, op.Key, op.ID, op.Limit, op.Expiry-now, got[i], want)
					}
				}
				for k, set := range ref {
					e := set.Expiry()
					if e <= now {
						continue
					}
					for _, rk := range redisstore.LeaseKeys(prefix, k.ns, k.key) {
						ms, err := raw.PExpireTime(ctxT(t), rk).Result()
						if err != nil {
							t.Fatal(err)
						}
						if ms.Milliseconds() < ceilMs(e) {
							t.Fatalf("step %d: %q expires at %d ms, before the latest time it holds, %d ms", step, rk, ms.Milliseconds(), ceilMs(e))
						}
					}
				}
			}
		})
	}
}

// TestLeasesExpiry wants a key's set and index to expire at the latest
// expiry or until sent, in ms rounded up (never earlier), and to be gone
// once a call finds everything they held past.
func TestLeasesExpiry(t *testing.T) {
	s, prefix := newStoreAt(t, redisAddr(t))
	raw := rawClient(t, redisAddr(t))
	rks := redisstore.LeaseKeys(prefix, "exp", "k")
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond).UnixNano()
	now := time.Now().UnixNano()
	ms := int64(time.Millisecond)
	expiry := func(want int64) {
		t.Helper()
		for _, rk := range rks {
			got, err := raw.Do(ctxT(t), "PEXPIRETIME", rk).Int64()
			if err != nil {
				t.Fatal(err)
			}
			if got != want/ms {
				t.Errorf("%s: PEXPIRETIME %d, want %d", rk, got, want/ms)
			}
		}
	}
	op := func(kind clustersync.LeaseOpKind, id string, exp int64) clustersync.LeaseOp {
		return leaseOp(kind, "exp", "k", id, 10, exp)
	}
	leases(t, s, now, op(clustersync.LeaseAcquire, "a", base+10*int64(time.Second)+300*int64(time.Microsecond)))
	expiry(base + 10*int64(time.Second) + ms) // rounded up
	leases(t, s, now, op(clustersync.LeaseRenew, "a", base+5*int64(time.Second)))
	expiry(base + 10*int64(time.Second) + ms) // shorter: kept
	leases(t, s, now, op(clustersync.LeasePut, "b", base+20*int64(time.Second)))
	expiry(base + 20*int64(time.Second))
	leases(t, s, now, op(clustersync.LeaseRelease, "b", base+30*int64(time.Second)))
	expiry(base + 30*int64(time.Second)) // the release is remembered
	// The only live lease released: the index and set keep the release.
	if n, err := raw.Exists(ctxT(t), rks[0], rks[1]).Result(); err != nil || n != 2 {
		t.Errorf("after releases: %d of the 2 keys exist (%v), want 2", n, err)
	}
	// Past every time held, a call leaves nothing behind.
	r := leases(t, s, base+31*int64(time.Second), op(clustersync.LeaseCount, "", 0))
	if r[0] != (clustersync.LeaseReply{OK: true}) {
		t.Errorf("count past every expiry: %+v, want OK and nothing held", r[0])
	}
	if n, err := raw.Exists(ctxT(t), rks[0], rks[1]).Result(); err != nil || n != 0 {
		t.Errorf("past every expiry: %d of the 2 keys exist (%v), want none", n, err)
	}
	// An op whose expiry is already past writes nothing.
	leases(t, s, now, op(clustersync.LeasePut, "c", now), op(clustersync.LeaseRelease, "d", now-1))
	if n, err := raw.Exists(ctxT(t), rks[0], rks[1]).Result(); err != nil || n != 0 {
		t.Errorf("after ops already expired: %d of the 2 keys exist (%v), want none", n, err)
	}
}

// TestLeasesRoundTrips: a call of one key is one script call, without a
// pipeline; a call of many keys one pipelined round trip per 1000 ops.
func TestLeasesRoundTrips(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	hook := &countHook{}
	c.AddHook(hook)
	s := redisstore.New(c, newPrefix())
	t.Cleanup(func() { _ = s.Close() })
	now := time.Now().UnixNano()
	exp := now + int64(time.Minute)
	// Load the script (a first call after a server start takes EVAL too).
	leases(t, s, now, leaseOp(clustersync.LeaseCount, "rt", "warm", "", 0, 0))
	hook.n.Store(0)
	leases(t, s, now, leaseOp(clustersync.LeaseAcquire, "rt", "one", "a", 5, exp), leaseOp(clustersync.LeaseRelease, "rt", "one", "a", 0, exp))
	if got := hook.n.Load(); got != 1 {
		t.Errorf("a call of one key took %d round trips, want 1", got)
	}
	const n = 2500
	ops := make([]clustersync.LeaseOp, n)
	for i := range ops {
		ops[i] = leaseOp(clustersync.LeasePut, "rt", fmt.Sprint("key-", i/2), fmt.Sprint("id-", i), 0, exp)
	}
	hook.n.Store(0)
	replies := leases(t, s, now, ops...)
	if got := hook.n.Load(); got != 3 {
		t.Errorf("a call of %d ops over %d keys took %d round trips, want 3", n, n/2, got)
	}
	for i, r := range replies {
		if want := (clustersync.LeaseReply{OK: true, Held: int64(1 + i%2), Next: exp}); r != want {
			t.Fatalf("put %d: %+v, want %+v", i, r, want)
		}
	}
	// One key, more ops than one script call takes: in order, over 3
	// round trips.
	for i := range ops {
		ops[i] = leaseOp(clustersync.LeasePut, "rt", "big", fmt.Sprint("id-", i), 0, exp+int64(n-i))
	}
	hook.n.Store(0)
	replies = leases(t, s, now, ops...)
	if got := hook.n.Load(); got != 3 {
		t.Errorf("a call of %d ops of one key took %d round trips, want 3", n, got)
	}
	for i, r := range replies {
		if want := (clustersync.LeaseReply{OK: true, Held: int64(i + 1), Next: exp + int64(n-i)}); r != want {
			t.Fatalf("put %d of one key: %+v, want %+v", i, r, want)
		}
	}
}

// TestLeasesErrors: bad calls are refused before the server sees them;
// a done ctx and a closed store are reported.
func TestLeasesErrors(t *testing.T) {
	s := newStore(t)
	now := time.Now().UnixNano()
	op := leaseOp(clustersync.LeaseAcquire, "e", "k", "a", 1, now+int64(time.Minute))
	bad := op
	bad.Kind = 0
	if err := s.Leases(ctxT(t), now, []clustersync.LeaseOp{op, bad}, make([]clustersync.LeaseReply, 2)); err == nil || errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("an unknown kind: err = %v, want a call error", err)
	}
	if r := leases(t, s, now, leaseOp(clustersync.LeaseCount, "e", "k", "", 0, 0)); r[0].Held != 0 {
		t.Errorf("a call refused for its second op applied its first: %+v", r[0])
	}
	if err := s.Leases(ctxT(t), now, []clustersync.LeaseOp{op}, nil); err == nil {
		t.Error("len(replies) != len(ops): no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, ops := range [][]clustersync.LeaseOp{{op}, {op, leaseOp(clustersync.LeaseCount, "e", "other", "", 0, 0)}} {
		if err := s.Leases(ctx, now, ops, make([]clustersync.LeaseReply, len(ops))); !errors.Is(err, context.Canceled) || !errors.Is(err, clustersync.ErrUnavailable) {
			t.Errorf("a done ctx, %d ops: err = %v, want ErrUnavailable and context.Canceled", len(ops), err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Leases(ctxT(t), now, []clustersync.LeaseOp{op}, make([]clustersync.LeaseReply, 1)); !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("after Close: err = %v, want ErrClosed", err)
	}
}
