package redis_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/limiterd/limiterd/integration/harness"
	"github.com/limiterd/limiterd/ratelimit"
	redisstore "github.com/limiterd/limiterd/strategy/redis"
	"github.com/limiterd/limiterd/strategy/strategytest"
	clustersync "github.com/limiterd/limiterd/sync"
)

var (
	_ clustersync.Store        = (*redisstore.Store)(nil)
	_ clustersync.PushFetcher  = (*redisstore.Store)(nil)
	_ clustersync.GroupAllower = (*redisstore.Store)(nil)
	_ clustersync.BucketStore  = (*redisstore.Store)(nil)
	_ clustersync.LeaseStore   = (*redisstore.Store)(nil)
	_ clustersync.ChangeReader = (*redisstore.Store)(nil)

	_ redisstore.Client = (*redis.Client)(nil)
	_ redisstore.Client = (*redis.ClusterClient)(nil)
	_ redisstore.Client = (*redis.Ring)(nil)
)

// TestConformance runs the suite every store must pass, on one shared
// server, with a fresh key prefix per subtest.
func TestConformance(t *testing.T) {
	addr := redisAddr(t)
	strategytest.Run(t, func(t *testing.T) clustersync.Store {
		s, _ := newStoreAt(t, addr)
		return s
	})
}

var prefixSeq atomic.Int64

// newPrefix returns a key prefix no other test (or earlier run on a shared
// server) uses.
func newPrefix() string {
	return fmt.Sprintf("limiterd-test-%d-%d-%d", os.Getpid(), time.Now().UnixNano(), prefixSeq.Add(1))
}

// newStore opens a Store on the shared server with a fresh key prefix.
func newStore(tb testing.TB) *redisstore.Store {
	tb.Helper()
	s, _ := newStoreAt(tb, redisAddr(tb))
	return s
}

func newStoreAt(tb testing.TB, addrs ...string) (*redisstore.Store, string) {
	tb.Helper()
	cfg := redisstore.DefaultConfig()
	cfg.Addrs = addrs
	cfg.KeyPrefix = newPrefix()
	s, err := redisstore.Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s, cfg.KeyPrefix
}

func rawClient(tb testing.TB, addr string) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func ctxT(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func wk(ns, key string, size time.Duration, start int64) clustersync.WindowKey {
	return clustersync.WindowKey{Namespace: ns, Size: size, Start: start, Key: key}
}

func row(k clustersync.WindowKey, total, version int64) clustersync.Row {
	return clustersync.Row{WindowKey: k, Total: total, Version: version, ExpireAt: time.Now().Add(time.Hour)}
}

func mustPush(tb testing.TB, s clustersync.Store, inc string, rows ...clustersync.Row) {
	tb.Helper()
	if err := s.Push(ctxT(tb), inc, rows); err != nil {
		tb.Fatalf("Push(%s): %v", inc, err)
	}
}

func window(tb testing.TB, s clustersync.Windower, k clustersync.WindowKey) int64 {
	tb.Helper()
	n, err := s.Window(ctxT(tb), k)
	if err != nil {
		tb.Fatalf("Window(%+v): %v", k, err)
	}
	return n
}

func fetch(tb testing.TB, s clustersync.Store, inc string, keys ...clustersync.WindowKey) []int64 {
	tb.Helper()
	out := make([]int64, len(keys))
	for i := range out {
		out[i] = -12345 // must be overwritten
	}
	if err := s.Fetch(ctxT(tb), inc, keys, out); err != nil {
		tb.Fatalf("Fetch(%s): %v", inc, err)
	}
	return out
}

func TestPushFetchWindow(t *testing.T) {
	s := newStore(t)
	k1 := wk("api", "alice", time.Second, 1_700_000_000_000_000_000)
	k2 := wk("api", "alice", time.Minute, 1_699_999_980_000_000_000)
	unknown := wk("api", "bob", time.Second, 1_700_000_000_000_000_000)
	mustPush(t, s, "a", row(k1, 5_000_000, 1), row(k2, 7, 1))
	mustPush(t, s, "b", row(k1, 3, 5))

	if got, want := fetch(t, s, "a", k1, k2, unknown), []int64{3, 0, 0}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Fetch(a) = %v, want %v", got, want)
	}
	if got, want := fetch(t, s, "b", k1, k2, unknown), []int64{5_000_000, 7, 0}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Fetch(b) = %v, want %v", got, want)
	}
	if got, want := fetch(t, s, "c", k1), []int64{5_000_003}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Fetch(c) = %v, want %v", got, want)
	}
	for _, c := range []struct {
		k    clustersync.WindowKey
		want int64
	}{{k1, 5_000_003}, {k2, 7}, {unknown, 0}} {
		if got := window(t, s, c.k); got != c.want {
			t.Errorf("Window(%v) = %d, want %d", c.k, got, c.want)
		}
	}
	if err := s.Push(ctxT(t), "a", nil); err != nil {
		t.Errorf("Push(no rows) = %v", err)
	}
	if err := s.Fetch(ctxT(t), "a", nil, nil); err != nil {
		t.Errorf("Fetch(no keys) = %v", err)
	}
	if err := s.Fetch(ctxT(t), "a", []clustersync.WindowKey{k1}, nil); err == nil {
		t.Error("Fetch with len(others) != len(keys) succeeded")
	}
}

func TestVersionCheck(t *testing.T) {
	const p53 = 1 << 53
	cases := []struct {
		name  string
		steps [][2]int64 // total, version, pushed in order
		want  int64
	}{
		{"older is ignored", [][2]int64{{100, 10}, {1, 9}}, 100},
		{"equal is ignored", [][2]int64{{100, 10}, {2, 10}}, 100},
		{"newer applies", [][2]int64{{100, 10}, {3, 11}}, 3},
		{"beyond 2^53 by one", [][2]int64{{1, p53}, {2, p53 + 1}}, 2},
		{"beyond 2^53 older by one", [][2]int64{{2, p53 + 1}, {1, p53}}, 2},
		{"max int64", [][2]int64{{1, math.MaxInt64 - 1}, {2, math.MaxInt64}, {3, math.MaxInt64 - 1}}, 2},
		{"longer is newer", [][2]int64{{1, 999}, {2, 1000}, {3, 999}}, 2},
		{"negative versions", [][2]int64{{1, -5}, {2, -3}, {3, -10}}, 2},
		{"sign", [][2]int64{{1, -1}, {2, 0}, {3, -1_000_000_000_000_000_000}}, 2},
		{"same length 19 digits", [][2]int64{{1, 1_000_000_001_000_000_000}, {2, 1_000_000_000_999_999_999}}, 1},
		{"same length negative", [][2]int64{{1, -1_000_000_001_000_000_000}, {2, -1_000_000_000_999_999_999}}, 2},
		{"microsecond versions", [][2]int64{{1, 1_732_300_000_000_001}, {2, 1_732_300_000_000_002}, {3, 1_732_300_000_000_000}}, 2},
	}
	s := newStore(t)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := wk("v", "key", time.Second, int64(i)*int64(time.Second))
			for _, st := range c.steps {
				mustPush(t, s, "inc", row(k, st[0], st[1]))
			}
			if got := window(t, s, k); got != c.want {
				t.Errorf("Window = %d, want %d", got, c.want)
			}
		})
	}
}

func TestExactSums(t *testing.T) {
	s := newStore(t)
	k := wk("sum", "k", time.Second, 0)
	totals := map[string]int64{
		"a": 1<<53 + 1,
		"b": 1,
		"c": -3,
		"d": math.MaxInt64 / 4,
		"e": -999_999_999,
		"f": -1_000_000_000_000_000_007,
	}
	var sum int64
	for inc, n := range totals {
		mustPush(t, s, inc, row(k, n, 1))
		sum += n
	}
	if got := window(t, s, k); got != sum {
		t.Errorf("Window = %d, want %d", got, sum)
	}
	for inc, n := range totals {
		if got := fetch(t, s, inc, k)[0]; got != sum-n {
			t.Errorf("Fetch(%s) = %d, want %d", inc, got, sum-n)
		}
	}
	// Rewrite every total (big to small, small to big, sign changes): the
	// window's sum follows exactly.
	next := map[string]int64{
		"a": 3, "b": 1<<60 + 7, "c": -(1<<55 + 1), "d": 0, "e": 999_999_999_999_999, "f": -1,
	}
	sum = 0
	for inc, n := range next {
		mustPush(t, s, inc, row(k, n, 2))
		sum += n
	}
	if got := window(t, s, k); got != sum {
		t.Errorf("Window after rewrites = %d, want %d", got, sum)
	}
	for inc, n := range next {
		if got := fetch(t, s, inc, k)[0]; got != sum-n {
			t.Errorf("Fetch(%s) after rewrites = %d, want %d", inc, got, sum-n)
		}
	}
}

// trickyKeys are (namespace, key) pairs that a careless encoding would
// merge.
var trickyKeys = [][2]string{
	{"a", "b"}, {"a:b", ""}, {"a", ":b"}, {"a:", "b"}, {"a|b", "c"}, {"a", "b|c"},
	{"1:a", "b"}, {"1", "a:1:b"}, {"ns", "{x}"}, {"ns", "{x"}, {"ns", "x}"}, {"ns", "}{"},
	{"{ns}", "x"}, {"ns", "a b"}, {"ns", "a\x00b"}, {"ns\x00", "ab"}, {"ns", "ab\x00"},
	{"ns", "日本"}, {"", "ns:2:ab"}, {"ns", "x:1000000000:0"},
}

func TestKeysInjective(t *testing.T) {
	s := newStore(t)
	seen := map[[2]string][2]string{}
	var keys []clustersync.WindowKey
	for _, nk := range trickyKeys {
		for _, size := range []time.Duration{time.Second, 10 * time.Second} {
			k := wk(nk[0], nk[1], size, 0)
			at := [2]string{redisstore.RedisKey("p", k), redisstore.SumField(k)}
			if prev, ok := seen[at]; ok {
				t.Fatalf("%q and %q both map to %q", prev, nk, at)
			}
			seen[at] = nk
			keys = append(keys, k)
		}
	}
	for i, k := range keys {
		mustPush(t, s, "inc", row(k, int64(i+1), 1))
	}
	for i, k := range keys {
		if got := window(t, s, k); got != int64(i+1) {
			t.Errorf("Window(%q) = %d, want %d", k.Namespace+"/"+k.Key, got, i+1)
		}
	}
}

var tagRE = regexp.MustCompile(`^p:\{([0-9a-f]{16})\}:`)

func TestHashTag(t *testing.T) {
	tags := map[string]bool{}
	for _, nk := range trickyKeys {
		var tag string
		for _, size := range []time.Duration{100 * time.Millisecond, time.Second, time.Hour} {
			for _, start := range []int64{0, int64(size), -int64(size)} {
				rk := redisstore.RedisKey("p", wk(nk[0], nk[1], size, start))
				m := tagRE.FindStringSubmatch(rk)
				if m == nil {
					t.Fatalf("key %q has no 16-hex hash tag right after the prefix", rk)
				}
				// Redis takes the text between the first '{' and the next '}'.
				open := strings.IndexByte(rk, '{')
				if got := rk[open+1 : open+1+strings.IndexByte(rk[open+1:], '}')]; got != m[1] {
					t.Fatalf("Redis would read tag %q from %q, want %q", got, rk, m[1])
				}
				if tag == "" {
					tag = m[1]
				} else if m[1] != tag {
					t.Errorf("%q: windows have tags %q and %q, want one slot for all", nk, tag, m[1])
				}
			}
		}
		tags[tag] = true
	}
	if len(tags) < 2 {
		t.Errorf("%d distinct tags for %d keys of several namespaces", len(tags), len(trickyKeys))
	}
	// A brace in the prefix given to New is escaped, not left to break the tag.
	if rk := redisstore.RedisKey("a{b}", wk("n", "k", time.Second, 0)); !strings.HasPrefix(rk, "a%7Bb%7D:{") {
		t.Errorf("prefix a{b} gives key %q", rk)
	}
}

func TestSlotSpread(t *testing.T) {
	slot := func(rk string) uint16 {
		open := strings.IndexByte(rk, '{')
		return crc16(rk[open+1:open+17]) % 16384
	}
	// One namespace's keys fill all its buckets, each a slot of its own.
	one := map[uint16]bool{}
	for i := range 10_000 {
		one[slot(redisstore.RedisKey("limiterd", wk("one-namespace", fmt.Sprint("user-", i), time.Second, 0)))] = true
	}
	if len(one) < 60 {
		t.Errorf("10000 keys of one namespace use %d slots, want about 64", len(one))
	}
	// Namespaces spread over the cluster: 256 namespaces × 64 buckets.
	const n = 256
	slots := map[uint16]int{}
	for ns := range n {
		for i := range 2000 {
			slots[slot(redisstore.RedisKey("limiterd", wk(fmt.Sprint("ns-", ns), fmt.Sprint("user-", i), time.Second, 0)))]++
		}
	}
	// Balls into bins: 16384 tags in 16384 slots fill about 10356.
	if len(slots) < 9800 {
		t.Errorf("%d namespaces use %d slots, want about 10356", n, len(slots))
	}
}

// TestNeverStoredEmptyRowWritesNothing: a synchronous call sends a window
// its incarnation never stored as total 0, version 0. It reads the others'
// totals like any row but creates no key: an absent row already reads 0.
func TestNeverStoredEmptyRowWritesNothing(t *testing.T) {
	s, prefix := newStoreAt(t, redisAddr(t))
	raw := rawClient(t, redisAddr(t))
	empty, shared := wk("zero", "empty", time.Minute, 0), wk("zero", "shared", time.Minute, 0)
	mustPush(t, s, "b", row(shared, 5, 1))
	others := make([]int64, 2)
	rows := []clustersync.Row{row(empty, 0, 0), row(shared, 0, 0)}
	if err := s.PushFetch(ctxT(t), "a", rows, others); err != nil {
		t.Fatal(err)
	}
	if others[0] != 0 || others[1] != 5 {
		t.Errorf("others = %v, want [0 5]", others)
	}
	for _, f := range []struct {
		k     clustersync.WindowKey
		field string
		want  bool
	}{
		{empty, redisstore.SumField(empty), false},
		{empty, redisstore.RowField("a", empty), false},
		{shared, redisstore.SumField(shared), true},
		{shared, redisstore.RowField("b", shared), true},
		{shared, redisstore.RowField("a", shared), false},
	} {
		if got, err := raw.HExists(ctxT(t), redisstore.RedisKey(prefix, f.k), f.field).Result(); err != nil || got != f.want {
			t.Errorf("HEXISTS %q = %v (%v), want %v", f.field, got, err, f.want)
		}
	}
	// A real row of a itself, later, counts as usual.
	mustPush(t, s, "a", row(shared, 3, 2))
	if got := window(t, s, shared); got != 8 {
		t.Errorf("Window = %d, want 8", got)
	}
}

// TestRepeatedKeyInOnePush: rows of one window repeated in one call apply
// in order, as separate calls would: a newer version wins, an older one
// after it changes nothing, and the sum counts the final row once.
func TestRepeatedKeyInOnePush(t *testing.T) {
	s, _ := newStoreAt(t, redisAddr(t))
	k, other, huge := wk("dup", "k", time.Minute, 0), wk("dup", "other", time.Minute, 0), wk("dup", "huge", time.Minute, 0)
	mustPush(t, s, "b", row(k, 100, 1), row(huge, 100, 1))
	const big = 4_000_000_000_000_000 // past 10^15: the sum moves by HINCRBY
	rows := []clustersync.Row{
		row(k, 5, 10), row(other, 1, 1), row(k, 7, 12), row(k, 6, 11),
		row(huge, big, 5), row(huge, 3, 6), row(huge, big, 4),
	}
	others := make([]int64, len(rows))
	if err := s.PushFetch(ctxT(t), "a", rows, others); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{100, 0, 100, 100, 100, 100, 100} {
		if others[i] != want {
			t.Errorf("others[%d] = %d, want %d", i, others[i], want)
		}
	}
	for _, c := range []struct {
		k         clustersync.WindowKey
		sum, forB int64
	}{{k, 107, 7}, {huge, 103, 3}, {other, 1, 1}} {
		if got := window(t, s, c.k); got != c.sum {
			t.Errorf("Window(%s) = %d, want %d", c.k.Key, got, c.sum)
		}
		if got := fetch(t, s, "b", c.k)[0]; got != c.forB {
			t.Errorf("Fetch(%s) for b = %d, want %d", c.k.Key, got, c.forB)
		}
	}
}

// crc16 is Redis Cluster's CRC16 (XMODEM).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func TestExpiry(t *testing.T) {
	s, prefix := newStoreAt(t, redisAddr(t))
	raw := rawClient(t, redisAddr(t))
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	k := wk("exp", "k", time.Second, 0)
	rk := redisstore.RedisKey(prefix, k)
	expiry := func() time.Time {
		t.Helper()
		ms, err := raw.Do(ctxT(t), "PEXPIRETIME", rk).Int64()
		if err != nil {
			t.Fatal(err)
		}
		return time.UnixMilli(ms)
	}
	r := row(k, 1, 1)
	r.ExpireAt = base.Add(10*time.Second + 300*time.Microsecond) // rounds up
	mustPush(t, s, "a", r)
	if got, want := expiry(), base.Add(10*time.Second+time.Millisecond); !got.Equal(want) {
		t.Errorf("expiry after first push = %v, want %v", got, want)
	}
	r.Version, r.ExpireAt = 2, base.Add(5*time.Second) // earlier: must not shorten
	mustPush(t, s, "a", r)
	r.ExpireAt = time.Time{} // none: must not touch it
	r.Version = 3
	mustPush(t, s, "a", r)
	if got, want := expiry(), base.Add(10*time.Second+time.Millisecond); !got.Equal(want) {
		t.Errorf("expiry after earlier push = %v, want %v", got, want)
	}
	r2 := row(k, 1, 1)
	r2.ExpireAt = base.Add(20 * time.Second) // another incarnation, later
	mustPush(t, s, "b", r2)
	if got, want := expiry(), base.Add(20*time.Second); !got.Equal(want) {
		t.Errorf("expiry after later push = %v, want %v", got, want)
	}
	// A row that expired already leaves nothing behind.
	k2 := wk("exp", "k", time.Second, int64(time.Second))
	r3 := row(k2, 1, 1)
	r3.ExpireAt = time.Now().Add(-time.Minute)
	mustPush(t, s, "a", r3)
	if got := window(t, s, k2); got != 0 {
		t.Errorf("Window of an expired row = %d, want 0", got)
	}
}

// countHook counts round trips (single commands and pipelines) of the
// store's commands, leaving out connection set-up (HELLO, CLIENT SETINFO).
type countHook struct{ n atomic.Int64 }

func storeCmd(c redis.Cmder) bool {
	switch c.Name() {
	case "eval", "evalsha", "hmget", "hget":
		return true
	}
	return false
}

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if storeCmd(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && storeCmd(cmds[0]) {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// notSingle hides that a client is a *redis.Client, so the Store groups
// script calls as it does on a cluster (one (namespace, key) per call).
type notSingle struct{ *redis.Client }

func TestRoundTripsAndGrouping(t *testing.T) {
	for _, mode := range []string{"single", "cluster-style"} {
		t.Run(mode, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			hook := &countHook{}
			c.AddHook(hook)
			var s *redisstore.Store
			if mode == "single" {
				s = redisstore.New(c, newPrefix())
			} else {
				s = redisstore.New(notSingle{c}, newPrefix())
			}
			const n = 2500
			rows := make([]clustersync.Row, n)
			keys := make([]clustersync.WindowKey, n)
			for i := range rows {
				// Two sizes per key, adjacent, as the Syncer collects them.
				keys[i] = wk("rt", fmt.Sprint("key-", i/2), time.Duration(1+i%2)*time.Second, 0)
				rows[i] = row(keys[i], int64(i), 1)
			}
			// Warm up: load the scripts (the first call of each after a
			// server start takes a second round trip, EVAL after NOSCRIPT):
			// rows of two keys go to the push script, of one key to the
			// synchronous call's.
			warm := wk("rt", "warm", time.Second, 0)
			mustPush(t, s, "w", row(warm, 1, 1), row(wk("rt", "warm-2", time.Second, 0), 1, 1))
			mustPush(t, s, "w", row(warm, 1, 1))
			fetch(t, s, "w", warm)
			if err := s.PushFetch(ctxT(t), "w", []clustersync.Row{row(warm, 1, 1)}, make([]int64, 1)); err != nil {
				t.Fatal(err)
			}
			hook.n.Store(0)
			mustPush(t, s, "a", rows...)
			if got := hook.n.Load(); got != 3 {
				t.Errorf("Push of %d rows took %d round trips, want 3", n, got)
			}
			hook.n.Store(0)
			got := fetch(t, s, "b", keys...)
			if rt := hook.n.Load(); rt != 3 {
				t.Errorf("Fetch of %d windows took %d round trips, want 3", n, rt)
			}
			for i := range got {
				if got[i] != int64(i) {
					t.Fatalf("Fetch(b)[%d] = %d, want %d", i, got[i], i)
				}
			}
			others := make([]int64, 4)
			hook.n.Store(0)
			if err := s.PushFetch(ctxT(t), "b", []clustersync.Row{row(keys[0], 1, 1), row(keys[1], 1, 1), row(keys[2], 1, 1), row(keys[3], 1, 1)}, others); err != nil {
				t.Fatal(err)
			}
			if rt := hook.n.Load(); rt != 1 {
				t.Errorf("PushFetch took %d round trips, want 1", rt)
			}
			if fmt.Sprint(others) != "[0 1 2 3]" {
				t.Errorf("PushFetch others = %v, want [0 1 2 3]", others)
			}
		})
	}
}

func TestPushFetch(t *testing.T) {
	s := newStore(t)
	cur := wk("pf", "k", time.Second, 2*int64(time.Second))
	prev := wk("pf", "k", time.Second, int64(time.Second))
	mustPush(t, s, "b", row(cur, 4, 1), row(prev, 6, 1))
	mustPush(t, s, "c", row(cur, 10, 1))
	others := make([]int64, 2)
	if err := s.PushFetch(ctxT(t), "a", []clustersync.Row{row(cur, 1, 1), row(prev, 2, 1)}, others); err != nil {
		t.Fatal(err)
	}
	if others[0] != 14 || others[1] != 6 {
		t.Errorf("others = %v, want [14 6]", others)
	}
	// Written, version-checked like Push.
	if err := s.PushFetch(ctxT(t), "a", []clustersync.Row{row(cur, 100, 1)}, others[:1]); err != nil {
		t.Fatal(err)
	}
	if got := window(t, s, cur); got != 15 {
		t.Errorf("Window(cur) = %d, want 15", got)
	}
	if got := window(t, s, prev); got != 8 {
		t.Errorf("Window(prev) = %d, want 8", got)
	}
	if err := s.PushFetch(ctxT(t), "a", []clustersync.Row{row(cur, 100, 1)}, nil); err == nil {
		t.Error("PushFetch with len(others) != len(rows) succeeded")
	}
}

// allowLimit builds a limit of size with own totals at window start cs.
func allowLimit(ns, key string, size time.Duration, limit int64, cs, ownCur, ownPrev, version int64) strategytest.OneLimit {
	return strategytest.OneLimit{
		Size: size, Limit: limit,
		Cur:  row(wk(ns, key, size, cs), ownCur, version),
		Prev: row(wk(ns, key, size, cs-int64(size)), ownPrev, version),
	}
}

// wantAllowed is a single Allow's decision (a group of one) computed in Go.
func wantAllowed(req strategytest.OneAllow, others [][2]int64) bool {
	for i, l := range req.Limits {
		rate := ratelimit.SlidingRate(l.Cur.Total+others[i][0], l.Prev.Total+others[i][1], l.Size, req.At-l.Cur.Start)
		if rate+float64(req.Cost) > float64(l.Limit) {
			return false
		}
	}
	return true
}

func TestAllow(t *testing.T) {
	const sec = int64(time.Second)
	const m = ratelimit.Micro
	cs := 1_700_000_000 * sec
	cases := []struct {
		name          string
		at            int64 // offset into the current window
		cost          int64
		limit         int64
		ownCur        int64
		ownPrev       int64
		othersCur     int64
		othersPrev    int64
		countRejected bool
		want          bool
	}{
		{"empty", 0, m, 10 * m, 0, 0, 0, 0, false, true},
		{"exactly at the limit", 0, m, 10 * m, 4 * m, 0, 5 * m, 0, false, true},
		{"one over", 0, m, 10 * m, 5 * m, 0, 5 * m, 0, false, false},
		{"previous weighs half", sec / 2, m, 10 * m, 2 * m, 4 * m, 2 * m, 6 * m, false, true},  // 4+5+1 = 10
		{"previous weighs more", sec / 4, m, 10 * m, 2 * m, 4 * m, 2 * m, 6 * m, false, false}, // 4+7.5+1
		{"denied but counted", 0, m, 10 * m, 5 * m, 0, 5 * m, 0, true, false},
		{"zero cost when full", 0, 0, 10 * m, 5 * m, 0, 5 * m, 0, false, true},
		{"negative others", 0, m, 10 * m, 5 * m, 0, -3 * m, 0, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t)
			l := allowLimit("al", "k", time.Second, c.limit, cs, c.ownCur, c.ownPrev, 10)
			mustPush(t, s, "other", row(l.Cur.WindowKey, c.othersCur, 1), row(l.Prev.WindowKey, c.othersPrev, 1))
			req := strategytest.OneAllow{Inc: "me", At: cs + c.at, Cost: c.cost, Limits: []strategytest.OneLimit{l}, CountRejected: c.countRejected}
			res, err := strategytest.AllowOne(ctxT(t), s, req)
			if err != nil {
				t.Fatal(err)
			}
			if res.Allowed != c.want {
				t.Errorf("Allowed = %v, want %v", res.Allowed, c.want)
			}
			if len(res.Others) != 1 || res.Others[0] != [2]int64{c.othersCur, c.othersPrev} {
				t.Errorf("Others = %v, want [[%d %d]]", res.Others, c.othersCur, c.othersPrev)
			}
			wantCur := c.othersCur + c.ownCur
			if c.want || c.countRejected {
				wantCur += c.cost
			}
			if got := window(t, s, l.Cur.WindowKey); got != wantCur {
				t.Errorf("Window(cur) = %d, want %d", got, wantCur)
			}
			if got := window(t, s, l.Prev.WindowKey); got != c.othersPrev+c.ownPrev {
				t.Errorf("Window(prev) = %d, want %d", got, c.othersPrev+c.ownPrev)
			}
		})
	}
}

func TestAllowSeveralLimits(t *testing.T) {
	s := newStore(t)
	const sec = int64(time.Second)
	const m = ratelimit.Micro
	at := 1_700_000_000*sec + 30*sec + sec/2
	perSec := allowLimit("ml", "k", time.Second, 10*m, ratelimit.WindowStart(at, time.Second), 0, 0, 10)
	perMin := allowLimit("ml", "k", time.Minute, 20*m, ratelimit.WindowStart(at, time.Minute), 19*m, 0, 10)
	req := strategytest.OneAllow{Inc: "me", At: at, Cost: 2 * m, Limits: []strategytest.OneLimit{perSec, perMin}}
	res, err := strategytest.AllowOne(ctxT(t), s, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Allowed {
		t.Error("allowed although the minute limit is exceeded")
	}
	if got := window(t, s, perSec.Cur.WindowKey); got != 0 {
		t.Errorf("denied cost counted in the second window: %d", got)
	}
	if got := window(t, s, perMin.Cur.WindowKey); got != 19*m {
		t.Errorf("Window(minute) = %d, want %d", got, 19*m)
	}
	req.Cost = m
	req.Limits[0].Cur.Version, req.Limits[1].Cur.Version = 11, 11
	if res, err = strategytest.AllowOne(ctxT(t), s, req); err != nil || !res.Allowed {
		t.Fatalf("Allow(1 hit) = %v, %v; want allowed", res.Allowed, err)
	}
	if got := window(t, s, perMin.Cur.WindowKey); got != 20*m {
		t.Errorf("Window(minute) = %d, want %d", got, 20*m)
	}
	// An older version does not overwrite what the newer call wrote.
	req.Limits[0].Cur.Version, req.Limits[1].Cur.Version = 5, 5
	req.Limits[1].Cur.Total = 0
	if _, err = strategytest.AllowOne(ctxT(t), s, req); err != nil {
		t.Fatal(err)
	}
	if got := window(t, s, perMin.Cur.WindowKey); got != 20*m {
		t.Errorf("Window(minute) after an older Allow = %d, want %d", got, 20*m)
	}
	if res, err := strategytest.AllowOne(ctxT(t), s, strategytest.OneAllow{Inc: "me"}); err != nil || !res.Allowed {
		t.Errorf("Allow with no limits = %v, %v; want allowed", res.Allowed, err)
	}
}

// TestAllowMatchesContract compares the script's decisions with the
// contract's float64 formula on random inputs, many near the boundary.
func TestAllowMatchesContract(t *testing.T) {
	s := newStore(t)
	rng := rand.New(rand.NewPCG(1, 2))
	sizes := []time.Duration{100 * time.Millisecond, time.Second, 7 * time.Second, time.Minute, time.Hour}
	for i := range 300 {
		at := 1_700_000_000_000_000_000 + rng.Int64N(int64(time.Hour))
		req := strategytest.OneAllow{Inc: "me", At: at, Cost: rng.Int64N(3_000_000), CountRejected: rng.IntN(2) == 0}
		var others [][2]int64
		key := fmt.Sprint("k", i)
		for _, size := range sizes[:1+rng.IntN(len(sizes))] {
			cs := ratelimit.WindowStart(at, size)
			oc, op := rng.Int64N(50_000_000)-5_000_000, rng.Int64N(50_000_000)
			ownC, ownP := rng.Int64N(50_000_000), rng.Int64N(50_000_000)
			l := allowLimit("mc", key, size, 0, cs, ownC, ownP, 2)
			rate := ratelimit.SlidingRate(ownC+oc, ownP+op, size, at-cs)
			// Put the limit at, just below or just above the rate + cost.
			l.Limit = int64(math.Ceil(rate+float64(req.Cost))) + rng.Int64N(3) - 1
			mustPush(t, s, "other", row(l.Cur.WindowKey, oc, 1), row(l.Prev.WindowKey, op, 1))
			req.Limits = append(req.Limits, l)
			others = append(others, [2]int64{oc, op})
		}
		res, err := strategytest.AllowOne(ctxT(t), s, req)
		if err != nil {
			t.Fatal(err)
		}
		if want := wantAllowed(req, others); res.Allowed != want {
			t.Fatalf("case %d: Allowed = %v, want %v (req %+v, others %v)", i, res.Allowed, want, req, others)
		}
		if fmt.Sprint(res.Others) != fmt.Sprint(others) {
			t.Fatalf("case %d: Others = %v, want %v", i, res.Others, others)
		}
	}
}

func TestClosed(t *testing.T) {
	s := newStore(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	k := wk("c", "k", time.Second, 0)
	ctx := ctxT(t)
	_, werr := s.Window(ctx, k)
	_, aerr := strategytest.AllowOne(ctx, s, strategytest.OneAllow{Inc: "a", Limits: []strategytest.OneLimit{allowLimit("c", "k", time.Second, 1, 0, 0, 0, 1)}})
	for name, err := range map[string]error{
		"Leases":    s.Leases(ctx, 1, []clustersync.LeaseOp{leaseOp(clustersync.LeaseCount, "c", "k", "", 0, 0)}, make([]clustersync.LeaseReply, 1)),
		"Push":      s.Push(ctx, "a", []clustersync.Row{row(k, 1, 1)}),
		"Fetch":     s.Fetch(ctx, "a", []clustersync.WindowKey{k}, make([]int64, 1)),
		"PushFetch": s.PushFetch(ctx, "a", []clustersync.Row{row(k, 1, 1)}, make([]int64, 1)),
		"Window":    werr,
		"Allow":     aerr,
		"Close":     s.Close(),
	} {
		if !errors.Is(err, clustersync.ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

func TestUnavailable(t *testing.T) {
	k := wk("u", "k", time.Second, 0)
	calls := func(s *redisstore.Store, ctx context.Context) map[string]error {
		_, werr := s.Window(ctx, k)
		_, aerr := strategytest.AllowOne(ctx, s, strategytest.OneAllow{Inc: "a", Limits: []strategytest.OneLimit{allowLimit("u", "k", time.Second, 1, 0, 0, 0, 1)}})
		lops := []clustersync.LeaseOp{leaseOp(clustersync.LeaseCount, "u", "k", "", 0, 0), leaseOp(clustersync.LeaseCount, "u", "k2", "", 0, 0)}
		return map[string]error{
			"Leases":    s.Leases(ctx, 1, lops[:1], make([]clustersync.LeaseReply, 1)),
			"Leases2":   s.Leases(ctx, 1, lops, make([]clustersync.LeaseReply, 2)),
			"Push":      s.Push(ctx, "a", []clustersync.Row{row(k, 1, 1)}),
			"Fetch":     s.Fetch(ctx, "a", []clustersync.WindowKey{k}, make([]int64, 1)),
			"PushFetch": s.PushFetch(ctx, "a", []clustersync.Row{row(k, 1, 1)}, make([]int64, 1)),
			"Window":    werr,
			"Allow":     aerr,
		}
	}
	t.Run("nothing listening", func(t *testing.T) {
		// Open must succeed with the store down: errors surface on calls.
		s, _ := newStoreAt(t, fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t)))
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		for name, err := range calls(s, ctx) {
			if !errors.Is(err, clustersync.ErrUnavailable) {
				t.Errorf("%s = %v, want ErrUnavailable", name, err)
			}
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("7 calls with a 300ms deadline took %v", d)
		}
	})
	t.Run("no answer within the deadline", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() { // accept and never answer
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		}()
		s, _ := newStoreAt(t, l.Addr().String())
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		for name, err := range calls(s, ctx) {
			if !errors.Is(err, clustersync.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s = %v, want ErrUnavailable and DeadlineExceeded", name, err)
			}
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("7 calls with a 100ms deadline took %v", d)
		}
	})
}

// TestRestart kills the server under the store and starts an empty one on
// the same port: calls fail with ErrUnavailable meanwhile, then work again
// (after NOSCRIPT, re-sent as EVAL).
func TestRestart(t *testing.T) {
	srv := harness.StartRedis(t)
	s, _ := newStoreAt(t, srv.Addr())
	k := wk("r", "k", time.Second, 0)
	mustPush(t, s, "a", row(k, 1, 1))
	srv.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.Push(ctx, "a", []clustersync.Row{row(k, 2, 2)}); !errors.Is(err, clustersync.ErrUnavailable) {
		t.Errorf("Push while down = %v, want ErrUnavailable", err)
	}
	srv.Start()
	mustPush(t, s, "a", row(k, 3, 3))
	if got := fetch(t, s, "b", k)[0]; got != 3 {
		t.Errorf("Fetch after restart = %d, want 3", got)
	}
	res, err := strategytest.AllowOne(ctxT(t), s, strategytest.OneAllow{Inc: "b", Cost: 1, Limits: []strategytest.OneLimit{allowLimit("r", "k", time.Second, 4, 0, 0, 0, 1)}})
	if err != nil || !res.Allowed {
		t.Errorf("Allow after restart = %v, %v; want allowed", res.Allowed, err)
	}
}

func TestScriptFlush(t *testing.T) {
	// A private server: SCRIPT FLUSH would disturb others on a shared one.
	srv := harness.StartRedis(t)
	s, _ := newStoreAt(t, srv.Addr())
	raw := rawClient(t, srv.Addr())
	k := wk("sf", "k", time.Second, 0)
	others := make([]int64, 1)
	steps := []func() error{
		func() error { return s.Push(ctxT(t), "a", []clustersync.Row{row(k, 1, 1)}) },
		func() error { return s.Fetch(ctxT(t), "b", []clustersync.WindowKey{k}, others) },
		func() error { return s.PushFetch(ctxT(t), "b", []clustersync.Row{row(k, 1, 1)}, others) },
		func() error {
			_, err := strategytest.AllowOne(ctxT(t), s, strategytest.OneAllow{Inc: "c", Limits: []strategytest.OneLimit{allowLimit("sf", "k", time.Second, 10, 0, 0, 0, 1)}})
			return err
		},
		func() error { // one key: one script call
			return s.Leases(ctxT(t), time.Now().UnixNano(), []clustersync.LeaseOp{leaseOp(clustersync.LeaseCount, "sf", "k", "", 0, 0)}, make([]clustersync.LeaseReply, 1))
		},
		func() error { // two keys: a pipeline
			ops := []clustersync.LeaseOp{leaseOp(clustersync.LeaseCount, "sf", "k", "", 0, 0), leaseOp(clustersync.LeaseCount, "sf", "k2", "", 0, 0)}
			return s.Leases(ctxT(t), time.Now().UnixNano(), ops, make([]clustersync.LeaseReply, 2))
		},
	}
	for i, step := range steps {
		if err := raw.ScriptFlush(ctxT(t)).Err(); err != nil {
			t.Fatal(err)
		}
		if err := step(); err != nil {
			t.Errorf("step %d after SCRIPT FLUSH: %v", i, err)
		}
	}
	if got := window(t, s, k); got != 2 {
		t.Errorf("Window = %d, want 2", got)
	}
}

func TestConcurrentPushes(t *testing.T) {
	// Racing pushes of one incarnation's versions leave the newest total.
	s := newStore(t)
	k := wk("cc", "k", time.Second, 0)
	const n = 200
	errs := make(chan error, n)
	for v := range int64(n) {
		go func() { errs <- s.Push(ctxT(t), "a", []clustersync.Row{row(k, v*10, v)}) }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := window(t, s, k); got != (n-1)*10 {
		t.Errorf("Window = %d, want %d", got, (n-1)*10)
	}
}

func TestLargeBatches(t *testing.T) {
	// Several pipelines in flight: every window lands where it belongs.
	for _, mode := range []string{"single", "cluster-style"} {
		t.Run(mode, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: redisAddr(t), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = c.Close() })
			var s *redisstore.Store
			if mode == "single" {
				s = redisstore.New(c, newPrefix())
			} else {
				s = redisstore.New(notSingle{c}, newPrefix())
			}
			const n = 4321
			rows := make([]clustersync.Row, n)
			keys := make([]clustersync.WindowKey, n)
			for i := range rows {
				keys[i] = wk("lb", fmt.Sprint("key-", i), time.Second, 0)
				rows[i] = row(keys[i], int64(i), 1)
			}
			mustPush(t, s, "a", rows...)
			for i := range rows {
				rows[i].Total, rows[i].Version = 1, 2
			}
			others := make([]int64, n)
			if err := s.PushFetch(ctxT(t), "b", rows, others); err != nil {
				t.Fatal(err)
			}
			for i, got := range others {
				if got != int64(i) {
					t.Fatalf("PushFetch others[%d] = %d, want %d", i, got, i)
				}
			}
			for i, got := range fetch(t, s, "c", keys...) {
				if got != int64(i)+1 {
					t.Fatalf("Fetch[%d] = %d, want %d", i, got, i+1)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			for name, err := range map[string]error{
				"Push":      s.Push(ctx, "a", rows),
				"Fetch":     s.Fetch(ctx, "a", keys, others),
				"PushFetch": s.PushFetch(ctx, "a", rows, others),
			} {
				if !errors.Is(err, clustersync.ErrUnavailable) || !errors.Is(err, context.Canceled) {
					t.Errorf("%s with a cancelled ctx = %v, want ErrUnavailable and Canceled", name, err)
				}
			}
		})
	}
}

// sameHash returns the n-th window like k, keyed "mate-<i>", that is
// stored in k's hash under prefix.
func sameHash(prefix string, k clustersync.WindowKey, n int) clustersync.WindowKey {
	for i := 0; ; i++ {
		m := k
		m.Key = fmt.Sprint("mate-", i)
		if redisstore.RedisKey(prefix, m) == redisstore.RedisKey(prefix, k) {
			if n--; n == 0 {
				return m
			}
		}
	}
}

// TestKeyScriptMatchesPushScript runs one history of synchronous calls
// (the windows of one key, through the key script and its short paths)
// and the same rows through the push script (each call joined by a row
// of another namespace), and wants identical hashes, expiries and
// replies: new hashes and new keys, never-stored windows, unchanged rows,
// newer rows of the same expiry (replace) and of a later one, an older
// row, versions that grow a digit, and sums past 10^15 and 2^53.
func TestKeyScriptMatchesPushScript(t *testing.T) {
	addr := redisAddr(t)
	key, prefixKey := newStoreAt(t, addr)
	batch, prefixBatch := newStoreAt(t, addr)
	raw := rawClient(t, addr)
	exp := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	cur := wk("ks", "user", time.Minute, 60*int64(time.Minute))
	prev := wk("ks", "user", time.Minute, 59*int64(time.Minute))
	hour := wk("ks", "user", time.Hour, 0)
	mate := sameHash(prefixKey, cur, 1) // another key of cur's hash
	r := func(k clustersync.WindowKey, total, version int64) clustersync.Row {
		return clustersync.Row{WindowKey: k, Total: total, Version: version, ExpireAt: exp}
	}
	later := func(x clustersync.Row) clustersync.Row { x.ExpireAt = x.ExpireAt.Add(time.Minute); return x }
	type call struct {
		inc  string
		rows []clustersync.Row
	}
	history := []call{
		{"b", []clustersync.Row{r(mate, 4, 1)}},                              // a hash before user's rows
		{"a", []clustersync.Row{r(cur, 1, 8), r(prev, 0, 0), r(hour, 1, 8)}}, // new key, never-stored window, new hash
		{"a", []clustersync.Row{r(cur, 2, 9), r(hour, 2, 9)}},                // newer rows
		{"a", []clustersync.Row{r(cur, 2, 9), r(prev, 0, 0), r(hour, 2, 9)}}, // unchanged rows
		{"a", []clustersync.Row{r(cur, 3, 10), r(hour, 2, 10)}},              // a version one digit longer; an unchanged total
		{"b", []clustersync.Row{r(cur, 7, 2), r(hour, 3, 2)}},                // another incarnation
		{"a", []clustersync.Row{r(cur, 5, 13), r(hour, 5, 13)}},              //
		{"a", []clustersync.Row{r(cur, 4, 12), r(hour, 6, 12)}},              // older rows
		{"a", []clustersync.Row{later(r(cur, 6, 15)), r(hour, 7, 15)}},       // a later expiry
		{"b", []clustersync.Row{r(cur, 1<<55, 3)}},                           // a sum past 2^53
		{"a", []clustersync.Row{later(r(cur, 8, 16)), r(hour, 999_999_999_999_999, 16)}},
		{"a", []clustersync.Row{later(r(cur, 9, 17)), r(hour, 1_000_000_000_000_001, 17)}},
		{"a", []clustersync.Row{later(r(cur, 9, 18)), r(hour, 5, 18)}},      // a total back below 10^15
		{"a", []clustersync.Row{r(prev, 3, 18), r(cur, -2, 19)}},            // a new row; a negative total
		{"a", []clustersync.Row{r(prev, 3, 18), r(cur, -3, 20)}},            //
		{"c", []clustersync.Row{r(cur, 1, 1), later(later(r(prev, 1, 1)))}}, // new rows, one with a later expiry
	}
	other := wk("ks-other", "x", time.Minute, 0)
	for i, c := range history {
		got := make([]int64, len(c.rows))
		if err := key.PushFetch(ctxT(t), c.inc, c.rows, got); err != nil {
			t.Fatalf("call %d: PushFetch: %v", i, err)
		}
		joined := append(slices.Clone(c.rows), r(other, 1, int64(i+1)))
		want := make([]int64, len(joined))
		if err := batch.PushFetch(ctxT(t), c.inc, joined, want); err != nil {
			t.Fatalf("call %d: batch PushFetch: %v", i, err)
		}
		if !slices.Equal(got, want[:len(c.rows)]) {
			t.Errorf("call %d: others = %v, the batch script's %v", i, got, want[:len(c.rows)])
		}
	}
	sameHashes(t, raw, "synchronous calls", prefixKey, "batch script", prefixBatch, cur, prev, hour, mate)
}

// TestPushGroupsMatchOneByOne pushes rows of one hash with several
// versions and expiries in one call, which the push script takes as
// several groups of that hash, and the same rows one at a time beside
// it; after each call it wants the same others' totals and identical
// hashes: newer, older and unchanged rows, later expiries, and a sum
// past 2^53.
func TestPushGroupsMatchOneByOne(t *testing.T) {
	addr := redisAddr(t)
	batch, prefixBatch := newStoreAt(t, addr)
	single, prefixSingle := newStoreAt(t, addr)
	raw := rawClient(t, addr)
	exp := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	ks := []clustersync.WindowKey{wk("groups", "k", time.Minute, 0)}
	for n := 1; n < 5; n++ {
		ks = append(ks, sameHash(prefixBatch, ks[0], n))
	}
	r := func(i int, total, version int64, later time.Duration) clustersync.Row {
		return clustersync.Row{WindowKey: ks[i], Total: total, Version: version, ExpireAt: exp.Add(later)}
	}
	history := []struct {
		inc  string
		rows []clustersync.Row
	}{
		{"b", []clustersync.Row{r(0, 1, 1, 0), r(1, 1, 1, 0), r(2, 1, 1, 0), r(3, 1, 1, 0), r(4, 1, 1, 0)}},
		{"a", []clustersync.Row{r(0, 5, 10, 0), r(1, 6, 10, 0), r(2, 7, 9, 0), r(3, 8, 10, time.Minute), r(4, 9, 10, 0)}},
		{"a", []clustersync.Row{r(0, 4, 8, 0), r(1, 7, 11, 0), r(2, 7, 9, 0), r(3, 9, 11, 2*time.Minute), r(4, 1<<55, 11, 0)}},
		{"a", []clustersync.Row{r(0, 6, 12, 0), r(1, 8, 12, 0), r(2, 8, 12, 0), r(3, 10, 12, 2*time.Minute), r(4, 3, 12, 0)}},
	}
	for i, c := range history {
		got := make([]int64, len(c.rows))
		if err := batch.PushFetch(ctxT(t), c.inc, c.rows, got); err != nil {
			t.Fatalf("call %d: PushFetch: %v", i, err)
		}
		want := make([]int64, len(c.rows))
		for j := range c.rows {
			if err := single.PushFetch(ctxT(t), c.inc, c.rows[j:j+1], want[j:j+1]); err != nil {
				t.Fatalf("call %d, row %d: PushFetch: %v", i, j, err)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("call %d: others = %v, one row at a time %v", i, got, want)
		}
		sameHashes(t, raw, fmt.Sprint("call ", i), prefixBatch, "one row at a time", prefixSingle, ks[0])
	}
}

// sameHashes wants the hashes of windows ks under two prefixes to exist
// and to hold the same fields and expiry.
func sameHashes(t *testing.T, raw *redis.Client, nameA, prefixA, nameB, prefixB string, ks ...clustersync.WindowKey) {
	t.Helper()
	for _, k := range ks {
		a, b := redisstore.RedisKey(prefixA, k), redisstore.RedisKey(prefixB, k)
		ha, err1 := raw.HGetAll(ctxT(t), a).Result()
		hb, err2 := raw.HGetAll(ctxT(t), b).Result()
		ea, err3 := raw.Do(ctxT(t), "PEXPIRETIME", a).Int64()
		eb, err4 := raw.Do(ctxT(t), "PEXPIRETIME", b).Int64()
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			t.Fatal(err)
		}
		if len(ha) == 0 || !maps.Equal(ha, hb) || ea != eb {
			t.Errorf("hash of %+v:\n  %s: %v, expiry %d\n  %s: %v, expiry %d", k, nameA, ha, ea, nameB, hb, eb)
		}
	}
}

// TestAllowMatchesPushScript runs one history of Allow calls and, beside
// it, pushes through the push script the rows each call's decision
// stores (the previous rows, and the current ones with the cost counted
// when allowed or when denied calls count), and wants the others' totals
// the push script read, the decision they give, and identical hashes and
// expiries: allowed and denied calls, counted or not, newer current rows
// (replace), older ones, previous windows stored as sent, changed or
// never stored, another incarnation's writes, and sums past 2^53.
func TestAllowMatchesPushScript(t *testing.T) {
	addr := redisAddr(t)
	allow, prefixAllow := newStoreAt(t, addr)
	batch, prefixBatch := newStoreAt(t, addr)
	raw := rawClient(t, addr)
	const m = ratelimit.Micro
	sec, minute := wk("ah", "k", time.Second, 100*int64(time.Second)), wk("ah", "k", time.Minute, 60*int64(time.Second))
	secPrev, minPrev := sec, minute
	secPrev.Start -= int64(time.Second)
	minPrev.Start -= int64(time.Minute)
	exp := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	r := func(k clustersync.WindowKey, total, version int64) clustersync.Row {
		return clustersync.Row{WindowKey: k, Total: total, Version: version, ExpireAt: exp}
	}
	later := func(x clustersync.Row) clustersync.Row { x.ExpireAt = x.ExpireAt.Add(time.Minute); return x }
	type step struct {
		inc           string
		cost, limit   int64
		countRejected bool
		cur, prev     [2]clustersync.Row // per limit (second, minute); a zero Size leaves the minute out
	}
	var zero clustersync.Row
	steps := []step{
		{"a", m, 5 * m, false, [2]clustersync.Row{r(sec, 0, 10), r(minute, 0, 10)}, [2]clustersync.Row{r(secPrev, 0, 0), r(minPrev, 0, 0)}},
		{"a", m, 5 * m, false, [2]clustersync.Row{r(sec, m, 11), r(minute, m, 11)}, [2]clustersync.Row{r(secPrev, 0, 0), r(minPrev, 0, 0)}},
		{"b", 3 * m, 5 * m, false, [2]clustersync.Row{r(sec, 0, 1), r(minute, 0, 1)}, [2]clustersync.Row{r(secPrev, 2*m, 1), r(minPrev, 0, 0)}},
		{"a", 2 * m, 5 * m, false, [2]clustersync.Row{r(sec, 2*m, 12), r(minute, 2*m, 12)}, [2]clustersync.Row{r(secPrev, 4*m, 12), r(minPrev, 0, 0)}},     // denied
		{"a", 2 * m, 5 * m, true, [2]clustersync.Row{r(sec, 2*m, 13), r(minute, 2*m, 13)}, [2]clustersync.Row{r(secPrev, 4*m, 12), r(minPrev, 0, 0)}},      // denied, counted
		{"a", 0, 5 * m, false, [2]clustersync.Row{r(sec, 4*m, 14), later(r(minute, 4*m, 14))}, [2]clustersync.Row{r(secPrev, 4*m, 12), r(minPrev, m, 14)}}, // a later expiry
		{"a", m, 5 * m, false, [2]clustersync.Row{r(sec, 4*m, 9), zero}, [2]clustersync.Row{r(secPrev, 4*m, 12), zero}},                                    // an older row
		{"b", 0, 1 << 60, false, [2]clustersync.Row{r(sec, 1<<55+1, 2), zero}, [2]clustersync.Row{r(secPrev, 2*m, 1), zero}},                               // a sum past 2^53
		{"a", m, 1 << 60, false, [2]clustersync.Row{r(sec, 4*m, 15), later(r(minute, 4*m, 15))}, [2]clustersync.Row{r(secPrev, 4*m, 12), r(minPrev, m, 14)}},
		{"a", m, 1 << 60, false, [2]clustersync.Row{r(sec, 5*m, 160), later(r(minute, 5*m, 160))}, [2]clustersync.Row{r(secPrev, 4*m, 12), r(minPrev, 2*m, 16)}}, // versions a digit longer
	}
	at := sec.Start + int64(time.Second)/4
	other := wk("ah-other", "x", time.Minute, 0)
	for i, st := range steps {
		req := strategytest.OneAllow{Inc: st.inc, At: at, Cost: st.cost, CountRejected: st.countRejected}
		for j := range st.cur {
			if st.cur[j].Size != 0 {
				req.Limits = append(req.Limits, strategytest.OneLimit{Size: st.cur[j].Size, Limit: st.limit, Cur: st.cur[j], Prev: st.prev[j]})
			}
		}
		got, err := strategytest.AllowOne(ctxT(t), allow, req)
		if err != nil {
			t.Fatalf("step %d: Allow: %v", i, err)
		}
		var rows []clustersync.Row
		for _, l := range req.Limits {
			rows = append(rows, l.Cur, l.Prev)
		}
		if got.Allowed || req.CountRejected {
			for j := 0; j < len(rows); j += 2 {
				rows[j].Total += req.Cost
			}
		}
		rows = append(rows, r(other, 1, int64(i+1)))
		others := make([]int64, len(rows))
		if err := batch.PushFetch(ctxT(t), st.inc, rows, others); err != nil {
			t.Fatalf("step %d: batch PushFetch: %v", i, err)
		}
		want := make([][2]int64, len(req.Limits))
		for j := range want {
			want[j] = [2]int64{others[2*j], others[2*j+1]}
		}
		if !slices.Equal(got.Others, want) || got.Allowed != wantAllowed(req, want) {
			t.Errorf("step %d: Allow = %+v; the push script read others %v, allowed %v", i, got, want, wantAllowed(req, want))
		}
	}
	sameHashes(t, raw, "Allow", prefixAllow, "push script", prefixBatch, sec, minute, secPrev, minPrev)
}
