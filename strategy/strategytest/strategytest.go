package strategytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

// Purger is the optional explicit purge of expired rows, for stores such
// as PostgreSQL whose rows do not vanish by themselves. The expiry subtest
// calls it while polling when the store has it.
type Purger interface {
	Purge(ctx context.Context) (int64, error)
}

// subtest is one behaviour of the suite.
type subtest struct {
	name string
	run  func(t *testing.T, e *env)
	// needs is the ability the subtest checks (0: every store's).
	needs clustersync.Abilities
}

// subtests lists the suite in the order Run runs it.
var subtests = []subtest{
	{"round trip", testRoundTrip, 0},
	{"retried push counted once", testRetriedPush, 0},
	{"older version never overwrites newer", testOlderVersion, 0},
	{"several incarnations summed", testIncarnationsSummed, 0},
	{"own rows excluded from fetch", testOwnRowsExcluded, 0},
	{"exact totals", testExactTotals, 0},
	{"distinct windows", testDistinctWindows, 0},
	{"key encoding", testKeyEncoding, 0},
	{"sub-second windows", testSubSecond, 0},
	{"unknown keys read zero", testUnknownKeys, 0},
	{"expiry", testExpiry, 0},
	{"batch of 100k rows", testLargeBatch, 0},
	{"concurrent pushes", testConcurrentPushes, 0},
	{"cancelled context", testCancelledContext, 0},
	{"closed", testClosed, 0},
	{"reset", testReset, 0},
	{"window", testWindow, clustersync.Window},
	{"push fetch", testPushFetch, clustersync.PushFetch},
	{"atomic allow", testAtomicAllow, clustersync.Decide},
	{"group allow", testGroupAllow, clustersync.Decide},
	{"bucket arithmetic", testBucketArithmetic, clustersync.Buckets},
	{"bucket retry takes once", testBucketRetry, clustersync.Buckets},
	{"bucket catch up", testBucketCatchUp, clustersync.Buckets},
	{"bucket late take", testBucketLate, clustersync.Buckets},
	{"bucket all or none", testBucketAllOrNone, clustersync.Buckets},
	{"bucket keys", testBucketKeys, clustersync.Buckets},
	{"bucket exact under concurrency", testBucketExact, clustersync.Buckets},
	{"bucket expiry", testBucketExpiry, clustersync.Buckets},
	{"bucket reset", testBucketReset, clustersync.Buckets},
	{"lease arithmetic", testLeaseArithmetic, clustersync.Leases},
	{"lease batch order", testLeaseBatchOrder, clustersync.Leases},
	{"lease keys", testLeaseKeys, clustersync.Leases},
	{"lease exact under concurrency", testLeaseExact, clustersync.Leases},
	{"lease releases remembered", testLeaseReleasesRemembered, clustersync.Leases},
	{"lease clear", testLeaseClear, clustersync.Leases},
	{"changes read", testChangesRead, clustersync.Changes},
	{"changes late push", testChangesLatePush, clustersync.Changes},
	{"changes every write", testChangesEveryWrite, clustersync.Changes},
	{"changes pages", testChangesPages, clustersync.Changes},
	{"changes concurrent", testChangesConcurrent, clustersync.Changes},
	{"changes lost", testChangesLost, clustersync.Changes},
}

// Run runs the conformance suite against the stores newStore returns: one
// fresh store per subtest, closed when the subtest ends. See the package
// documentation for what it checks and which inputs it sends.
//
// What a store declares (Store.Abilities) decides the rest: every subtest
// of a declared ability runs (and fails when the store does not implement
// its interface), and for each ability not declared a subtest checks that
// a Syncer over the store refuses what needs it cleanly, or serves
// without it. Nothing is skipped.
func Run(t *testing.T, newStore func(t *testing.T) clustersync.Store) {
	t.Helper()
	probe := newStore(t)
	if probe == nil {
		t.Fatal("newStore returned nil")
	}
	declared := probe.Abilities()
	_ = probe.Close()
	t.Run("declared abilities implemented", func(t *testing.T) {
		mustSyncer(t, newEnv(t, newStore), periodic, "a") // NewSyncer checks them
	})
	for _, st := range subtests {
		if !declared.Has(st.needs) {
			continue // checked below, as refused
		}
		t.Run(st.name, func(t *testing.T) { st.run(t, newEnv(t, newStore)) })
	}
	for _, w := range withoutAbility {
		if declared.Has(w.needs) {
			continue
		}
		t.Run(w.name, func(t *testing.T) { w.run(t, newEnv(t, newStore)) })
	}
}

// as returns e's store as the optional interface I, failing t when it is
// not one.
func as[I any](t *testing.T, e *env) I {
	t.Helper()
	i, ok := e.s.(I)
	if !ok {
		t.Fatalf("%T does not implement %v", e.s, reflect.TypeFor[I]())
	}
	return i
}

// env is one subtest's store, namespace, clock base and version source.
type env struct {
	s  clustersync.Store
	ns string
	// minute is the start of the current minute, and hour of the current
	// hour (Unix ns): aligned starts for windows of up to those sizes.
	minute, hour int64
	// exp is the ExpireAt of rows that must not expire during the test.
	exp time.Time
	// ver issues versions: the time in µs at the start, then +1 each.
	ver atomic.Int64
}

func newEnv(t *testing.T, newStore func(t *testing.T) clustersync.Store) *env {
	t.Helper()
	s := newStore(t)
	if s == nil {
		t.Fatal("newStore returned nil")
	}
	t.Cleanup(func() { _ = s.Close() })
	now := time.Now()
	e := &env{
		s:      s,
		ns:     namespace(t),
		minute: ratelimit.WindowStart(now.UnixNano(), time.Minute),
		hour:   ratelimit.WindowStart(now.UnixNano(), time.Hour),
		exp:    now.Add(10 * time.Minute),
	}
	e.ver.Store(now.UnixMicro())
	return e
}

// namespace returns a namespace unique to this run of t: "st.", up to 44
// characters of t's name in [A-Za-z0-9_.-], "." and 16 random hex digits
// (64 characters at most, a valid limiterd namespace name).
func namespace(t *testing.T) string {
	name := t.Name()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	clean := []byte(name)
	for i, c := range clean {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			clean[i] = '_'
		}
	}
	if len(clean) > 44 {
		clean = clean[:44]
	}
	return "st." + string(clean) + "." + randomHex(8)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// inc returns a new incarnation named after name.
func (e *env) inc(name string) string { return clustersync.NewIncarnation(name) }

// next returns a version greater than every one issued before.
func (e *env) next() int64 { return e.ver.Add(1) }

// key returns the one-minute window of key in the current minute.
func (e *env) key(key string) clustersync.WindowKey {
	return clustersync.WindowKey{Namespace: e.ns, Size: time.Minute, Start: e.minute, Key: key}
}

// row returns a row of k with a new version that expires in 10 minutes.
func (e *env) row(k clustersync.WindowKey, total int64) clustersync.Row {
	return clustersync.Row{WindowKey: k, Total: total, Version: e.next(), ExpireAt: e.exp}
}

// ctx returns a context for the subtest's store calls.
func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return c
}

// callTimeout bounds the store calls of ordinary subtests.
const callTimeout = 60 * time.Second

func (e *env) push(t *testing.T, inc string, rows ...clustersync.Row) {
	t.Helper()
	if err := e.s.Push(ctx(t, callTimeout), inc, rows); err != nil {
		t.Fatalf("Push(%d rows): %v", len(rows), err)
	}
}

// unset fills the others slices handed to a store: a store must overwrite
// every entry, unknown windows included.
const unset = -777_777

func (e *env) fetch(t *testing.T, inc string, keys ...clustersync.WindowKey) []int64 {
	t.Helper()
	others := make([]int64, len(keys))
	for i := range others {
		others[i] = unset
	}
	if err := e.s.Fetch(ctx(t, callTimeout), inc, keys, others); err != nil {
		t.Fatalf("Fetch(%d keys): %v", len(keys), err)
	}
	return others
}

// window returns the sum over every incarnation of k: by Window when the
// store is a clustersync.Windower, else by a Fetch of an incarnation that
// never wrote.
func (e *env) window(t *testing.T, k clustersync.WindowKey) int64 {
	t.Helper()
	if w, ok := e.s.(clustersync.Windower); ok {
		n, err := w.Window(ctx(t, callTimeout), k)
		if err != nil {
			t.Fatalf("Window(%s): %v", show(k), err)
		}
		return n
	}
	return e.fetch(t, e.inc("reader"), k)[0]
}

// wantWindow checks the sum over every incarnation of k.
func (e *env) wantWindow(t *testing.T, k clustersync.WindowKey, want int64) {
	t.Helper()
	if got := e.window(t, k); got != want {
		t.Errorf("sum over every incarnation of %s = %d, want %d", show(k), got, want)
	}
}

// wantFetch checks Fetch by inc of keys.
func (e *env) wantFetch(t *testing.T, inc string, keys []clustersync.WindowKey, want []int64) {
	t.Helper()
	got := e.fetch(t, inc, keys...)
	for i := range keys {
		if got[i] != want[i] {
			t.Errorf("Fetch by %s: others[%d] (%s) = %d, want %d", inc, i, show(keys[i]), got[i], want[i])
		}
	}
}

// show formats a window for messages, quoting the namespace and key.
func show(k clustersync.WindowKey) string {
	key := k.Key
	if len(key) > 40 {
		key = key[:40] + "…"
	}
	return fmt.Sprintf("ns=%q size=%s start=%d key=%q (%d bytes)", k.Namespace, k.Size, k.Start, key, len(k.Key))
}
