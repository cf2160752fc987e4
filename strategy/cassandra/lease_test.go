package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
	clustersync "github.com/limiterd/limiterd/sync"
)

var _ clustersync.LeaseStore = (*cassandrastore.Store)(nil)

// TestLeases checks the store against clustersync.ApplyLease, and what
// the conformance suite does not: the requests a call sends, the TTLs,
// the argument checks, a done context and Close.
func TestLeases(t *testing.T) {
	c := harness.SharedCassandra(t)
	e := newEnv(t, c)
	s := open(t, e.config())
	t.Run("Reference", func(t *testing.T) { testLeasesReference(t, s) })
	t.Run("Concurrent", func(t *testing.T) { testLeasesConcurrent(t, s) })
	t.Run("Requests", func(t *testing.T) { testLeasesRequests(t, s) })
	t.Run("TTL", func(t *testing.T) { testLeasesTTL(t, s) })
	t.Run("RowsWithoutSeq", func(t *testing.T) { testLeasesWithoutSeq(t, e, s) })
	t.Run("Errors", func(t *testing.T) { testLeasesErrors(t, e) })
}

// testLeasesReference runs a random script of calls (1 to 4 ops on 2
// keys, time moving forward) and compares every reply with the
// reference's.
func testLeasesReference(t *testing.T, s *cassandrastore.Store) {
	rng := rand.New(rand.NewPCG(1, 2))
	now := time.Now().UnixNano()
	sec := int64(time.Second)
	ref := map[string]*clustersync.LeaseSet{}
	kinds := []clustersync.LeaseOpKind{clustersync.LeaseAcquire, clustersync.LeaseAcquire, clustersync.LeasePut,
		clustersync.LeaseRelease, clustersync.LeaseRenew, clustersync.LeaseCount}
	var granted, refusedAtLimit, dropped int // the script reaches each case
	for call := range 60 {
		now += rng.Int64N(3 * sec)
		ops := make([]clustersync.LeaseOp, 1+rng.IntN(4))
		for i := range ops {
			op := clustersync.LeaseOp{
				Kind:      kinds[rng.IntN(len(kinds))],
				Namespace: "ref",
				Key:       []string{"a", "b"}[rng.IntN(2)],
				ID:        []string{"", "x", "y", "z", "w"}[rng.IntN(5)],
				Limit:     2,
				// Now and then at or before now: such ops change nothing.
				Expiry: now + rng.Int64N(12*sec) - sec,
			}
			if op.Kind == clustersync.LeaseCount {
				op.ID = ""
			}
			ops[i] = op
		}
		got := make([]clustersync.LeaseReply, len(ops))
		if err := s.Leases(ctx(t), now, ops, got); err != nil {
			t.Fatalf("call %d: Leases(%+v): %v", call, ops, err)
		}
		for i, op := range ops {
			set := ref[op.Key]
			if set == nil {
				set = &clustersync.LeaseSet{}
				ref[op.Key] = set
			}
			held := len(set.Live)
			want := clustersync.ApplyLease(set, now, op)
			if got[i] != want {
				t.Fatalf("call %d op %d %+v: reply %+v, want %+v", call, i, op, got[i], want)
			}
			switch {
			case op.Kind != clustersync.LeaseAcquire:
			case want.OK:
				granted++
			case want.Held == op.Limit:
				refusedAtLimit++
			}
			if op.Kind == clustersync.LeaseCount && int(want.Held) < held {
				dropped++
			}
		}
	}
	if granted == 0 || refusedAtLimit == 0 || dropped == 0 {
		t.Errorf("script granted %d acquires, refused %d at the limit, dropped expired leases on %d counts; want each > 0", granted, refusedAtLimit, dropped)
	}
}

// testLeasesConcurrent: 8 callers acquire distinct ids of one key with
// limit 10; exactly 10 are granted.
func testLeasesConcurrent(t *testing.T, s *cassandrastore.Store) {
	const callers, perCaller, limit = 8, 3, 10
	now := time.Now().UnixNano()
	var granted atomic.Int64
	var wg gosync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			replies := make([]clustersync.LeaseReply, 1)
			for i := range perCaller {
				op := clustersync.LeaseOp{Kind: clustersync.LeaseAcquire, Namespace: "conc", Key: "k",
					ID: fmt.Sprintf("c%d-%d", c, i), Limit: limit, Expiry: now + int64(time.Minute)}
				if err := s.Leases(ctx(t), now, []clustersync.LeaseOp{op}, replies); err != nil {
					t.Error(err)
					return
				}
				if replies[0].OK {
					granted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := granted.Load(); got != limit {
		t.Errorf("granted %d of %d acquires with limit %d, want %d", got, callers*perCaller, limit, limit)
	}
	replies := make([]clustersync.LeaseReply, 1)
	if err := s.Leases(ctx(t), now, []clustersync.LeaseOp{{Kind: clustersync.LeaseCount, Namespace: "conc", Key: "k"}}, replies); err != nil {
		t.Fatal(err)
	}
	if replies[0].Held != limit {
		t.Errorf("Held = %d after the acquires, want %d", replies[0].Held, limit)
	}
	t.Logf("retries after a failed condition: %d", cassandrastore.LeaseRetries(s))
}

// testLeasesRequests: a run of one key is one read and one batch, a
// count the read alone, a key met again in a call is not read again
// unless its run changes nothing.
func testLeasesRequests(t *testing.T, s *cassandrastore.Store) {
	now := time.Now().UnixNano()
	exp := now + int64(time.Minute)
	acq := func(key, id string) clustersync.LeaseOp {
		return clustersync.LeaseOp{Kind: clustersync.LeaseAcquire, Namespace: "req", Key: key, ID: id, Limit: 5, Expiry: exp}
	}
	count := func(key string) clustersync.LeaseOp {
		return clustersync.LeaseOp{Kind: clustersync.LeaseCount, Namespace: "req", Key: key}
	}
	for _, tc := range []struct {
		name  string
		ops   []clustersync.LeaseOp
		trips int64
	}{
		{"two acquires of a new key", []clustersync.LeaseOp{acq("a", "1"), acq("a", "2")}, 2},
		{"a replay", []clustersync.LeaseOp{acq("a", "1")}, 1},
		{"a count", []clustersync.LeaseOp{count("a")}, 1},
		{"a, b, a", []clustersync.LeaseOp{acq("a", "3"), acq("b", "1"), acq("a", "4")}, 5},
		{"a, b, count a", []clustersync.LeaseOp{acq("a", "5"), acq("b", "2"), count("a")}, 5},
	} {
		before := cassandrastore.LeaseTrips(s)
		replies := make([]clustersync.LeaseReply, len(tc.ops))
		if err := s.Leases(ctx(t), now, tc.ops, replies); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := cassandrastore.LeaseTrips(s) - before; got != tc.trips {
			t.Errorf("%s: %d requests, want %d", tc.name, got, tc.trips)
		}
		for i, r := range replies {
			if !r.OK {
				t.Errorf("%s: op %d: %+v, want OK", tc.name, i, r)
			}
		}
	}
}

// testLeasesTTL: rows expire at their own time on the caller's clock,
// the partition's seq at its latest; the lease of an empty id is kept.
func testLeasesTTL(t *testing.T, s *cassandrastore.Store) {
	now := time.Now().UnixNano()
	ops := []clustersync.LeaseOp{
		{Kind: clustersync.LeaseAcquire, Namespace: "ttl", Key: "k", ID: "", Limit: 5, Expiry: now + int64(time.Minute)},
		{Kind: clustersync.LeaseAcquire, Namespace: "ttl", Key: "k", ID: "short", Limit: 5, Expiry: now + int64(10*time.Second)},
		{Kind: clustersync.LeaseAcquire, Namespace: "ttl", Key: "k", ID: "rel", Limit: 5, Expiry: now + int64(time.Minute)},
		{Kind: clustersync.LeaseRelease, Namespace: "ttl", Key: "k", ID: "rel", Expiry: now + int64(time.Hour)},
	}
	if err := s.Leases(ctx(t), now, ops, make([]clustersync.LeaseReply, len(ops))); err != nil {
		t.Fatal(err)
	}
	ttls, seqTTL, err := cassandrastore.LeaseTTLs(ctx(t), s, "ttl", "k")
	if err != nil {
		t.Fatal(err)
	}
	near := func(got, want int) bool { return got >= want-10 && got <= want+2 }
	if len(ttls) != 3 || !near(ttls[""], 60) || !near(ttls["short"], 10) || !near(ttls["rel"], 3600) || !near(seqTTL, 3600) {
		t.Errorf("TTLs = %v, seq %d; want about 60 s for \"\", 10 for short, 3600 for rel and seq", ttls, seqTTL)
	}
	// Later, the short lease past: the next write deletes its row, which
	// Cassandra may still hold.
	later := now + int64(11*time.Second)
	replies := make([]clustersync.LeaseReply, 1)
	renew := clustersync.LeaseOp{Kind: clustersync.LeaseRenew, Namespace: "ttl", Key: "k", ID: "", Expiry: later + int64(time.Minute)}
	if err := s.Leases(ctx(t), later, []clustersync.LeaseOp{renew}, replies); err != nil {
		t.Fatal(err)
	}
	if want := (clustersync.LeaseReply{OK: true, Held: 1, Next: renew.Expiry}); replies[0] != want {
		t.Errorf("renew = %+v, want %+v", replies[0], want)
	}
	ttls, _, err = cassandrastore.LeaseTTLs(ctx(t), s, "ttl", "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ttls["short"]; ok || len(ttls) != 2 {
		t.Errorf("rows after the short lease's expiry: %v; want \"\" and rel", ttls)
	}
}

// testLeasesWithoutSeq: a partition whose seq expired before its rows
// (written by a caller whose clock was behind) still counts them, and
// the next write makes its seq again.
func testLeasesWithoutSeq(t *testing.T, e *env, s *cassandrastore.Store) {
	now := time.Now().UnixNano()
	exp := now + int64(time.Minute)
	stmt := fmt.Sprintf("INSERT INTO %s.windows_leases (namespace, key, id, expiry, released) VALUES ('noseq', 0x6b, 0x61, %d, false) USING TTL 60", e.keyspace, exp)
	if err := cassandrastore.ExecCQL(ctx(t), s, stmt); err != nil {
		t.Fatal(err)
	}
	k := func(kind clustersync.LeaseOpKind, id string) clustersync.LeaseOp {
		return clustersync.LeaseOp{Kind: kind, Namespace: "noseq", Key: "k", ID: id, Limit: 1, Expiry: exp + 1}
	}
	for _, tc := range []struct {
		op   clustersync.LeaseOp
		want clustersync.LeaseReply
	}{
		{k(clustersync.LeaseAcquire, "b"), clustersync.LeaseReply{OK: false, Held: 1, Next: exp}},
		{k(clustersync.LeasePut, "b"), clustersync.LeaseReply{OK: true, Held: 2, Next: exp}},
		{k(clustersync.LeaseRenew, "a"), clustersync.LeaseReply{OK: true, Held: 2, Next: exp + 1}},
		{k(clustersync.LeaseCount, ""), clustersync.LeaseReply{OK: true, Held: 2, Next: exp + 1}},
	} {
		replies := make([]clustersync.LeaseReply, 1)
		if err := s.Leases(ctx(t), now, []clustersync.LeaseOp{tc.op}, replies); err != nil {
			t.Fatal(err)
		}
		if replies[0] != tc.want {
			t.Errorf("%v %q: %+v, want %+v", tc.op.Kind, tc.op.ID, replies[0], tc.want)
		}
	}
	if _, seqTTL, err := cassandrastore.LeaseTTLs(ctx(t), s, "noseq", "k"); err != nil || seqTTL < 50 {
		t.Errorf("seq's TTL = %d, %v; want about 60", seqTTL, err)
	}
}

func testLeasesErrors(t *testing.T, e *env) {
	s := open(t, e.config())
	op := clustersync.LeaseOp{Kind: clustersync.LeaseAcquire, Namespace: "err", Key: "k", ID: "1", Limit: 1, Expiry: time.Now().Add(time.Minute).UnixNano()}
	now := time.Now().UnixNano()
	for _, tc := range []struct {
		name    string
		ops     []clustersync.LeaseOp
		replies int
	}{
		{"len(replies) != len(ops)", []clustersync.LeaseOp{op}, 2},
		{"namespace not UTF-8", []clustersync.LeaseOp{op, {Kind: clustersync.LeaseCount, Namespace: "\xff"}}, 2},
	} {
		if err := s.Leases(ctx(t), now, tc.ops, make([]clustersync.LeaseReply, tc.replies)); err == nil || errors.Is(err, clustersync.ErrUnavailable) {
			t.Errorf("Leases with %s = %v, want an error that is not ErrUnavailable", tc.name, err)
		}
	}
	// Nothing was applied by the rejected calls.
	replies := make([]clustersync.LeaseReply, 1)
	if err := s.Leases(ctx(t), now, []clustersync.LeaseOp{{Kind: clustersync.LeaseCount, Namespace: "err", Key: "k"}}, replies); err != nil {
		t.Fatal(err)
	}
	if want := (clustersync.LeaseReply{OK: true}); !reflect.DeepEqual(replies[0], want) {
		t.Errorf("count after rejected calls = %+v, want %+v", replies[0], want)
	}
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Leases(canceled, now, []clustersync.LeaseOp{op}, replies)
	if !errors.Is(err, clustersync.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("Leases with a done context = %v; want ErrUnavailable and context.Canceled", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Leases(ctx(t), now, []clustersync.LeaseOp{op}, replies); !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("Leases after Close = %v, want ErrClosed", err)
	}
}
