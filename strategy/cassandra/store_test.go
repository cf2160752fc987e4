package cassandra_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limiterd/limiterd/integration/harness"
	cassandrastore "github.com/limiterd/limiterd/strategy/cassandra"
	"github.com/limiterd/limiterd/strategy/strategytest"
	clustersync "github.com/limiterd/limiterd/sync"
)

var (
	_ clustersync.Store       = (*cassandrastore.Store)(nil)
	_ clustersync.PushFetcher = (*cassandrastore.Store)(nil)
)

// Cassandra cannot decide an Allow atomically without lightweight
// transactions; the Syncer must not take it for a GroupAllower.
func TestNotGroupAllower(t *testing.T) {
	var s any = (*cassandrastore.Store)(nil)
	if _, ok := s.(clustersync.GroupAllower); ok {
		t.Fatal("*Store implements clustersync.GroupAllower; want not")
	}
}

// env is a keyspace of its own on a test Cassandra.
type env struct {
	c        *harness.Cassandra
	keyspace string
}

// newEnv picks a fresh keyspace on c and drops it at cleanup.
func newEnv(tb testing.TB, c *harness.Cassandra) *env {
	tb.Helper()
	e := &env{c: c, keyspace: harness.UniqueName("limiterd_test")}
	tb.Cleanup(func() {
		if os.Getenv(harness.EnvCassandra) == "" {
			return // a private server: removed with its directory
		}
		s, err := cassandrastore.Open(e.config())
		if err != nil {
			return
		}
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := cassandrastore.ExecCQL(ctx, s, "DROP KEYSPACE IF EXISTS "+e.keyspace); err != nil {
			tb.Logf("drop keyspace %s: %v", e.keyspace, err)
		}
	})
	return e
}

// config is the store's configuration on the test keyspace, with a
// generous timeout for a loaded machine.
func (e *env) config() cassandrastore.Config {
	cfg := cassandrastore.DefaultConfig()
	cfg.Hosts = e.c.Hosts()
	cfg.Port = e.c.Port()
	cfg.Keyspace = e.keyspace
	cfg.Timeout = cassandrastore.Duration(10 * time.Second)
	cfg.ConnectTimeout = cassandrastore.Duration(10 * time.Second)
	return cfg
}

// open opens a store on cfg, closed at cleanup.
func open(tb testing.TB, cfg cassandrastore.Config) *cassandrastore.Store {
	tb.Helper()
	s, err := cassandrastore.Open(cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// ctx is a context for one step of a test.
func ctx(tb testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	return c
}

// TestStore runs the behaviour tests on one Cassandra
// (harness.SharedCassandra: LIMITERD_TEST_CASSANDRA, or a private server
// started for this test), in one keyspace of their own; each test uses
// its own namespaces.
func TestStore(t *testing.T) {
	c := harness.SharedCassandra(t)
	e := newEnv(t, c)
	// Create the schema once, so that the subtests measure no DDL.
	s := open(t, e.config())
	if _, err := s.Window(ctx(t), clustersync.WindowKey{Namespace: "warmup", Size: time.Second}); err != nil {
		t.Fatalf("first call: %v", err)
	}
	// The conformance suite: a store (and session) per subtest, all on
	// the one keyspace; the suite writes under namespaces of its own.
	t.Run("Conformance", func(t *testing.T) {
		strategytest.Run(t, func(t *testing.T) clustersync.Store { return open(t, e.config()) })
	})
	for _, tt := range []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"PushFetchWindow", testPushFetchWindow},
		{"Versions", testVersions},
		{"KeysDistinct", testKeysDistinct},
		{"LargeBatches", testLargeBatches},
		{"FetchDuplicatesAndMixedWindows", testFetchMixed},
		{"PushFetch", testPushFetch},
		{"Expiry", testExpiry},
		{"Concurrent", testConcurrent},
		{"Context", testContext},
		{"Closed", testClosed},
		{"SchemaIdempotent", testSchemaIdempotent},
		{"NoSchema", testNoSchema},
		{"Consistency", testConsistency},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, e) })
	}
	if os.Getenv(harness.EnvCassandra) == "" {
		// A private server: this test may kill and restart it.
		t.Run("Outage", func(t *testing.T) { testOutage(t, c, e) })
	}
}

var base = time.Now().Truncate(time.Hour)

// wk is window start n (of the given size, counted from base) of key in
// namespace ns.
func wk(ns, key string, size time.Duration, n int) clustersync.WindowKey {
	return clustersync.WindowKey{Namespace: ns, Size: size, Start: base.Add(time.Duration(n) * size).UnixNano(), Key: key}
}

func row(k clustersync.WindowKey, total, version int64) clustersync.Row {
	return clustersync.Row{WindowKey: k, Total: total, Version: version, ExpireAt: time.Now().Add(time.Hour)}
}

func push(t *testing.T, s *cassandrastore.Store, inc string, rows ...clustersync.Row) {
	t.Helper()
	if err := s.Push(ctx(t), inc, rows); err != nil {
		t.Fatalf("Push(%s, %d rows): %v", inc, len(rows), err)
	}
}

func fetch(t *testing.T, s *cassandrastore.Store, inc string, keys ...clustersync.WindowKey) []int64 {
	t.Helper()
	others := make([]int64, len(keys))
	for i := range others {
		others[i] = -12345 // must be overwritten
	}
	if err := s.Fetch(ctx(t), inc, keys, others); err != nil {
		t.Fatalf("Fetch(%s, %d keys): %v", inc, len(keys), err)
	}
	return others
}

func window(t *testing.T, s *cassandrastore.Store, k clustersync.WindowKey) int64 {
	t.Helper()
	v, err := s.Window(ctx(t), k)
	if err != nil {
		t.Fatalf("Window(%+v): %v", k, err)
	}
	return v
}

func testPushFetchWindow(t *testing.T, e *env) {
	s := open(t, e.config())
	ns := "pfw"
	a, b := wk(ns, "alice", time.Second, 0), wk(ns, "bob", time.Minute, 0)
	unknown := wk(ns, "nobody", time.Second, 0)
	push(t, s, "node-1/aaa", row(a, 5_000_000, 10), row(b, -1_500_000, 10))
	push(t, s, "node-2/bbb", row(a, 7_000_000, 10))
	push(t, s, "node-3/ccc", row(a, 1, 3), row(b, 2_000_000, 3))

	if got, want := fetch(t, s, "node-1/aaa", a, b, unknown), []int64{7_000_001, 2_000_000, 0}; !slices.Equal(got, want) {
		t.Errorf("Fetch as node-1 = %v, want %v", got, want)
	}
	if got, want := fetch(t, s, "node-2/bbb", a, b), []int64{5_000_001, 500_000}; !slices.Equal(got, want) {
		t.Errorf("Fetch as node-2 = %v, want %v", got, want)
	}
	if got, want := fetch(t, s, "node-9/new", b), []int64{500_000}; !slices.Equal(got, want) {
		t.Errorf("Fetch of one key as a new incarnation = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		k    clustersync.WindowKey
		want int64
	}{{a, 12_000_001}, {b, 500_000}, {unknown, 0}, {wk(ns, "alice", time.Second, 1), 0}, {wk(ns, "alice", time.Minute, 0), 0}, {wk("other", "alice", time.Second, 0), 0}} {
		if got := window(t, s, tc.k); got != tc.want {
			t.Errorf("Window(%s %s %d) = %d, want %d", tc.k.Key, tc.k.Size, tc.k.Start, got, tc.want)
		}
	}
	// Empty calls need no round trip and succeed.
	if err := s.Push(ctx(t), "node-1/aaa", nil); err != nil {
		t.Errorf("Push(nil) = %v", err)
	}
	if err := s.Fetch(ctx(t), "node-1/aaa", nil, nil); err != nil {
		t.Errorf("Fetch(nil) = %v", err)
	}
	if err := s.Fetch(ctx(t), "node-1/aaa", []clustersync.WindowKey{a}, nil); err == nil {
		t.Error("Fetch with len(others) != len(keys) succeeded")
	}
}

func testVersions(t *testing.T, e *env) {
	s := open(t, e.config())
	k := wk("versions", "k", time.Second, 0)
	push(t, s, "inc-a", row(k, 100, 50))
	for _, step := range []struct {
		name        string
		total, vers int64
		want        int64
	}{
		{"older version", 999, 49, 100},
		{"much older version", 999, 1, 100},
		{"same row again", 100, 50, 100},
		{"newer version", 200, 51, 200},
		{"newer version, lower total", 150, 52, 150},
		{"older than the newest", 777, 51, 150},
	} {
		push(t, s, "inc-a", row(k, step.total, step.vers))
		if got := window(t, s, k); got != step.want {
			t.Errorf("after %s (total %d, version %d): Window = %d, want %d", step.name, step.total, step.vers, got, step.want)
		}
	}
	// Versions are per incarnation: another incarnation's row with an
	// older version is a row of its own.
	push(t, s, "inc-b", row(k, 5, 1))
	if got := window(t, s, k); got != 155 {
		t.Errorf("with inc-b: Window = %d, want 155", got)
	}
	// A batch carrying both an old and a new version of two windows.
	k2 := wk("versions", "k2", time.Second, 0)
	push(t, s, "inc-a", row(k2, 10, 100))
	push(t, s, "inc-a", row(k, 1, 10), row(k2, 20, 101))
	if got := fetch(t, s, "inc-b", k, k2); !slices.Equal(got, []int64{150, 20}) {
		t.Errorf("after mixed batch: Fetch = %v, want [150 20]", got)
	}
}

func testKeysDistinct(t *testing.T, e *env) {
	s := open(t, e.config())
	keys := []string{"a", "a|b", "a:b", "a b", "a\x00b", "a\x00", "\x00", "A", "ä", "a|b:c", "🙂", strings.Repeat("x", 1024), strings.Repeat("x", 1023), ""}
	var rows []clustersync.Row
	var wks []clustersync.WindowKey
	for i, k := range keys {
		w := wk("distinct", k, time.Second, 0)
		wks = append(wks, w)
		rows = append(rows, row(w, int64(i+1), 1))
	}
	// The same keys in another namespace, size and start, which must not
	// mix with them.
	for _, w := range []clustersync.WindowKey{wk("distinct2", "a", time.Second, 0), wk("distinct", "a", 2*time.Second, 0), wk("distinct", "a", time.Second, 1)} {
		rows = append(rows, row(w, 1000, 1))
	}
	push(t, s, "writer", rows...)
	got := fetch(t, s, "reader", wks...)
	for i, k := range keys {
		if got[i] != int64(i+1) {
			t.Errorf("key %q: Fetch = %d, want %d", k, got[i], i+1)
		}
		if w := window(t, s, wks[i]); w != int64(i+1) {
			t.Errorf("key %q: Window = %d, want %d", k, w, i+1)
		}
	}
}

func testLargeBatches(t *testing.T, e *env) {
	s := open(t, e.config())
	const n = 5000
	rows := make([]clustersync.Row, n)
	keys := make([]clustersync.WindowKey, n)
	for i := range rows {
		key := fmt.Sprintf("key-%05d", i)
		if i%500 == 0 {
			key += strings.Repeat("k", 1000) // large keys cut batches by bytes
		}
		size := []time.Duration{time.Second, time.Minute, time.Hour}[i%3]
		keys[i] = wk("large", key, size, i%2)
		rows[i] = row(keys[i], int64(i), 7)
	}
	push(t, s, "inc-a", rows...)
	for i := range rows {
		rows[i].Total = 2 * int64(i)
	}
	push(t, s, "inc-b", rows...)
	got := fetch(t, s, "inc-a", keys...)
	for i := range got {
		if got[i] != 2*int64(i) {
			t.Fatalf("Fetch[%d] = %d, want %d", i, got[i], 2*i)
		}
	}
}

func testFetchMixed(t *testing.T, e *env) {
	s := open(t, e.config())
	cfg := e.config()
	cfg.BatchRows = 3
	s3 := open(t, cfg)
	ns := "mixed"
	var rows []clustersync.Row
	for i := range 10 {
		rows = append(rows, row(wk(ns, fmt.Sprint("k", i), time.Second, 0), int64(i+1), 1))
	}
	push(t, s, "w", rows...)
	// Duplicates, windows interleaved, unknown keys, out of order.
	keys := []clustersync.WindowKey{
		wk(ns, "k3", time.Second, 0), wk(ns, "k1", time.Second, 0), wk(ns, "k3", time.Second, 0),
		wk(ns, "k1", time.Second, 1), wk(ns, "zz", time.Second, 0), wk(ns, "k9", time.Second, 0),
		wk(ns, "k0", time.Second, 0), wk(ns, "k2", time.Second, 0), wk(ns, "k4", time.Second, 0),
		wk(ns, "k5", time.Second, 0), wk(ns, "k3", time.Second, 0), wk(ns, "k1", time.Minute, 0),
	}
	want := []int64{4, 2, 4, 0, 0, 10, 1, 3, 5, 6, 4, 0}
	for _, st := range []*cassandrastore.Store{s, s3} {
		if got := fetch(t, st, "r", keys...); !slices.Equal(got, want) {
			t.Errorf("Fetch = %v, want %v", got, want)
		}
	}
	// Few windows of few keys, several starts each (read by key, start
	// IN), with duplicates and unknown starts.
	rows = rows[:0]
	for n := range 5 {
		for _, size := range []time.Duration{time.Second, time.Minute} {
			rows = append(rows, row(wk(ns, "a", size, n), int64(100*n+int(size/time.Second)), 1))
		}
		rows = append(rows, row(wk(ns, "b", time.Second, n), int64(1000+n), 1))
	}
	push(t, s, "w", rows...)
	keys = []clustersync.WindowKey{
		wk(ns, "a", time.Second, 4), wk(ns, "a", time.Second, 3), wk(ns, "a", time.Minute, 4), wk(ns, "a", time.Minute, 3),
		wk(ns, "a", time.Second, 9), wk(ns, "a", time.Second, 4), wk(ns, "b", time.Second, 0), wk(ns, "a", time.Second, 0),
		wk(ns, "a", time.Second, 1), wk(ns, "a", time.Second, 2), wk(ns, "b", time.Second, 2),
	}
	want = []int64{401, 301, 460, 360, 0, 401, 1000, 1, 101, 201, 1002}
	for _, st := range []*cassandrastore.Store{s, s3} {
		if got := fetch(t, st, "r", keys...); !slices.Equal(got, want) {
			t.Errorf("Fetch by key = %v, want %v", got, want)
		}
		others := make([]int64, 4)
		if err := st.PushFetch(ctx(t), "r", []clustersync.Row{row(keys[0], 1, 1), row(keys[1], 1, 1), row(keys[2], 1, 1), row(keys[3], 1, 1)}, others); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(others, want[:4]) {
			t.Errorf("PushFetch of one key's 4 windows: others = %v, want %v", others, want[:4])
		}
	}
}

func testPushFetch(t *testing.T, e *env) {
	s := open(t, e.config())
	ns := "pushfetch"
	cur, prev := wk(ns, "k", time.Second, 1), wk(ns, "k", time.Second, 0)
	mcur, mprev := wk(ns, "k", time.Minute, 1), wk(ns, "k", time.Minute, 0)
	push(t, s, "other", row(cur, 3, 1), row(prev, 4, 1), row(mcur, 5, 1))
	others := make([]int64, 4)
	rows := []clustersync.Row{row(cur, 10, 5), row(prev, 20, 5), row(mcur, 30, 5), row(mprev, 40, 5)}
	if err := s.PushFetch(ctx(t), "me", rows, others); err != nil {
		t.Fatalf("PushFetch: %v", err)
	}
	if want := []int64{3, 4, 5, 0}; !slices.Equal(others, want) {
		t.Errorf("PushFetch others = %v, want %v", others, want)
	}
	if got := fetch(t, s, "other", cur, prev, mcur, mprev); !slices.Equal(got, []int64{10, 20, 30, 40}) {
		t.Errorf("rows pushed by PushFetch: Fetch = %v, want [10 20 30 40]", got)
	}
	if err := s.PushFetch(ctx(t), "me", rows, others[:1]); err == nil {
		t.Error("PushFetch with len(others) != len(rows) succeeded")
	}
}

// Rows vanish by themselves after ExpireAt (TTL rounded up to seconds).
func testExpiry(t *testing.T, e *env) {
	s := open(t, e.config())
	k, keep := wk("expiry", "k", time.Second, 0), wk("expiry", "keep", time.Second, 0)
	r := row(k, 42, 1)
	r.ExpireAt = time.Now().Add(time.Second)
	past := row(wk("expiry", "past", time.Second, 0), 1, 1)
	past.ExpireAt = time.Now().Add(-time.Hour) // TTL 1 s
	push(t, s, "inc", r, past, row(keep, 7, 1))
	if got := window(t, s, k); got != 42 {
		t.Fatalf("Window right after Push = %d, want 42", got)
	}
	began := time.Now()
	for window(t, s, k) != 0 || window(t, s, past.WindowKey) != 0 {
		if time.Since(began) > 15*time.Second {
			t.Fatal("rows with ExpireAt = now+1s still there after 15 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if gone := time.Now(); gone.Before(r.ExpireAt) {
		t.Errorf("row gone at %v, before its ExpireAt %v", gone.Format(time.StampMilli), r.ExpireAt.Format(time.StampMilli))
	}
	t.Logf("gone %v after ExpireAt", time.Since(r.ExpireAt).Round(time.Millisecond))
	if got := window(t, s, keep); got != 7 {
		t.Errorf("row expiring in an hour: Window = %d, want 7", got)
	}
}

// Several incarnations push and fetch at once, each its own rows with
// growing versions; in the end every window holds each one's last total.
func testConcurrent(t *testing.T, e *env) {
	s := open(t, e.config())
	const incs, rounds, nkeys = 4, 20, 50
	keys := make([]clustersync.WindowKey, nkeys)
	for i := range keys {
		keys[i] = wk("concurrent", fmt.Sprint("k", i), time.Second, 0)
	}
	var wg sync.WaitGroup
	errs := make(chan error, incs)
	for n := range incs {
		wg.Go(func() {
			inc := fmt.Sprint("inc-", n)
			rows := make([]clustersync.Row, nkeys)
			others := make([]int64, nkeys)
			for r := 1; r <= rounds; r++ {
				for i := range rows {
					rows[i] = row(keys[i], int64(r*(n+1)), int64(r))
				}
				if err := s.PushFetch(context.Background(), inc, rows, others); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := int64(rounds * (1 + 2 + 3 + 4))
	got := fetch(t, s, "reader", keys...)
	for i := range got {
		if got[i] != want {
			t.Errorf("key %d: Fetch = %d, want %d", i, got[i], want)
		}
	}
}

func testContext(t *testing.T, e *env) {
	s := open(t, e.config())
	k := wk("context", "k", time.Second, 0)
	push(t, s, "inc", row(k, 1, 1))
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	rows := make([]clustersync.Row, 200)
	keys := make([]clustersync.WindowKey, 200)
	for i := range rows {
		keys[i] = wk("context", fmt.Sprint("k", i), time.Second, 0)
		rows[i] = row(keys[i], 1, 2)
	}
	check := func(name string, err error, wantCtx error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s with a done context succeeded", name)
			return
		}
		if !errors.Is(err, clustersync.ErrUnavailable) || !errors.Is(err, wantCtx) {
			t.Errorf("%s with a done context = %v; want ErrUnavailable and %v", name, err, wantCtx)
		}
	}
	check("Push", s.Push(canceled, "inc", rows), context.Canceled)
	check("Fetch", s.Fetch(canceled, "inc", keys, make([]int64, len(keys))), context.Canceled)
	_, err := s.Window(canceled, k)
	check("Window", err, context.Canceled)
	check("PushFetch", s.PushFetch(canceled, "inc", rows, make([]int64, len(rows))), context.Canceled)

	short, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	time.Sleep(2 * time.Millisecond)
	check("Push past its deadline", s.Push(short, "inc", rows), context.DeadlineExceeded)

	// A context ending during a large call ends it promptly.
	big := make([]clustersync.Row, 20000)
	for i := range big {
		big[i] = row(wk("context", fmt.Sprint("big", i), time.Second, 0), 1, 3)
	}
	c, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = s.Push(c, "inc", big)
	took := time.Since(began)
	if err == nil {
		t.Logf("Push of %d rows finished within 50 ms", len(big))
	} else {
		check("Push of 20000 rows with a 50 ms timeout", err, context.DeadlineExceeded)
	}
	if took > 2*time.Second {
		t.Errorf("Push with a 50 ms timeout took %v", took)
	}
}

func testClosed(t *testing.T, e *env) {
	s := open(t, e.config())
	k := wk("closed", "k", time.Second, 0)
	push(t, s, "inc", row(k, 1, 1))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); !errors.Is(err, clustersync.ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
	_, werr := s.Window(ctx(t), k)
	for name, err := range map[string]error{
		"Push":      s.Push(ctx(t), "inc", []clustersync.Row{row(k, 2, 2)}),
		"Push(nil)": s.Push(ctx(t), "inc", nil),
		"Fetch":     s.Fetch(ctx(t), "inc", []clustersync.WindowKey{k}, make([]int64, 1)),
		"Window":    werr,
		"PushFetch": s.PushFetch(ctx(t), "inc", []clustersync.Row{row(k, 2, 2)}, make([]int64, 1)),
	} {
		if !errors.Is(err, clustersync.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
	// Closing during calls: each fails with ErrClosed or succeeds.
	s2 := open(t, e.config())
	push(t, s2, "inc", row(k, 1, 1))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				_, err := s2.Window(context.Background(), k)
				if err != nil {
					if !errors.Is(err, clustersync.ErrClosed) {
						t.Errorf("Window racing Close = %v, want ErrClosed", err)
					}
					return
				}
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	s2.Close()
	wg.Wait()
}

func testSchemaIdempotent(t *testing.T, e *env) {
	// Stores opened at once on a new table race to create it.
	cfg := e.config()
	cfg.Table = "again"
	var wg sync.WaitGroup
	stores := make([]*cassandrastore.Store, 3)
	for i := range stores {
		stores[i] = open(t, cfg)
		wg.Go(func() {
			if err := stores[i].Push(ctx(t), fmt.Sprint("inc", i), []clustersync.Row{row(wk("schema", "k", time.Second, 0), 1, 1)}); err != nil {
				t.Errorf("store %d: Push: %v", i, err)
			}
		})
	}
	wg.Wait()
	if got := window(t, stores[0], wk("schema", "k", time.Second, 0)); got != 3 {
		t.Errorf("Window = %d, want 3", got)
	}
}

// With create_schema off and no table, calls fail, but not with
// ErrUnavailable: retrying cannot help.
func testNoSchema(t *testing.T, e *env) {
	cfg := e.config()
	cfg.CreateSchema = false
	cfg.Table = "missing"
	s := open(t, cfg)
	err := s.Push(ctx(t), "inc", []clustersync.Row{row(wk("noschema", "k", time.Second, 0), 1, 1)})
	if err == nil || errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("Push to a missing table = %v; want an error that is not ErrUnavailable", err)
	}
}

// Every consistency level the config accepts works on one node with
// replication factor 1 (LOCAL_QUORUM = QUORUM = ALL = ONE there).
func testConsistency(t *testing.T, e *env) {
	for _, lv := range []struct{ w, r string }{{"one", "one"}, {"ALL", "ALL"}, {"ANY", "LOCAL_ONE"}, {"quorum", "quorum"}} {
		cfg := e.config()
		cfg.WriteConsistency, cfg.ReadConsistency = lv.w, lv.r
		s := open(t, cfg)
		k := wk("consistency", lv.w+lv.r, time.Second, 0)
		push(t, s, "inc", row(k, 9, 1))
		if got := fetch(t, s, "x", k); got[0] != 9 {
			t.Errorf("%s/%s: Fetch = %d, want 9", lv.w, lv.r, got[0])
		}
	}
	cfg := e.config()
	cfg.WriteConsistency = "THREE" // more replicas than there are
	s := open(t, cfg)
	err := s.Push(ctx(t), "inc", []clustersync.Row{row(wk("consistency", "three", time.Second, 0), 1, 1)})
	if !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("Push at THREE on one node = %v, want ErrUnavailable", err)
	}
}

// testOutage kills the (private) server c and starts it again: calls fail
// with ErrUnavailable while it is down (at once: no host), a store opened
// during the outage works once it is back, a session that found no host
// for longer than the replacement delay is replaced, and every store
// recovers without being reopened.
func testOutage(t *testing.T, c *harness.Cassandra, e *env) {
	s := open(t, e.config())
	cassandrastore.SetReplaceSessionAfter(s, time.Second)
	k := wk("outage", "k", time.Second, 0)
	push(t, s, "inc", row(k, 1, 1))
	if n := cassandrastore.Sessions(s); n != 1 {
		t.Fatalf("sessions before the outage = %d, want 1", n)
	}

	c.Kill()
	late := open(t, e.config()) // opened during the outage
	cassandrastore.SetReplaceSessionAfter(late, time.Second)
	down := time.Now()
	for time.Since(down) < 3*time.Second {
		for name, st := range map[string]*cassandrastore.Store{"store opened before": s, "store opened during the outage": late} {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			began := time.Now()
			err := st.Push(cctx, "inc", []clustersync.Row{row(k, 2, 2)})
			cancel()
			if !errors.Is(err, clustersync.ErrUnavailable) {
				t.Errorf("%s: Push while down = %v, want ErrUnavailable", name, err)
			}
			if took := time.Since(began); took > 500*time.Millisecond {
				t.Errorf("%s: Push while down took %v, want a prompt failure", name, took)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}

	c.Start()
	restarted := time.Now()
	for name, st := range map[string]*cassandrastore.Store{"store opened before": s, "store opened during the outage": late} {
		for {
			cctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := st.Push(cctx, "inc", []clustersync.Row{row(k, 3, 3)})
			cancel()
			if err == nil {
				t.Logf("%s: serves %v after the restart", name, time.Since(restarted).Round(time.Millisecond))
				break
			}
			if !errors.Is(err, clustersync.ErrUnavailable) {
				t.Fatalf("%s: Push after the restart = %v, want ErrUnavailable until it works", name, err)
			}
			if time.Since(restarted) > 30*time.Second {
				t.Fatalf("%s: Push still fails 30 s after the restart: %v", name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if got := window(t, s, k); got != 3 {
		t.Errorf("Window after the restart = %d, want 3", got)
	}
	if n := cassandrastore.Sessions(s); n != 2 {
		t.Errorf("sessions of the store opened before = %d, want 2 (replaced after 1 s without a host)", n)
	}
	if n := cassandrastore.Sessions(late); n != 1 {
		t.Errorf("sessions of the store opened during the outage = %d, want 1", n)
	}
}
