package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/limiterd/limiterd/integration/harness"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	clustersync "github.com/limiterd/limiterd/sync"
)

var _ clustersync.LeaseStore = (*pgstore.Store)(nil)

// TestLeases runs the lease tests as subtests on one database, each on
// tables of its own.
func TestLeases(t *testing.T) {
	d := pgdb{dsn: harness.SharedPostgres(t).DSN()}
	for _, tt := range []struct {
		name string
		fn   func(*testing.T, pgdb)
	}{
		{"Script", testLeaseScript},
		{"Random", testLeaseRandom},
		{"LargeCalls", testLeaseLargeCalls},
		{"ExactUnderConcurrency", testLeaseExact},
		{"KeyOrders", testLeaseKeyOrders},
		{"Errors", testLeaseErrors},
		{"Purge", testLeasePurge},
		{"SchemaRecreated", testLeaseSchemaRecreated},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, d) })
	}
}

// leaseCheck sends ops to the store and to the reference
// (clustersync.ApplyLease on sets kept here) and compares the replies op
// by op.
type leaseCheck struct {
	s    *pgstore.Store
	sets map[[2]string]*clustersync.LeaseSet
	// timeout bounds a call; 0: ctxT's.
	timeout time.Duration
}

func newLeaseCheck(s *pgstore.Store) *leaseCheck {
	return &leaseCheck{s: s, sets: map[[2]string]*clustersync.LeaseSet{}}
}

func (c *leaseCheck) call(t *testing.T, now int64, ops ...clustersync.LeaseOp) []clustersync.LeaseReply {
	t.Helper()
	got := make([]clustersync.LeaseReply, len(ops))
	ctx := ctxT(t)
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), c.timeout)
		defer cancel()
	}
	if err := c.s.Leases(ctx, now, ops, got); err != nil {
		t.Fatalf("Leases at %d: %v", now, err)
	}
	for i, op := range ops {
		k := [2]string{op.Namespace, op.Key}
		set := c.sets[k]
		if set == nil {
			set = &clustersync.LeaseSet{}
			c.sets[k] = set
		}
		if want := clustersync.ApplyLease(set, now, op); got[i] != want {
			t.Errorf("at %d, ops[%d] %s %q/%q id %q limit %d expiry %d:\n got %+v\nwant %+v",
				now, i, op.Kind, op.Namespace, op.Key, op.ID, op.Limit, op.Expiry, got[i], want)
		}
	}
	return got
}

func lop(kind clustersync.LeaseOpKind, ns, key, id string, limit, expiry int64) clustersync.LeaseOp {
	return clustersync.LeaseOp{Kind: kind, Namespace: ns, Key: key, ID: id, Limit: limit, Expiry: expiry}
}

// A scripted sequence through every rule of the contract, compared with
// the reference op by op.
func testLeaseScript(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	c := newLeaseCheck(s)
	const (
		acq = clustersync.LeaseAcquire
		put = clustersync.LeasePut
		rel = clustersync.LeaseRelease
		ren = clustersync.LeaseRenew
		cnt = clustersync.LeaseCount
	)
	T := unixNow
	sec := int64(time.Second)
	at := func(dt int64) int64 { return T + dt*sec }
	for _, step := range []struct {
		now int64
		ops []clustersync.LeaseOp
	}{
		{at(0), []clustersync.LeaseOp{lop(cnt, "s", "k", "", 0, 0)}},
		{at(0), []clustersync.LeaseOp{
			lop(acq, "s", "k", "a", 2, at(10)),
			lop(acq, "s", "k", "a", 2, at(5)),  // a replay: counted once, expiry stays
			lop(acq, "s", "k", "b", 2, at(20)), // the second of two
			lop(acq, "s", "k", "c", 2, at(20)), // refused: the limit
			lop(put, "s", "k", "c", 2, at(15)), // a put ignores the limit
			lop(put, "s", "k", "c", 2, at(12)), // never moves an expiry earlier
			lop(acq, "s", "k", "a", 1, at(11)), // a replay over the limit, later expiry
		}},
		{at(1), []clustersync.LeaseOp{
			lop(ren, "s", "k", "a", 0, at(30)),
			lop(ren, "s", "k", "a", 0, at(1)),  // expiry at now: changes nothing
			lop(ren, "s", "k", "c", 0, at(14)), // moves it earlier
			lop(rel, "s", "k", "b", 0, at(2)),  // remembered until b's own expiry
			lop(acq, "s", "k", "b", 9, at(40)), // released: never granted again
			lop(put, "s", "k", "b", 0, at(40)),
			lop(rel, "s", "k", "b", 0, at(3)), // not live any more
			lop(ren, "s", "k", "b", 0, at(40)),
			lop(acq, "s", "k", "d", 9, at(1)),  // expiry at now
			lop(put, "s", "k", "d", 9, at(-1)), // expiry before now
			lop(acq, "s", "k", "e", 0, at(10)), // limit 0
		}},
		{at(14), []clustersync.LeaseOp{lop(cnt, "s", "k", "", 0, 0)}}, // c expires at 14: gone
		{at(19), []clustersync.LeaseOp{lop(acq, "s", "k", "b", 9, at(25)), lop(put, "s", "k", "c", 0, at(25))}},
		{at(20), []clustersync.LeaseOp{
			lop(acq, "s", "k", "b", 9, at(25)), // b's release is forgotten at 20
			lop(rel, "s", "k", "x", 0, at(40)), // an unknown id is remembered too
			lop(put, "s", "k", "x", 0, at(41)),
			lop(acq, "s", "k", "x", 9, at(41)),
			lop(rel, "s", "k", "a", 0, at(5)),  // until a's expiry (30), not 5
			lop(rel, "s", "k", "x", 0, at(35)), // never shortens a release
			lop(rel, "s", "k", "y", 0, at(20)), // at now: nothing to remember
			lop(put, "s", "k", "y", 0, at(21)),
		}},
		{at(29), []clustersync.LeaseOp{lop(put, "s", "k", "a", 0, at(31)), lop(acq, "s", "k", "a", 9, at(31))}},
		{at(30), []clustersync.LeaseOp{lop(put, "s", "k", "a", 0, at(31)), lop(cnt, "s", "k", "", 0, 0)}},
		{at(41), []clustersync.LeaseOp{lop(acq, "s", "k", "x", 1, at(50)), lop(rel, "s", "k", "x", 0, at(41))}},
		// Keys and namespaces interleaved in one call; bytes that a
		// careless encoding would merge.
		{at(50), []clustersync.LeaseOp{
			lop(acq, "s", "k\x00", "a", 1, at(60)),
			lop(acq, "s2", "k", "a", 1, at(60)),
			lop(acq, "s", "k", "a\x00", 1, at(60)),
			lop(acq, "s", "k", "a", 1, at(60)), // refused: a\x00 holds the one
			lop(acq, "s", "k|x", "é", 1, at(60)),
			lop(acq, "s|k", "x", "é", 1, at(60)),
			lop(rel, "s", "k\x00", "a", 0, 0),
			lop(acq, "s", "k\x00", "b", 1, at(70)),
			lop(cnt, "s2", "k", "", 0, 0),
			lop(cnt, "s", "k", "", 0, 0),
		}},
		// A caller whose clock is behind: the rows written later still
		// count at its now.
		{at(45), []clustersync.LeaseOp{lop(cnt, "s", "k\x00", "", 0, 0), lop(acq, "s", "k", "z", 5, at(46))}},
	} {
		c.call(t, step.now, step.ops...)
		if t.Failed() {
			t.FailNow()
		}
	}
}

// Random calls compared with the reference, with now moving forward (or
// staying): over a few namespaces, keys and ids in short calls,
// then over many ids of one key in long calls (ops of one key one after
// the other in a call, the earliest expiry moving often).
func testLeaseRandom(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	c := newLeaseCheck(s)
	r := rand.New(rand.NewPCG(1, 2))
	now := unixNow
	for _, tc := range []struct{ calls, ops, namespaces, keys, ids, limit int }{
		{400, 8, 2, 3, 6, 5},
		{100, 40, 1, 2, 30, 20},
	} {
		for call := range tc.calls {
			now += int64(r.IntN(4)) * int64(time.Second)
			ops := make([]clustersync.LeaseOp, 1+r.IntN(tc.ops))
			for i := range ops {
				ops[i] = lop(clustersync.LeaseOpKind(1+r.IntN(5)), fmt.Sprint("n", r.IntN(tc.namespaces)), fmt.Sprint("k", r.IntN(tc.keys)),
					fmt.Sprint("i", r.IntN(tc.ids)), int64(r.IntN(tc.limit)), now+int64(r.IntN(25)-4)*int64(time.Second))
			}
			c.call(t, now, ops...)
			if t.Failed() {
				t.Fatalf("%+v: call %d", tc, call)
			}
		}
	}
}

// Calls larger than one statement (more than 64 keys, more than 5000
// ops) are split in order: ops of one key in different statements still
// see each other.
func testLeaseLargeCalls(t *testing.T, d pgdb) {
	// What is tested is the split and the answers, not speed: a loaded
	// host under -race has taken over 5 s, the default statement_timeout,
	// for the 6000 ops on one key, and over 30 s on a host running ten
	// times its cores' load (its time is logged below); 2 minutes still
	// bound the call.
	cfg := d.config()
	cfg.StatementTimeout = pgstore.Duration(2 * time.Minute)
	s := openStore(t, cfg)
	c := newLeaseCheck(s)
	c.timeout = 2 * time.Minute
	now := unixNow
	var ops []clustersync.LeaseOp
	for round := range 2 {
		for k := range 150 {
			ops = append(ops, lop(clustersync.LeaseAcquire, "n", fmt.Sprint("k", k), fmt.Sprint("r", round), 1, now+int64(time.Minute)))
		}
	}
	got := c.call(t, now, ops...)
	if got[0].OK != true || got[150].OK != false {
		t.Errorf("first round granted %v, second %v; want true, false", got[0].OK, got[150].OK)
	}
	ops = ops[:0]
	for i := range 5100 {
		ops = append(ops, lop(clustersync.LeasePut, "n", fmt.Sprint("p", i%50), fmt.Sprint("i", i/50), 0, now+int64(time.Minute)+int64(i)))
	}
	ops = append(ops, lop(clustersync.LeaseCount, "n", "p0", "", 0, 0))
	if got := c.call(t, now, ops...); got[len(got)-1].Held != 102 {
		t.Errorf("p0 holds %d leases, want 102", got[len(got)-1].Held)
	}
	// Thousands of leases of one key taken, then released oldest first
	// (each release moves the earliest expiry), in one call.
	ops = ops[:0]
	for i := range 3000 {
		ops = append(ops, lop(clustersync.LeaseAcquire, "n", "big", fmt.Sprint(i), 5000, now+int64(time.Minute)+int64(i)))
	}
	for i := range 3000 {
		ops = append(ops, lop(clustersync.LeaseRelease, "n", "big", fmt.Sprint(i), 0, 0))
	}
	start := time.Now()
	c.call(t, now, ops...)
	t.Logf("6000 ops on one key: %s", time.Since(start))
}

// 16 goroutines acquire distinct ids on one key with limit 25, through
// a pool: exactly 25 are granted, and the key then holds 25.
func testLeaseExact(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	now := time.Now().UnixNano()
	const workers, each, limit = 16, 5, 25
	var granted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				ops := []clustersync.LeaseOp{lop(clustersync.LeaseAcquire, "n", "k", fmt.Sprintf("w%d-%d", w, j), limit, now+int64(time.Hour))}
				rep := make([]clustersync.LeaseReply, 1)
				if err := s.Leases(ctxT(t), now, ops, rep); err != nil {
					t.Error(err)
					return
				}
				if rep[0].OK {
					granted.Add(1)
				}
				if rep[0].Held > limit {
					t.Errorf("held %d > limit %d", rep[0].Held, limit)
				}
			}
		}()
	}
	wg.Wait()
	if got := granted.Load(); got != limit {
		t.Errorf("granted %d of %d acquires, want %d", got, workers*each, limit)
	}
	rep := make([]clustersync.LeaseReply, 1)
	if err := s.Leases(ctxT(t), now, []clustersync.LeaseOp{lop(clustersync.LeaseCount, "n", "k", "", 0, 0)}, rep); err != nil {
		t.Fatal(err)
	}
	if rep[0].Held != limit || rep[0].Next != now+int64(time.Hour) {
		t.Errorf("count after: %+v, want Held %d, Next %d", rep[0], limit, now+int64(time.Hour))
	}
}

// Concurrent calls naming the same keys in different orders, with a
// purger among them, never fail: the keys are locked in one order.
func testLeaseKeyOrders(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	now := time.Now().UnixNano()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := s.Purge(ctxT(t)); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var callers sync.WaitGroup
	for w := range 6 {
		callers.Add(1)
		go func() {
			defer callers.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for j := range 40 {
				ops := make([]clustersync.LeaseOp, 8)
				for i := range ops {
					kind := clustersync.LeasePut
					if i%2 == 1 {
						kind = clustersync.LeaseRelease
					}
					// Some expired on the server's clock, for the purger.
					exp := now + int64(r.IntN(3)-1)*int64(time.Minute)
					ops[i] = lop(kind, "n", fmt.Sprint("k", r.IntN(6)), fmt.Sprintf("w%d-%d", w, j), 0, exp)
				}
				if err := s.Leases(ctxT(t), now-2*int64(time.Minute), ops, make([]clustersync.LeaseReply, len(ops))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	callers.Wait()
	close(stop)
	wg.Wait()
}

func testLeaseErrors(t *testing.T, d pgdb) {
	s, cfg := newStore(t, d)
	one := []clustersync.LeaseOp{lop(clustersync.LeaseAcquire, "n", "k", "a", 1, unixNow+1)}
	if err := s.Leases(ctxT(t), unixNow, one, nil); err == nil {
		t.Error("Leases with len(replies) != len(ops): no error")
	}
	if err := s.Leases(ctxT(t), unixNow, nil, nil); err != nil {
		t.Errorf("Leases of no op: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Leases(ctx, unixNow, one, make([]clustersync.LeaseReply, 1)); !errors.Is(err, clustersync.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("Leases with a cancelled ctx: got %v, want ErrUnavailable wrapping Canceled", err)
	}

	// Another transaction holds the key's lock: Leases waits, then gives
	// up at its deadline; another key is not blocked.
	c := connect(t, d.dsn)
	tx, err := c.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctxT(t), "SELECT pg_advisory_xact_lock($1)", pgstore.LockKey(cfg.Schema, cfg.Table+"_lease", "n", "k")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = s.Leases(ctx, unixNow, one, make([]clustersync.LeaseReply, 1))
	if !errors.Is(err, clustersync.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Leases blocked past its deadline: got %v, want ErrUnavailable wrapping DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Leases blocked past its deadline returned after %s", d)
	}
	other := []clustersync.LeaseOp{lop(clustersync.LeaseAcquire, "n", "other", "a", 1, unixNow+1)}
	if err := s.Leases(ctxT(t), unixNow, other, make([]clustersync.LeaseReply, 1)); err != nil {
		t.Errorf("Leases on another key: %v", err)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Leases(ctxT(t), unixNow, one, make([]clustersync.LeaseReply, 1)); !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("Leases after Close: got %v, want ErrClosed", err)
	}
}

// Purge deletes the leases and releases whose time has passed on the
// server's clock by more than its grace, and keeps the others.
func testLeasePurge(t *testing.T, d pgdb) {
	s, cfg := newStore(t, d)
	wall := time.Now().UnixNano()
	past, future := wall-int64(30*time.Minute), wall+int64(time.Hour)
	then := wall - int64(time.Hour)     // a caller's now when the past ones were live
	recent := wall - int64(time.Second) // past, but within the purge's grace
	ops := []clustersync.LeaseOp{
		lop(clustersync.LeaseAcquire, "n", "k", "old", 9, past),
		lop(clustersync.LeaseRelease, "n", "k", "gone", 0, past),
		lop(clustersync.LeasePut, "n", "k", "recent", 9, recent),
		lop(clustersync.LeaseRelease, "n", "k", "recent", 0, recent),
		lop(clustersync.LeaseAcquire, "n", "k", "live", 9, future),
		lop(clustersync.LeaseRelease, "n", "k", "kept", 0, future),
	}
	if err := s.Leases(ctxT(t), then, ops, make([]clustersync.LeaseReply, len(ops))); err != nil {
		t.Fatal(err)
	}
	n, err := s.Purge(ctxT(t))
	if err != nil || n != 2 {
		t.Errorf("Purge: %d, %v; want 2, nil", n, err)
	}
	c := connect(t, d.dsn)
	for table, want := range map[string][]string{cfg.Table + "_lease": {"live"}, cfg.Table + "_lease_rel": {"kept", "recent"}} {
		var ids []string
		if err := c.QueryRow(ctxT(t), "SELECT coalesce(array_agg(convert_from(id, 'UTF8') ORDER BY id), '{}') FROM "+pgx.Identifier{cfg.Schema, table}.Sanitize()).Scan(&ids); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("%s after Purge holds %q, want %q", table, ids, want)
		}
	}
	rep := make([]clustersync.LeaseReply, 2)
	if err := s.Leases(ctxT(t), wall, []clustersync.LeaseOp{lop(clustersync.LeaseCount, "n", "k", "", 0, 0),
		lop(clustersync.LeasePut, "n", "k", "kept", 0, future)}, rep); err != nil {
		t.Fatal(err)
	}
	if want := (clustersync.LeaseReply{OK: true, Held: 1, Next: future}); rep[0] != want || rep[1].OK {
		t.Errorf("after Purge: count %+v, put of a release %+v; want %+v and OK false", rep[0], rep[1], want)
	}
}

// A store whose lease objects are dropped (or a table of an earlier
// release, made without them) creates them again on the next calls.
func testLeaseSchemaRecreated(t *testing.T, d pgdb) {
	s, cfg := newStore(t, d)
	one := []clustersync.LeaseOp{lop(clustersync.LeaseAcquire, "n", "k", "a", 1, unixNow+1)}
	if err := s.Leases(ctxT(t), unixNow, one, make([]clustersync.LeaseReply, 1)); err != nil {
		t.Fatal(err)
	}
	c := connect(t, d.dsn)
	id := func(suffix string) string { return pgx.Identifier{cfg.Schema, cfg.Table + suffix}.Sanitize() }
	if _, err := c.Exec(ctxT(t), "DROP TABLE "+id("_lease")+", "+id("_lease_rel")+"; DROP FUNCTION "+id("_lease_v2")); err != nil {
		t.Fatal(err)
	}
	var last error
	for range 3 {
		if last = s.Leases(ctxT(t), unixNow, one, make([]clustersync.LeaseReply, 1)); last == nil {
			break
		}
	}
	if last != nil {
		t.Fatalf("Leases after the lease objects were dropped still fail: %v", last)
	}
	// A new store on the same table (as after an upgrade) finds them.
	if _, err := c.Exec(ctxT(t), "DROP FUNCTION "+id("_lease_v2")); err != nil {
		t.Fatal(err)
	}
	s2 := openStore(t, cfg)
	rep := make([]clustersync.LeaseReply, 1)
	if err := s2.Leases(ctxT(t), unixNow, one, rep); err != nil || !rep[0].OK {
		t.Fatalf("Leases on a table without the lease function: %+v, %v", rep[0], err)
	}
}
