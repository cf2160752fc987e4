package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/ratelimit"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	clustersync "github.com/limiterd/limiterd/sync"
)

var _ clustersync.BucketStore = (*pgstore.Store)(nil)

const (
	hit     = ratelimit.Micro
	maxV    = int64(ratelimit.MaxValue) * hit // 1e15 micro-hits
	maxDur  = int64(ratelimit.MaxBucketDuration)
	unixNow = int64(1_800_000_000) * int64(time.Second)
)

// leakySpec is a leaky bucket of size micro-hits draining in interval,
// with node's drip (interval × Micro / size, truncated).
func leakySpec(key string, size, interval int64) ratelimit.BucketSpec {
	hi, lo := bits.Mul64(uint64(interval), ratelimit.Micro)
	d, _ := bits.Div64(hi, lo, uint64(size))
	return ratelimit.BucketSpec{Kind: ratelimit.LeakyLimit, A: size, B: interval, C: int64(d), Key: key}
}

// bucketCheck sends calls to the store and to the reference
// (clustersync.ApplyBuckets on rows kept here) and compares every reply
// field but Seq, as the conformance suite does.
type bucketCheck struct {
	s    *pgstore.Store
	ns   string
	rows map[string]*clustersync.BucketRow
	v    int64
}

func (c *bucketCheck) call(t *testing.T, inc string, life int64, at, take int64, specs []ratelimit.BucketSpec, totals []int64, lastAt int64) bool {
	t.Helper()
	calls := make([]clustersync.BucketCall, len(specs))
	for i, b := range specs {
		c.v++
		calls[i] = clustersync.BucketCall{Namespace: c.ns, Bucket: b, Life: life, Total: totals[i], ApplyAt: lastAt,
			Version: c.v, ExpireAt: time.Now().Add(time.Hour)}
	}
	got := make([]clustersync.BucketReply, len(calls))
	allowed, err := c.s.Buckets(ctxT(t), inc, at, take, calls, got)
	if err != nil {
		t.Fatalf("Buckets(take %d at %d): %v", take, at, err)
	}
	rows := make([]*clustersync.BucketRow, len(calls))
	for i := range calls {
		rows[i] = c.rows[specs[i].StoreKey()]
	}
	want := make([]clustersync.BucketReply, len(calls))
	wantAllowed := clustersync.ApplyBuckets(inc, at, take, calls, rows, want, make([]bool, len(calls)))
	for i := range calls {
		c.rows[specs[i].StoreKey()] = rows[i]
		g, w := got[i], want[i]
		g.Seq, w.Seq = 0, 0
		if g != w {
			t.Errorf("Buckets(take %d at %d) %s:\n got %+v\nwant %+v", take, at, specs[i].StoreKey(), g, w)
		}
		totals[i] = max(totals[i], got[i].Applied)
	}
	if allowed != wantAllowed {
		t.Errorf("Buckets(take %d at %d): allowed %v, want %v", take, at, allowed, wantAllowed)
	}
	return allowed
}

// TestBucketEdges compares the store with the reference at the limits of
// the parameters (MaxValue = 10^15 micro-hits, 366-day durations, 1 ns
// and 1 micro-hit), with takes of the whole capacity, debts far past it,
// times before the marks and jumps of many periods: where a product of
// bigints could overflow, PostgreSQL would raise instead of answering.
func TestBucketEdges(t *testing.T) {
	d := pgdb{dsn: harness.SharedPostgres(t).DSN()}
	s, _ := newStore(t, d)
	specs := []ratelimit.BucketSpec{
		{Kind: ratelimit.TokenLimit, A: maxV, B: maxDur, C: 1, Key: "k"},
		{Kind: ratelimit.TokenLimit, A: maxV, B: 1, C: maxV, Key: "k"},
		{Kind: ratelimit.TokenLimit, A: 1, B: maxDur, C: 1, Key: "k", Strict: true},
		{Kind: ratelimit.TokenLimit, A: maxV, B: 7, C: 3, Key: "k", Strict: true},
		leakySpec("k", maxV, maxDur),
		leakySpec("k", 1, 1),
		leakySpec("k", 3*hit, maxDur),
		{Kind: ratelimit.FixedLimit, A: maxDur, B: maxV, Key: "k"},
		{Kind: ratelimit.FixedLimit, A: 1, B: 1, Key: "k"},
		{Kind: ratelimit.FixedLimit, A: 3 * int64(time.Second), B: 2 * hit, Key: "k"},
	}
	for _, b := range specs {
		if err := b.Validate(); err != nil {
			t.Fatalf("%s: %v", b.StoreKey(), err)
		}
	}
	for _, start := range []int64{unixNow, 1, -5 * maxDur} {
		t.Run(fmt.Sprint(start), func(t *testing.T) {
			for i, b := range specs {
				c := &bucketCheck{s: s, ns: fmt.Sprintf("edges%d/%d", start, i), rows: map[string]*clustersync.BucketRow{}}
				one := []ratelimit.BucketSpec{b}
				ta, tb := []int64{0}, []int64{0}
				at := start
				for j, step := range []struct{ dt, take, debt int64 }{
					{0, 1, 0}, {0, maxV, 0}, {1, 0, 0}, {1, maxV, 0},
					{maxDur - 1, 1, 0}, {-3 * maxDur, hit, 0}, // before the mark
					{0, 0, 3 * maxV}, {1, 1, 0}, // a debt of three capacities
					{maxDur, maxV, 0}, {10 * maxDur, 1, 0}, {100 * maxDur, maxV, maxV},
					{maxDur / 2, hit, 0}, {1, 1, 0}, {0, maxV, 0},
				} {
					at += step.dt
					if step.debt > 0 {
						tb[0] += step.debt
						c.call(t, "b", 2, at, 0, one, tb, at-1)
					}
					if t.Failed() {
						t.Fatalf("%s, step %d", b.StoreKey(), j)
					}
					c.call(t, "a", 1, at, step.take, one, ta, at)
					if t.Failed() {
						t.Fatalf("%s, step %d", b.StoreKey(), j)
					}
				}
			}
			// All of them in one call: one refusal leaves the rest alone.
			c := &bucketCheck{s: s, ns: fmt.Sprintf("edges%d/all", start), rows: map[string]*clustersync.BucketRow{}}
			totals := make([]int64, len(specs))
			for j, take := range []int64{1, hit, maxV, 0, 1} {
				c.call(t, "a", 1, start+int64(j)*maxDur/3, take, specs, totals, start)
			}
		})
	}
}

// Concurrent calls on overlapping buckets, listed in different orders,
// with a purger among them: none fails (no deadlock: rows are locked in
// key order), and all-or-none admits exactly the smaller capacity.
func TestBucketConcurrentOrders(t *testing.T) {
	d := pgdb{dsn: harness.SharedPostgres(t).DSN()}
	s, _ := newStore(t, d)
	x := ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: 50 * hit, B: int64(time.Hour), C: 50 * hit, Key: "k"}
	y := ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: 80 * hit, B: int64(time.Hour), C: 80 * hit, Key: "k"}
	f := ratelimit.BucketSpec{Kind: ratelimit.FixedLimit, A: int64(time.Hour), B: 70 * hit, Key: "k"}
	orders := [][]ratelimit.BucketSpec{{x, y, f}, {f, y, x}, {y, f, x}}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for g := range 6 {
		wg.Go(func() {
			inc := fmt.Sprintf("n%d", g)
			specs := orders[g%len(orders)]
			totals := map[string]int64{}
			for v := int64(1); ; v++ {
				calls := make([]clustersync.BucketCall, len(specs))
				for i, b := range specs {
					calls[i] = clustersync.BucketCall{Namespace: "conc", Bucket: b, Life: 1, Total: totals[b.StoreKey()],
						Version: v, ExpireAt: time.Now().Add(time.Hour)}
				}
				replies := make([]clustersync.BucketReply, len(calls))
				ok, err := s.Buckets(ctx, inc, unixNow, hit, calls, replies)
				if err != nil {
					t.Errorf("Buckets: %v", err)
					return
				}
				for i, b := range specs {
					totals[b.StoreKey()] = replies[i].Applied
				}
				if !ok {
					return
				}
				admitted.Add(1)
			}
		})
	}
	wg.Go(func() {
		for ctx.Err() == nil && admitted.Load() < 50 {
			if _, err := s.Purge(ctx); err != nil {
				t.Errorf("Purge: %v", err)
				return
			}
		}
	})
	wg.Wait()
	if got := admitted.Load(); got != 50 {
		t.Errorf("admitted %d takes of 1 from buckets of 50, 80 and 70 per hour; want 50", got)
	}
}

// The call's checks, and the errors after Close and with ctx done.
func TestBucketErrors(t *testing.T) {
	d := pgdb{dsn: harness.SharedPostgres(t).DSN()}
	s, _ := newStore(t, d)
	b := ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: hit, B: 1, C: hit, Key: "k"}
	call := clustersync.BucketCall{Namespace: "ns", Bucket: b, Life: 1, Version: 1}
	other := call
	other.Namespace = "other"
	bad := call
	bad.Bucket.B = 0
	for _, tc := range []struct {
		name    string
		calls   []clustersync.BucketCall
		replies int
	}{
		{"replies", []clustersync.BucketCall{call}, 2},
		{"namespaces", []clustersync.BucketCall{call, other}, 2},
		{"twice", []clustersync.BucketCall{call, call}, 2},
		{"parameters", []clustersync.BucketCall{bad}, 1},
	} {
		if _, err := s.Buckets(ctxT(t), "a", 1, 0, tc.calls, make([]clustersync.BucketReply, tc.replies)); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Buckets(ctx, "a", 1, 0, []clustersync.BucketCall{call}, make([]clustersync.BucketReply, 1)); !errors.Is(err, clustersync.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("ctx done: %v, want ErrUnavailable and context.Canceled", err)
	}
	if ok, err := s.Buckets(ctxT(t), "a", 1, 0, nil, nil); !ok || err != nil {
		t.Errorf("no calls: %v, %v; want true, nil", ok, err)
	}
	_ = s.Close()
	if _, err := s.Buckets(ctxT(t), "a", 1, 0, []clustersync.BucketCall{call}, make([]clustersync.BucketReply, 1)); !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

// A windows table made by an earlier release (the DDL before the bucket
// objects) gets the bucket objects on first use; a table name of the
// longest valid length leaves every bucket object's name within 63 bytes.
func TestBucketSchemaUpgrade(t *testing.T) {
	d := pgdb{dsn: harness.SharedPostgres(t).DSN()}
	for _, table := range []string{harness.UniqueName("w"), strings.Repeat("x", 53-len(harness.UniqueName("w"))) + harness.UniqueName("w")} {
		cfg := testConfig(d.dsn, table)
		windows, _, ok := strings.Cut(pgstore.SchemaSQL(cfg), "-- limiterd bucket rows")
		if !ok {
			t.Fatal("SchemaSQL has no bucket part")
		}
		c := connect(t, d.dsn)
		if _, err := c.Exec(ctxT(t), windows); err != nil {
			t.Fatalf("the windows DDL: %v", err)
		}
		s := openStore(t, cfg)
		b := ratelimit.BucketSpec{Kind: ratelimit.FixedLimit, A: int64(time.Hour), B: 2 * hit, Key: "k"}
		for i, want := range []bool{true, true, false} {
			calls := []clustersync.BucketCall{{Namespace: "ns", Bucket: b, Life: 1, Total: int64(i) * hit, Version: int64(i + 1),
				ExpireAt: time.Now().Add(time.Hour)}}
			ok, err := s.Buckets(ctxT(t), "a", unixNow, hit, calls, make([]clustersync.BucketReply, 1))
			if err != nil || ok != want {
				t.Fatalf("table %s: take %d of a fixed bucket of 2: %v, %v; want %v, nil", table, i+1, ok, err, want)
			}
		}
	}
}

// A bucket table of the release before the waste (no waste column, the
// v4 function) gains the column on first use; its rows read as knowing
// no waste.
func TestBucketWasteUpgrade(t *testing.T) {
	d := pgdb{dsn: harness.SharedPostgres(t).DSN()}
	cfg := testConfig(d.dsn, harness.UniqueName("w"))
	c := connect(t, d.dsn)
	if _, err := c.Exec(ctxT(t), pgstore.SchemaSQL(cfg)); err != nil {
		t.Fatalf("the DDL: %v", err)
	}
	bkt := pgx.Identifier{"public", cfg.Table + "_bkt"}.Sanitize()
	b := ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: 10 * hit, B: int64(time.Hour), C: hit, Key: "k"}
	if _, err := c.Exec(ctxT(t), "ALTER TABLE "+bkt+" DROP COLUMN waste"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctxT(t), "INSERT INTO "+bkt+" (namespace, bkey, level, mark, seq, expire_at) VALUES ('ns', $1, $2, $3, 1, now() + interval '1 hour')",
		[]byte(b.StoreKey()), 10*hit, unixNow); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, cfg)
	calls := []clustersync.BucketCall{{Namespace: "ns", Bucket: b, Life: 1, Version: 1, ExpireAt: time.Now().Add(time.Hour)}}
	replies := make([]clustersync.BucketReply, 1)
	if ok, err := s.Buckets(ctxT(t), "a", unixNow, hit, calls, replies); err != nil || !ok {
		t.Fatalf("take 1 of a full bucket of the earlier release: %v, %v; want true, nil", ok, err)
	}
	if got := replies[0].Before; got.Level != 10*hit || got.Waste != 0 {
		t.Errorf("the earlier release's row: %+v, want level %d and no waste", got, 10*hit)
	}
}

// Calls on buckets whose rows expire every few milliseconds, in several
// orders, race a purger deleting them: no call fails (a row purged
// between a call's insert and its lock would be missed; one locked is
// skipped by the purge).
func TestBucketPurgeRace(t *testing.T) {
	d := pgdb{dsn: harness.SharedPostgres(t).DSN()}
	s, _ := newStore(t, d)
	specs := make([]ratelimit.BucketSpec, 4)
	for i := range specs {
		specs[i] = ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: int64(i+1) * hit, B: int64(time.Second), C: hit, Key: "k"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var calls atomic.Int64
	for g := range 4 {
		wg.Go(func() {
			inc := fmt.Sprintf("n%d", g)
			order := append([]ratelimit.BucketSpec(nil), specs...)
			for v := int64(1); ctx.Err() == nil; v++ {
				order[0], order[(g+int(v))%len(order)] = order[(g+int(v))%len(order)], order[0]
				cs := make([]clustersync.BucketCall, len(order))
				for i, b := range order {
					cs[i] = clustersync.BucketCall{Namespace: "race", Bucket: b, Life: v, Version: v,
						ExpireAt: time.Now().Add(time.Duration(v%5) * time.Millisecond)}
				}
				if _, err := s.Buckets(ctx, inc, unixNow+v, hit, cs, make([]clustersync.BucketReply, len(cs))); err != nil {
					if ctx.Err() == nil {
						t.Errorf("Buckets: %v", err)
					}
					return
				}
				calls.Add(1)
			}
		})
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			if _, err := s.Purge(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("Purge: %v", err)
				return
			}
		}
	})
	wg.Wait()
	if calls.Load() == 0 {
		t.Error("no call completed")
	}
}
