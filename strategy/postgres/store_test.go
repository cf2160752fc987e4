package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/limiterd/limiterd/integration/harness"
	pgstore "github.com/limiterd/limiterd/strategy/postgres"
	"github.com/limiterd/limiterd/strategy/strategytest"
	clustersync "github.com/limiterd/limiterd/sync"
)

var (
	_ clustersync.Store        = (*pgstore.Store)(nil)
	_ clustersync.PushFetcher  = (*pgstore.Store)(nil)
	_ clustersync.GroupAllower = (*pgstore.Store)(nil)

	_ pgstore.DB = (*pgxpool.Pool)(nil)
	_ pgstore.DB = (*pgx.Conn)(nil)
	_ pgstore.DB = (pgx.Tx)(nil)
)

// TestStore runs the behaviour tests as subtests on one database
// (harness.SharedPostgres: LIMITERD_TEST_POSTGRES, or a server of its own),
// each on tables of its own.
func TestStore(t *testing.T) {
	d := pgdb{dsn: harness.SharedPostgres(t).DSN()}
	for _, tt := range []struct {
		name string
		fn   func(*testing.T, pgdb)
	}{
		{"PushFetchWindow", testPushFetchWindow},
		{"Versions", testVersions},
		{"KeysDistinct", testKeysDistinct},
		{"LargeBatches", testLargeBatches},
		{"PushFetch", testPushFetch},
		{"Allow", testAllow},
		{"AllowSeveralLimits", testAllowSeveralLimits},
		{"AllowExactAcrossIncarnations", testAllowExactAcrossIncarnations},
		{"Closed", testClosed},
		{"Context", testContext},
		{"SchemaCreation", testSchemaCreation},
		{"NewOnTx", testNewOnTx},
		{"Purge", testPurge},
		{"BackgroundPurge", testBackgroundPurge},
		{"RoundTrips", testRoundTrips},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, d) })
	}
}

// pgdb is a test database; each config it makes names a table of its own.
type pgdb struct{ dsn string }

// config is the default config on the database, with a new table name
// and without the background purge.
func (d pgdb) config() pgstore.Config {
	return testConfig(d.dsn, harness.UniqueName("w"))
}

func testConfig(dsn, table string) pgstore.Config {
	cfg := pgstore.DefaultConfig()
	cfg.DSN = dsn
	cfg.Table = table
	cfg.PurgeInterval = -1
	return cfg
}

// newStore opens a Store on a new table of d.
func newStore(tb testing.TB, d pgdb) (*pgstore.Store, pgstore.Config) {
	tb.Helper()
	cfg := d.config()
	return openStore(tb, cfg), cfg
}

func openStore(tb testing.TB, cfg pgstore.Config) *pgstore.Store {
	tb.Helper()
	s, err := pgstore.Open(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

func connect(tb testing.TB, dsn string) *pgx.Conn {
	tb.Helper()
	c, err := pgx.Connect(ctxT(tb), dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func wk(ns, key string, size time.Duration, start int64) clustersync.WindowKey {
	return clustersync.WindowKey{Namespace: ns, Size: size, Start: start, Key: key}
}

func row(k clustersync.WindowKey, total, version int64) clustersync.Row {
	return clustersync.Row{WindowKey: k, Total: total, Version: version, ExpireAt: time.Now().Add(time.Hour)}
}

func fetch(tb testing.TB, s *pgstore.Store, inc string, keys ...clustersync.WindowKey) []int64 {
	tb.Helper()
	others := make([]int64, len(keys))
	for i := range others {
		others[i] = -999 // must be overwritten, also for unknown keys
	}
	if err := s.Fetch(ctxT(tb), inc, keys, others); err != nil {
		tb.Fatal(err)
	}
	return others
}

func window(tb testing.TB, s *pgstore.Store, k clustersync.WindowKey) int64 {
	tb.Helper()
	n, err := s.Window(ctxT(tb), k)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func push(tb testing.TB, s *pgstore.Store, inc string, rows ...clustersync.Row) {
	tb.Helper()
	if err := s.Push(ctxT(tb), inc, rows); err != nil {
		tb.Fatal(err)
	}
}

const sec = int64(time.Second)

func testPushFetchWindow(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	k := wk("api", "alice", time.Second, 1700000000*sec)
	if got := window(t, s, k); got != 0 {
		t.Fatalf("unknown window: got %d, want 0", got)
	}
	push(t, s, "a", row(k, 5_000_000, 10))
	push(t, s, "b", row(k, 2_000_000, 10))
	push(t, s, "c", row(k, -500_000, 10))
	if got, want := window(t, s, k), int64(6_500_000); got != want {
		t.Errorf("Window: got %d, want %d", got, want)
	}
	unknown := wk("api", "bob", time.Second, 1700000000*sec)
	got := fetch(t, s, "a", k, unknown, k)
	if want := []int64{1_500_000, 0, 1_500_000}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Fetch as a: got %v, want %v", got, want)
	}
	if got, want := fetch(t, s, "nobody", k)[0], int64(6_500_000); got != want {
		t.Errorf("Fetch as a stranger: got %d, want %d", got, want)
	}
	// Fetch and Window of nothing.
	if err := s.Fetch(ctxT(t), "a", nil, nil); err != nil {
		t.Errorf("Fetch of no keys: %v", err)
	}
	if err := s.Fetch(ctxT(t), "a", []clustersync.WindowKey{k}, nil); err == nil {
		t.Error("Fetch with len(others) != len(keys): no error")
	}
}

func testVersions(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	k := wk("api", "alice", time.Second, 1700000000*sec)
	push(t, s, "a", row(k, 3, 100))
	push(t, s, "a", row(k, 7, 99))  // older: ignored
	push(t, s, "a", row(k, 9, 100)) // same version: ignored
	if got := window(t, s, k); got != 3 {
		t.Fatalf("after older pushes: got %d, want 3", got)
	}
	push(t, s, "a", row(k, 4, 101))
	push(t, s, "a", row(k, 4, 101)) // a retried push is harmless
	if got := window(t, s, k); got != 4 {
		t.Fatalf("after newer push: got %d, want 4", got)
	}
	// One window twice in one batch keeps the highest version, whatever the
	// order; the batch is not rejected.
	push(t, s, "a", row(k, 50, 150), row(k, 40, 140))
	if got := window(t, s, k); got != 50 {
		t.Fatalf("duplicate rows in one batch: got %d, want 50", got)
	}
	// Negative and extreme totals are kept exactly.
	k2 := wk("api", "big", time.Second, 1700000000*sec)
	push(t, s, "a", row(k2, math.MaxInt64-1, 1))
	push(t, s, "b", row(k2, 1, 1))
	if got := window(t, s, k2); got != math.MaxInt64 {
		t.Fatalf("large totals: got %d, want %d", got, int64(math.MaxInt64))
	}
	push(t, s, "c", row(k2, 5, 1)) // the sum overflows int64: clamped, not an error
	if got := window(t, s, k2); got != math.MaxInt64 {
		t.Fatalf("overflowing sum: got %d, want it clamped to %d", got, int64(math.MaxInt64))
	}
}

// Keys are bytea: any bytes, including U+0000 and invalid UTF-8, stay
// distinct; so do windows differing only in size or start.
func testKeysDistinct(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	keys := []string{"", "a", "a\x00", "a\x00b", "a|b", "a:b", "a b", "A", "\xff\xfe", "ключ", "🔑", strings.Repeat("x", 1024)}
	var rows []clustersync.Row
	for i, k := range keys {
		rows = append(rows, row(wk("ns", k, time.Second, 0), int64(i+1), 1))
	}
	rows = append(rows,
		row(wk("ns", "a", 2*time.Second, 0), 100, 1),
		row(wk("ns", "a", time.Second, sec), 200, 1),
		row(wk("ns2", "a", time.Second, 0), 300, 1),
		row(wk("ns", "a", 1500*time.Microsecond, 3000*int64(time.Microsecond)), 400, 1), // sub-millisecond precision is kept
	)
	push(t, s, "inc", rows...)
	for _, r := range rows {
		if got := window(t, s, r.WindowKey); got != r.Total {
			t.Errorf("window %+v: got %d, want %d", r.WindowKey, got, r.Total)
		}
	}
}

// A batch larger than one statement (5000 rows) is pushed and fetched
// whole, and PushFetch's results follow its input order, duplicates
// included.
func testLargeBatches(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	const n = 12_345
	rows := make([]clustersync.Row, n)
	keys := make([]clustersync.WindowKey, n)
	for i := range rows {
		keys[i] = wk("ns", fmt.Sprintf("k%d", n-i), time.Minute, 60*sec) // not in key order
		rows[i] = row(keys[i], int64(i), 1)
	}
	push(t, s, "other", rows...)
	got := fetch(t, s, "me", keys...)
	for i := range got {
		if got[i] != int64(i) {
			t.Fatalf("Fetch[%d]: got %d, want %d", i, got[i], i)
		}
	}
	mine := make([]clustersync.Row, 0, n+1)
	for i := range keys {
		mine = append(mine, row(keys[i], 1, 1))
	}
	mine = append(mine, row(keys[7], 1, 2)) // the same window twice
	others := make([]int64, len(mine))
	if err := s.PushFetch(ctxT(t), "me", mine, others); err != nil {
		t.Fatal(err)
	}
	for i := range others {
		want := int64(i)
		if i == n {
			want = 7
		}
		if others[i] != want {
			t.Fatalf("PushFetch others[%d]: got %d, want %d", i, others[i], want)
		}
	}
	if got, want := window(t, s, keys[9]), int64(9+1); got != want {
		t.Errorf("Window after PushFetch: got %d, want %d", got, want)
	}
	// A call split over several connections fails as a whole when its
	// context is done.
	cctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	if err := s.PushFetch(cctx, "me", mine, others); !errors.Is(err, context.Canceled) || !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("PushFetch with a cancelled context: %v, want context.Canceled and ErrUnavailable", err)
	}
}

func testPushFetch(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	k := wk("api", "alice", time.Second, 1700000000*sec)
	k2 := wk("api", "alice", time.Second, 1699999999*sec)
	push(t, s, "b", row(k, 7, 1), row(k2, 11, 1))
	others := []int64{-1, -1, -1}
	unknown := wk("api", "nobody", time.Second, 0)
	if err := s.PushFetch(ctxT(t), "a", []clustersync.Row{row(k, 3, 5), row(k2, 2, 5), row(unknown, 1, 5)}, others); err != nil {
		t.Fatal(err)
	}
	if want := []int64{7, 11, 0}; fmt.Sprint(others) != fmt.Sprint(want) {
		t.Errorf("others: got %v, want %v", others, want)
	}
	if got := window(t, s, k); got != 10 {
		t.Errorf("Window after PushFetch: got %d, want 10", got)
	}
	// An older version is not applied, and the others still come back.
	if err := s.PushFetch(ctxT(t), "a", []clustersync.Row{row(k, 100, 4)}, others[:1]); err != nil {
		t.Fatal(err)
	}
	if others[0] != 7 || window(t, s, k) != 10 {
		t.Errorf("older PushFetch: others %d window %d, want 7 and 10", others[0], window(t, s, k))
	}
	if err := s.PushFetch(ctxT(t), "a", []clustersync.Row{row(k, 1, 9)}, nil); err == nil {
		t.Error("PushFetch with len(others) != len(rows): no error")
	}
}

// allowReq builds a one-limit request for a 1 s window at 1700000000.25 s.
func allowReq(inc, key string, limit, cost, ownCur, ownPrev, version int64) strategytest.OneAllow {
	start := 1700000000 * sec
	return strategytest.OneAllow{
		Inc: inc, At: start + sec/4, Cost: cost,
		Limits: []strategytest.OneLimit{{
			Size: time.Second, Limit: limit,
			Cur:  row(wk("api", key, time.Second, start), ownCur, version),
			Prev: row(wk("api", key, time.Second, start-sec), ownPrev, version),
		}},
	}
}

func testAllow(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	ctx := ctxT(t)
	cur := wk("api", "k", time.Second, 1700000000*sec)
	prev := wk("api", "k", time.Second, 1699999999*sec)
	// Others: 4 in the current window, 8 in the previous one.
	push(t, s, "b", row(cur, 4, 1), row(prev, 8, 1))

	// rate = (1 + 4) + (0 + 8) × 0.75 = 11; 11 + 2 ≤ 13 admits.
	res, err := strategytest.AllowOne(ctx, s, allowReq("a", "k", 13, 2, 1, 0, 10))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Allowed || len(res.Others) != 1 || res.Others[0] != [2]int64{4, 8} {
		t.Fatalf("got %+v, want allowed with others [4 8]", res)
	}
	if got := window(t, s, cur); got != 1+2+4 {
		t.Fatalf("cur window after admit: got %d, want 7", got)
	}
	if got := window(t, s, prev); got != 8 {
		t.Fatalf("prev window after admit: got %d, want 8 (own prev row 0 written)", got)
	}
	// Now own total is 3: rate = 7 + 6 = 13; 13 + 1 > 13 refuses, not counted.
	res, err = strategytest.AllowOne(ctx, s, allowReq("a", "k", 13, 1, 3, 0, 11))
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed {
		t.Fatalf("got allowed, want refused: %+v", res)
	}
	if got := window(t, s, cur); got != 7 {
		t.Fatalf("cur window after refusal: got %d, want 7", got)
	}
	// CountRejected counts the cost of a refusal.
	req := allowReq("a", "k", 13, 1, 3, 0, 12)
	req.CountRejected = true
	if res, err = strategytest.AllowOne(ctx, s, req); err != nil || res.Allowed {
		t.Fatalf("got %+v, %v; want refused", res, err)
	}
	if got := window(t, s, cur); got != 8 {
		t.Fatalf("cur window after counted refusal: got %d, want 8", got)
	}
	// An old version decides but does not overwrite.
	if res, err = strategytest.AllowOne(ctx, s, allowReq("a", "k", 1000, 1, 0, 0, 5)); err != nil || !res.Allowed {
		t.Fatalf("got %+v, %v; want allowed", res, err)
	}
	if got := window(t, s, cur); got != 8 {
		t.Fatalf("cur window after stale allow: got %d, want 8", got)
	}
	// The boundary: rate + cost == limit admits.
	if res, err = strategytest.AllowOne(ctx, s, allowReq("c", "edge", 10, 10, 0, 0, 1)); err != nil || !res.Allowed {
		t.Fatalf("rate + cost == limit: got %+v, %v; want allowed", res, err)
	}
	// No limits: allowed, no store access needed.
	if res, err = strategytest.AllowOne(ctx, s, strategytest.OneAllow{Inc: "a", Cost: 1}); err != nil || !res.Allowed {
		t.Fatalf("no limits: got %+v, %v; want allowed", res, err)
	}
}

func testAllowSeveralLimits(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	ctx := ctxT(t)
	start := 1700000040 * sec
	at := start + 30*sec // half of the minute window
	mk := func(size time.Duration, limit, own, v int64) strategytest.OneLimit {
		cs := at / int64(size) * int64(size)
		return strategytest.OneLimit{Size: size, Limit: limit,
			Cur:  row(wk("ns", "k", size, cs), own, v),
			Prev: row(wk("ns", "k", size, cs-int64(size)), 0, v)}
	}
	push(t, s, "b", row(wk("ns", "k", time.Minute, at/int64(time.Minute)*int64(time.Minute)), 50, 1))
	// The 1 s limit has room, the 1 min limit (50 + 1 > 50) has not.
	req := strategytest.OneAllow{Inc: "a", At: at, Cost: 1,
		Limits: []strategytest.OneLimit{mk(time.Second, 10, 0, 2), mk(time.Minute, 50, 0, 2)}}
	res, err := strategytest.AllowOne(ctx, s, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed || res.Others[0] != [2]int64{0, 0} || res.Others[1] != [2]int64{50, 0} {
		t.Fatalf("got %+v, want refused with others [[0 0] [50 0]]", res)
	}
	req.Limits[1].Limit = 51
	req.Limits[0].Cur.Version, req.Limits[1].Cur.Version = 3, 3
	if res, err = strategytest.AllowOne(ctx, s, req); err != nil || !res.Allowed {
		t.Fatalf("got %+v, %v; want allowed", res, err)
	}
	if got := window(t, s, req.Limits[0].Cur.WindowKey); got != 1 {
		t.Errorf("1 s window: got %d, want 1", got)
	}
	if got := window(t, s, req.Limits[1].Cur.WindowKey); got != 51 {
		t.Errorf("1 min window: got %d, want 51", got)
	}
	// Rows of two keys cannot be decided under one lock.
	bad := req
	bad.Limits = append([]strategytest.OneLimit(nil), req.Limits...)
	bad.Limits[1].Cur.Key = "other"
	if _, err := strategytest.AllowOne(ctx, s, bad); err == nil {
		t.Error("rows of two keys: no error")
	}
}

// Allow is exact across nodes: incarnations racing for the last units of a
// limit admit exactly the limit between them.
func testAllowExactAcrossIncarnations(t *testing.T, d pgdb) {
	cfg := d.config()
	const (
		nodes   = 3
		workers = 4 // keys decided concurrently per node
		limit   = 40
	)
	stores := make([]*pgstore.Store, nodes)
	for i := range stores {
		stores[i] = openStore(t, cfg)
	}
	ctx := ctxT(t)
	var (
		mu       sync.Mutex
		admitted = map[string]int64{}
		wg       sync.WaitGroup
		errs     = make(chan error, nodes*workers)
	)
	for n := range nodes {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Each (node, worker) owns its calls on key w, as the Syncer
				// serialises one key per incarnation; own total and version
				// are kept here as a node keeps them.
				inc := fmt.Sprintf("node-%d-w%d", n, w)
				key := fmt.Sprintf("k%d", w)
				var own, version int64
				for range 3 * limit {
					version++
					res, err := strategytest.AllowOne(ctx, stores[n], allowReq(inc, key, limit, 1, own, 0, version))
					if err != nil {
						errs <- err
						return
					}
					if res.Allowed {
						own++
						mu.Lock()
						admitted[key]++
						mu.Unlock()
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for w := range workers {
		key := fmt.Sprintf("k%d", w)
		if admitted[key] != limit {
			t.Errorf("key %s: %d admitted, want exactly %d", key, admitted[key], limit)
		}
		if got := window(t, stores[0], wk("api", key, time.Second, 1700000000*sec)); got != limit {
			t.Errorf("key %s: store holds %d, want %d", key, got, limit)
		}
	}
}

func testClosed(t *testing.T, d pgdb) {
	s, _ := newStore(t, d)
	k := wk("a", "b", time.Second, 0)
	push(t, s, "a", row(k, 1, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	checks := map[string]error{
		"Push":      s.Push(ctx, "a", []clustersync.Row{row(k, 1, 2)}),
		"Fetch":     s.Fetch(ctx, "a", []clustersync.WindowKey{k}, make([]int64, 1)),
		"PushFetch": s.PushFetch(ctx, "a", []clustersync.Row{row(k, 1, 2)}, make([]int64, 1)),
		"Close":     s.Close(),
	}
	_, checks["Window"] = s.Window(ctx, k)
	_, checks["Allow"] = strategytest.AllowOne(ctx, s, allowReq("a", "b", 1, 1, 0, 0, 1))
	_, checks["Purge"] = s.Purge(ctx)
	for name, err := range checks {
		if !errors.Is(err, clustersync.ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", name, err)
		}
	}
}

// A store opens while its server is down, answers ErrUnavailable promptly
// within the caller's deadline, and works (creating its table) once the
// server is up; it survives a server restart.
func TestOutage(t *testing.T) {
	srv := harness.StartPostgres(t)
	srv.Stop()
	cfg := testConfig(srv.DSN(), pgstore.DefaultTable)
	cfg.Schema = "lim"
	s := openStore(t, cfg) // must not need the server
	k := wk("ns", "key", time.Second, 0)
	calls := map[string]func(ctx context.Context) error{
		"Push": func(ctx context.Context) error { return s.Push(ctx, "a", []clustersync.Row{row(k, 1, 1)}) },
		"Fetch": func(ctx context.Context) error {
			return s.Fetch(ctx, "a", []clustersync.WindowKey{k}, make([]int64, 1))
		},
		"PushFetch": func(ctx context.Context) error {
			return s.PushFetch(ctx, "a", []clustersync.Row{row(k, 1, 1)}, make([]int64, 1))
		},
		"Window": func(ctx context.Context) error { _, err := s.Window(ctx, k); return err },
		"Allow": func(ctx context.Context) error {
			_, err := strategytest.AllowOne(ctx, s, allowReq("a", "key", 1, 1, 0, 0, 1))
			return err
		},
		"Purge": func(ctx context.Context) error { _, err := s.Purge(ctx); return err },
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		start := time.Now()
		err := call(ctx)
		cancel()
		if !errors.Is(err, clustersync.ErrUnavailable) {
			t.Errorf("%s during outage: got %v, want ErrUnavailable", name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s during outage took %s", name, d)
		}
	}
	srv.Start()
	push(t, s, "a", row(k, 5, 2))
	if got := window(t, s, k); got != 5 {
		t.Fatalf("after the server came up: got %d, want 5", got)
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	_, err := s.Window(ctx, k)
	cancel()
	if !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("Window after stop: got %v, want ErrUnavailable", err)
	}
	srv.Start()
	push(t, s, "a", row(k, 6, 3))
	if got := window(t, s, k); got != 6 {
		t.Fatalf("after restart: got %d, want 6", got)
	}
}

// A call whose context is done returns promptly with an error wrapping
// ctx.Err() or ErrUnavailable, even while it waits for a lock.
func testContext(t *testing.T, d pgdb) {
	s, cfg := newStore(t, d)
	k := wk("api", "k", time.Second, 1700000000*sec)
	push(t, s, "a", row(k, 1, 1))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Push(ctx, "a", []clustersync.Row{row(k, 2, 2)}); !errors.Is(err, context.Canceled) && !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("Push with a cancelled ctx: got %v", err)
	}
	// Hold the key's Allow lock in another transaction: Allow must wait, then
	// give up at its deadline.
	c := connect(t, d.dsn)
	tx, err := c.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctxT(t), "SELECT pg_advisory_xact_lock($1)", pgstore.LockKey(cfg.Schema, cfg.Table, "api", "k")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = strategytest.AllowOne(ctx, s, allowReq("a", "k", 10, 1, 1, 0, 5))
	if !errors.Is(err, clustersync.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Allow blocked past its deadline: got %v, want ErrUnavailable wrapping DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Allow blocked past its deadline returned after %s", d)
	}
	// Another key is not blocked.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if _, err := strategytest.AllowOne(ctx2, s, allowReq("a", "other", 10, 1, 0, 0, 5)); err != nil {
		t.Errorf("Allow of another key: %v", err)
	}
}

// Nodes starting together all create (or find) the table; with
// create_schema false a missing table is a plain error until the DDL of
// SchemaSQL is run by hand.
func testSchemaCreation(t *testing.T, d pgdb) {
	dsn := d.dsn
	cfg := d.config()
	cfg.Schema, cfg.Table = "Limiter_Schema", "Windows"
	const nodes = 8
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for i := range nodes {
		s := openStore(t, cfg)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.Push(ctxT(t), fmt.Sprint(i), []clustersync.Row{row(wk("n", "k", time.Second, 0), 1, 1)})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent first use: %v", err)
		}
	}
	c := connect(t, dsn)
	var n int
	if err := c.QueryRow(ctxT(t), `SELECT count(*) FROM "Limiter_Schema"."Windows"`).Scan(&n); err != nil || n != nodes {
		t.Fatalf("rows in the created table: %d, %v; want %d", n, err, nodes)
	}
	if err := c.QueryRow(ctxT(t), `SELECT count(*) FROM pg_indexes WHERE schemaname = 'Limiter_Schema' AND tablename = 'Windows'`).Scan(&n); err != nil || n != 3 {
		t.Fatalf("indexes on the created table: %d, %v; want 3 (primary key, expire_at, changed)", n, err)
	}

	manual := d.config()
	manual.CreateSchema = false
	s := openStore(t, manual)
	err := s.Push(ctxT(t), "a", []clustersync.Row{row(wk("n", "k", time.Second, 0), 1, 1)})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "42P01" || errors.Is(err, clustersync.ErrUnavailable) {
		t.Fatalf("missing table with create_schema false: got %v, want undefined_table, not ErrUnavailable", err)
	}
	if _, err := c.Exec(ctxT(t), pgstore.SchemaSQL(manual)); err != nil {
		t.Fatalf("running SchemaSQL: %v", err)
	}
	if _, err := c.Exec(ctxT(t), pgstore.SchemaSQL(manual)); err != nil {
		t.Fatalf("running SchemaSQL twice: %v", err)
	}
	push(t, s, "a", row(wk("n", "k", time.Second, 0), 1, 1))

	// A dropped table is created again by the next calls.
	autoCfg := d.config()
	auto := openStore(t, autoCfg)
	push(t, auto, "a", row(wk("n", "k", time.Second, 0), 1, 1))
	if _, err := c.Exec(ctxT(t), "DROP TABLE "+pgx.Identifier{autoCfg.Table}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	var last error
	for range 3 {
		if last = auto.Push(ctxT(t), "a", []clustersync.Row{row(wk("n", "k", time.Second, 0), 1, 2)}); last == nil {
			break
		}
	}
	if last != nil {
		t.Fatalf("pushes after the table was dropped still fail: %v", last)
	}
}

// New runs on a caller's transaction, which the caller may roll back.
func testNewOnTx(t *testing.T, d pgdb) {
	c := connect(t, d.dsn)
	ctx := ctxT(t)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	table := harness.UniqueName("w")
	s := pgstore.New(tx, pgstore.Config{Table: table, CreateSchema: true})
	k := wk("ns", "k", time.Second, 0)
	push(t, s, "a", row(k, 3, 1))
	push(t, s, "b", row(k, 4, 1))
	if got := fetch(t, s, "a", k)[0]; got != 4 {
		t.Errorf("Fetch in tx: got %d, want 4", got)
	}
	res, err := strategytest.AllowOne(ctx, s, allowReq("a", "k", 100, 1, 0, 0, 1))
	if err != nil || !res.Allowed {
		t.Errorf("Allow in tx: %+v, %v", res, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var exists bool
	if err := c.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil || exists {
		t.Fatalf("table after rollback: exists=%v err=%v; want rolled back", exists, err)
	}
}

func TestNewPanicsOnBadIdentifier(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("New with table `x; drop`: no panic")
		}
	}()
	pgstore.New(nil, pgstore.Config{Table: "x; drop"})
}
