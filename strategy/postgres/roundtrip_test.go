package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limiterd/limiterd/ratelimit"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	"github.com/limiterd/limiterd/strategy/strategytest"
	clustersync "github.com/limiterd/limiterd/sync"
)

// countingDB records the calls a Store makes: each is one round trip
// (a batch being sent at once), once pgx has prepared the statement on
// the connection.
type countingDB struct {
	db pgstore.DB
	mu sync.Mutex
	// calls lists "exec", "query", "queryrow" and "batch/<n queries>".
	calls []string
}

func (c *countingDB) record(s string) {
	c.mu.Lock()
	c.calls = append(c.calls, s)
	c.mu.Unlock()
}

func (c *countingDB) take() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := fmt.Sprint(c.calls)
	c.calls = nil
	return s
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.record("exec")
	return c.db.Exec(ctx, sql, args...)
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.record("query")
	return c.db.Query(ctx, sql, args...)
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.record("queryrow")
	return c.db.QueryRow(ctx, sql, args...)
}

func (c *countingDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	c.record(fmt.Sprintf("batch/%d", b.Len()))
	return c.db.SendBatch(ctx, b)
}

// leaseOps is per ops on each of keys keys.
func leaseOps(per, keys int) []clustersync.LeaseOp {
	var ops []clustersync.LeaseOp
	for i := range per * keys {
		ops = append(ops, clustersync.LeaseOp{Kind: clustersync.LeasePut, Namespace: "ns", Key: fmt.Sprint(i % keys), ID: "a", Expiry: 2})
	}
	return ops
}

// Each call is the number of round trips the package documents.
func testRoundTrips(t *testing.T, d pgdb) {
	pool, err := pgxpool.New(ctxT(t), d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db := &countingDB{db: pool}
	s := pgstore.New(db, d.config())
	defer s.Close()
	ctx := ctxT(t)
	k := wk("ns", "k", time.Second, 0)
	rows := func(n int) []clustersync.Row {
		r := make([]clustersync.Row, n)
		for i := range r {
			r[i] = row(wk("ns", fmt.Sprint(i), time.Second, 0), 1, 1)
		}
		return r
	}
	keys := func(n int) []clustersync.WindowKey {
		r := make([]clustersync.WindowKey, n)
		for i := range r {
			r[i] = wk("ns", fmt.Sprint(i), time.Second, 0)
		}
		return r
	}
	steps := []struct {
		name string
		call func() error
		want string
	}{
		{"first call creates the table", func() error { return s.Push(ctx, "a", []clustersync.Row{row(k, 1, 1)}) }, "[queryrow exec exec]"},
		{"Push 5000", func() error { return s.Push(ctx, "a", rows(5000)) }, "[exec]"},
		{"Push 5001", func() error { return s.Push(ctx, "a", rows(5001)) }, "[exec exec]"},
		{"Fetch 5000", func() error { return s.Fetch(ctx, "a", keys(5000), make([]int64, 5000)) }, "[query]"},
		{"PushFetch", func() error { return s.PushFetch(ctx, "a", rows(2), make([]int64, 2)) }, "[query]"},
		{"Window", func() error { _, err := s.Window(ctx, k); return err }, "[queryrow]"},
		{"Allow", func() error { _, err := strategytest.AllowOne(ctx, s, allowReq("a", "k", 10, 1, 0, 0, 9)); return err }, "[batch/2]"},
		{"Buckets", func() error {
			_, err := s.Buckets(ctx, "a", 1, 1, []clustersync.BucketCall{{Namespace: "ns", Life: 1, Version: 1,
				Bucket: ratelimit.BucketSpec{Kind: ratelimit.TokenLimit, A: 1, B: 1, C: 1, Key: "k"}}}, make([]clustersync.BucketReply, 1))
			return err
		}, "[query]"},
		{"Leases", func() error { return s.Leases(ctx, 1, leaseOps(2, 64), make([]clustersync.LeaseReply, 128)) }, "[query]"},
		{"Leases of 65 keys", func() error { return s.Leases(ctx, 1, leaseOps(1, 65), make([]clustersync.LeaseReply, 65)) }, "[query query]"},
		{"Purge", func() error { _, err := s.Purge(ctx); return err }, "[exec exec exec exec]"}, // windows, buckets, leases, releases
		{"no rows", func() error { return s.Push(ctx, "a", nil) }, "[]"},
	}
	for _, st := range steps {
		if err := st.call(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := db.take(); got != st.want {
			t.Errorf("%s: calls %s, want %s", st.name, got, st.want)
		}
	}
}
