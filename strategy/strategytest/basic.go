package strategytest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	clustersync "github.com/limiterd/limiterd/sync"
)

func testRoundTrip(t *testing.T, e *env) {
	a, b := e.inc("a"), e.inc("b")
	k := e.key("k")

	e.push(t, a, e.row(k, 3_500_000))
	e.wantFetch(t, b, []clustersync.WindowKey{k}, []int64{3_500_000})
	e.wantFetch(t, a, []clustersync.WindowKey{k}, []int64{0})
	e.wantWindow(t, k, 3_500_000)

	e.push(t, b, e.row(k, 1_000_000))
	e.wantWindow(t, k, 4_500_000)
	e.wantFetch(t, a, []clustersync.WindowKey{k, k}, []int64{1_000_000, 1_000_000})
	e.wantFetch(t, b, []clustersync.WindowKey{k}, []int64{3_500_000})

	// A newer total replaces the older one, down to zero (a release).
	e.push(t, a, e.row(k, 0))
	e.wantWindow(t, k, 1_000_000)
	e.wantFetch(t, b, []clustersync.WindowKey{k}, []int64{0})

	// Empty calls are valid.
	e.push(t, a)
	e.fetch(t, a)
}

func testRetriedPush(t *testing.T, e *env) {
	a := e.inc("a")
	keys := []clustersync.WindowKey{e.key("k1"), e.key("k2"), e.key("k3")}
	rows := []clustersync.Row{e.row(keys[0], 5_000_000), e.row(keys[1], 2_000_000), e.row(keys[2], -1_000_000)}
	for range 3 {
		e.push(t, a, rows...)
	}
	for i, k := range keys {
		e.wantWindow(t, k, rows[i].Total)
	}
	// A new absolute total replaces the old one: 8, not 5 + 8.
	e.push(t, a, e.row(keys[0], 8_000_000))
	e.push(t, a, rows[0]) // a late retry of the first push
	e.wantWindow(t, keys[0], 8_000_000)
	e.wantFetch(t, e.inc("b"), keys, []int64{8_000_000, 2_000_000, -1_000_000})
}

func testOlderVersion(t *testing.T, e *env) {
	a := e.inc("a")
	k1, k2, k3, k4 := e.key("k1"), e.key("k2"), e.key("k3"), e.key("k4")

	old := e.row(k1, 5_000_000)
	e.push(t, a, e.row(k1, 8_000_000))
	e.push(t, a, old) // arrives late
	e.wantWindow(t, k1, 8_000_000)

	// One batch mixing a newer row (k1) and an older one (k2).
	oldK2 := e.row(k2, 1_000_000)
	e.push(t, a, e.row(k2, 4_000_000))
	e.push(t, a, e.row(k1, 9_000_000), oldK2)
	e.wantWindow(t, k1, 9_000_000)
	e.wantWindow(t, k2, 4_000_000)

	// Several rows for one window in one push: the newest version wins,
	// whatever the order.
	older, newer := e.row(k3, 10_000_000), e.row(k3, 20_000_000)
	e.push(t, a, newer, older)
	e.wantWindow(t, k3, 20_000_000)
	older, newer = e.row(k4, 30_000_000), e.row(k4, 40_000_000)
	e.push(t, a, older, newer)
	e.wantWindow(t, k4, 40_000_000)

	// Another incarnation's lower version is not compared with a's.
	b := e.inc("b")
	e.push(t, b, clustersync.Row{WindowKey: k1, Total: 1_000_000, Version: 1, ExpireAt: e.exp})
	e.wantWindow(t, k1, 10_000_000)
}

func testIncarnationsSummed(t *testing.T, e *env) {
	k := e.key("k")
	totals := []int64{1_000_000, 2_500_000, -500_000, 7, 40_000_000}
	incs := make([]string, len(totals))
	var sum int64
	for i, n := range totals {
		incs[i] = e.inc(fmt.Sprintf("n%d", i))
		e.push(t, incs[i], e.row(k, n))
		sum += n
	}
	e.wantWindow(t, k, sum)
	for i, inc := range incs {
		e.wantFetch(t, inc, []clustersync.WindowKey{k}, []int64{sum - totals[i]})
	}
	e.wantFetch(t, e.inc("never-pushed"), []clustersync.WindowKey{k}, []int64{sum})
}

func testOwnRowsExcluded(t *testing.T, e *env) {
	a, b := e.inc("a"), e.inc("b")
	k, other := e.key("k"), e.key("other")
	e.push(t, a, e.row(k, 5_000_000), e.row(other, 11_000_000))
	e.wantFetch(t, a, []clustersync.WindowKey{k, other}, []int64{0, 0})
	e.push(t, b, e.row(k, 7_000_000))
	e.wantFetch(t, a, []clustersync.WindowKey{k, other}, []int64{7_000_000, 0})
	e.wantFetch(t, b, []clustersync.WindowKey{k, other}, []int64{5_000_000, 11_000_000})
	e.wantWindow(t, k, 12_000_000)
}

func testExactTotals(t *testing.T, e *env) {
	const p53 = 1 << 53
	cases := []struct {
		name   string
		totals []int64 // one incarnation each
	}{
		{"tenth of a hit", []int64{100_000, 1}},
		{"negative", []int64{-2_500_000, 1_000_000}},
		{"all negative", []int64{-2_500_000, -500_001}},
		{"large", []int64{1_000_000_000_000_000, 1_000_000_000_000_000, 1}},
		{"beyond float64", []int64{p53 + 1, p53 + 1}},
		{"cancelling", []int64{1_000_000_000_000_003, -1_000_000_000_000_000}},
		{"large negative", []int64{-(p53 + 3), 1}},
	}
	var keys []clustersync.WindowKey
	var sums []int64
	watcher := e.inc("watcher")
	for _, c := range cases {
		k := e.key(c.name)
		var sum int64
		for i, n := range c.totals {
			e.push(t, e.inc(fmt.Sprintf("n%d", i)), e.row(k, n))
			sum += n
		}
		e.wantWindow(t, k, sum)
		keys, sums = append(keys, k), append(sums, sum)
	}
	e.wantFetch(t, watcher, keys, sums)
}

func testDistinctWindows(t *testing.T, e *env) {
	h := e.hour // a multiple of every size below
	ns2 := e.ns + "-2"
	keys := []clustersync.WindowKey{
		{Namespace: e.ns, Size: time.Minute, Start: h, Key: "k"},
		{Namespace: e.ns, Size: time.Second, Start: h, Key: "k"},
		{Namespace: e.ns, Size: time.Hour, Start: h, Key: "k"},
		{Namespace: e.ns, Size: 2 * time.Minute, Start: h, Key: "k"},
		{Namespace: e.ns, Size: time.Minute, Start: h + int64(time.Minute), Key: "k"},
		{Namespace: e.ns, Size: time.Minute, Start: h - int64(time.Minute), Key: "k"},
		{Namespace: e.ns, Size: time.Second, Start: h + int64(time.Second), Key: "k"},
		{Namespace: ns2, Size: time.Minute, Start: h, Key: "k"},
		{Namespace: e.ns, Size: time.Minute, Start: h, Key: "K"},
		{Namespace: e.ns, Size: time.Minute, Start: h, Key: "k2"},
	}
	e.pushDistinct(t, keys)
}

// pushDistinct pushes one row per window with distinct totals, from two
// incarnations in two batches, and checks that each window reads only its
// own total.
func (e *env) pushDistinct(t *testing.T, keys []clustersync.WindowKey) {
	t.Helper()
	seen := make(map[clustersync.WindowKey]int, len(keys))
	for i, k := range keys {
		if j, dup := seen[k]; dup {
			panic(fmt.Sprintf("strategytest: windows %d and %d are the same: %s", j, i, show(k)))
		}
		seen[k] = i
	}
	a, b := e.inc("a"), e.inc("b")
	var ra, rb []clustersync.Row
	want := make([]int64, len(keys))
	for i, k := range keys {
		ta, tb := int64(i+1)*1_000_000, int64(i+1)*1_000
		ra, rb = append(ra, e.row(k, ta)), append(rb, e.row(k, tb))
		want[i] = ta + tb
	}
	e.push(t, a, ra...)
	e.push(t, b, rb...)
	for i, k := range keys {
		e.wantWindow(t, k, want[i])
	}
	e.wantFetch(t, e.inc("c"), keys, want)
}

func testKeyEncoding(t *testing.T, e *env) {
	w := func(ns, key string) clustersync.WindowKey {
		return clustersync.WindowKey{Namespace: e.ns + ns, Size: time.Minute, Start: e.minute, Key: key}
	}
	long := strings.Repeat("x", 1023)
	keys := []clustersync.WindowKey{
		// Namespace/key boundaries.
		w("a|b", "c"), w("a", "b|c"), w("a", "b") /* "a" + "b" */, w("", "ab"),
		w("a:b", "c"), w("a", "b:c"), w(":a", "b"), w("", ":a:b"),
		w("a b", "c"), w("a", "b c"),
		w("a", "{b}"), w("a", "b}c"), w("a", "%7C"), w("a", "|"), w("a", "%"), w("a", "\\|"),
		// Separators, NUL and whitespace inside keys.
		w("", "a|b"), w("", "a||b"), w("", "a:b"), w("", "a::b"), w("", "a b"),
		w("", "a\x00b"), w("", "a"), w("", "a\x00"), w("", "\x00a"), w("", "\x00"), w("", "\x00\x00"),
		w("", " "), w("", "  "), w("", "\t"), w("", "\n"), w("", "a\nb"), w("", "'"), w("", `"`),
		// Non-ASCII, with no normalisation: é precomposed and decomposed.
		w("", "ключ"), w("", "键"), w("", "🔑"), w("", "\u00e9"), w("", "e\u0301"), w("", "\ufeffa"),
		// Longest keys (1 KiB) and near misses.
		w("", long+"y"), w("", long+"z"), w("", long), w("", strings.Repeat("é", 512)),
		// Case.
		w("", "A|B"),
	}
	e.pushDistinct(t, keys)
}

func testSubSecond(t *testing.T, e *env) {
	now := time.Now().UnixNano()
	s100 := ratelimit.WindowStart(now, 200*time.Millisecond) // a multiple of 100 ms and 200 ms
	s1 := ratelimit.WindowStart(now, time.Millisecond)
	var keys []clustersync.WindowKey
	for i := range 10 {
		keys = append(keys, clustersync.WindowKey{Namespace: e.ns, Size: 100 * time.Millisecond, Start: s100 + int64(i)*int64(100*time.Millisecond), Key: "k"})
	}
	keys = append(keys,
		clustersync.WindowKey{Namespace: e.ns, Size: 200 * time.Millisecond, Start: s100, Key: "k"},
		clustersync.WindowKey{Namespace: e.ns, Size: 101 * time.Millisecond, Start: ratelimit.WindowStart(now, 101*time.Millisecond), Key: "k"},
		clustersync.WindowKey{Namespace: e.ns, Size: time.Millisecond, Start: s1, Key: "k"},
		clustersync.WindowKey{Namespace: e.ns, Size: time.Millisecond, Start: s1 + int64(time.Millisecond), Key: "k"},
		clustersync.WindowKey{Namespace: e.ns, Size: time.Millisecond, Start: s1 - int64(time.Millisecond), Key: "k"},
		clustersync.WindowKey{Namespace: e.ns, Size: time.Second, Start: ratelimit.WindowStart(s100, time.Second), Key: "k"},
	)
	e.pushDistinct(t, keys)
}

func testUnknownKeys(t *testing.T, e *env) {
	a := e.inc("a")
	known := e.key("known")
	e.push(t, e.inc("b"), e.row(known, 3_000_000))
	unknown := []clustersync.WindowKey{
		e.key("unknown"),
		{Namespace: e.ns + "-unknown", Size: time.Minute, Start: e.minute, Key: "known"},
		{Namespace: e.ns, Size: time.Second, Start: e.minute, Key: "known"},
		{Namespace: e.ns, Size: time.Minute, Start: e.minute + int64(time.Minute), Key: "known"},
	}
	for _, k := range unknown {
		e.wantWindow(t, k, 0)
	}
	keys := append([]clustersync.WindowKey{known}, unknown...)
	keys = append(keys, known)
	e.wantFetch(t, a, keys, []int64{3_000_000, 0, 0, 0, 0, 3_000_000})
}

func testExpiry(t *testing.T, e *env) {
	a, b := e.inc("a"), e.inc("b")
	// Every node computes the same ExpireAt for a window, whatever the key,
	// so a store may keep a row until every row of its window (of any key)
	// has expired (Redis keeps the rows of a window together): short has a
	// window of its own.
	long, mixed := e.key("long"), e.key("mixed")
	short := clustersync.WindowKey{Namespace: e.ns, Size: time.Second, Start: e.minute, Key: "short"}
	pushed := time.Now()
	exp := pushed.Add(time.Second)
	soon := func(k clustersync.WindowKey, n int64) clustersync.Row {
		return clustersync.Row{WindowKey: k, Total: n, Version: e.next(), ExpireAt: exp}
	}
	e.push(t, a, soon(short, 5_000_000), e.row(long, 7_000_000), soon(mixed, 1_000_000))
	e.push(t, b, soon(short, 2_000_000), e.row(mixed, 2_000_000))
	w, f := e.window(t, short), e.fetch(t, b, short)
	if time.Since(pushed) < 500*time.Millisecond && (w != 7_000_000 || f[0] != 5_000_000) {
		t.Errorf("right after the push (before ExpireAt): Window(short) = %d, Fetch(short) = %d, want 7000000, 5000000", w, f[0])
	}

	purger, _ := e.s.(Purger)
	const limit = 15 * time.Second
	deadline := pushed.Add(limit)
	for {
		if purger != nil {
			if _, err := purger.Purge(ctx(t, callTimeout)); err != nil {
				t.Fatalf("Purge: %v", err)
			}
		}
		w, f := e.window(t, short), e.fetch(t, a, short)
		if w == 0 && f[0] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v after the push of rows with ExpireAt = push + 1s: Window(short) = %d, Fetch(short) = %d, want 0, 0", limit, w, f[0])
		}
		time.Sleep(100 * time.Millisecond) // the bounded expiry poll
	}
	t.Logf("rows expired %v after the push", time.Since(pushed).Round(time.Millisecond))
	e.wantWindow(t, long, 7_000_000)
	// A window whose rows expire at different times: the contract says
	// only that a row "may disappear" at its ExpireAt, so a store may keep
	// the expired row until the whole window expires. Only the live row is
	// required.
	if got := e.window(t, mixed); got != 2_000_000 {
		if got != 3_000_000 {
			t.Errorf("Window(mixed) = %d, want 2000000 (or 3000000 while the expired row lingers)", got)
		} else {
			t.Logf("note: an expired row still counts while another row of its window lives: Window(mixed) = %d, not 2000000", got)
		}
	}

	// An expired row reads as absent: a newer row counts alone.
	e.push(t, a, e.row(short, 4_000_000))
	e.wantWindow(t, short, 4_000_000)
}

func testLargeBatch(t *testing.T, e *env) {
	const n = 100_000
	a, b := e.inc("a"), e.inc("b")
	keys := make([]clustersync.WindowKey, n)
	rows := make([]clustersync.Row, n)
	version := e.next()
	for i := range n {
		keys[i] = e.key(fmt.Sprintf("key-%06d", i))
		rows[i] = clustersync.Row{WindowKey: keys[i], Total: total100k(i), Version: version, ExpireAt: e.exp}
	}
	c := ctx(t, 5*time.Minute)
	if err := e.s.Push(c, b, rows); err != nil {
		t.Fatalf("Push(%d rows): %v", n, err)
	}
	others := make([]int64, n)
	for i := range others {
		others[i] = unset
	}
	if err := e.s.Fetch(c, a, keys, others); err != nil {
		t.Fatalf("Fetch(%d keys): %v", n, err)
	}
	bad := 0
	for i := range n {
		if want := total100k(i); others[i] != want {
			if bad < 5 {
				t.Errorf("others[%d] (%s) = %d, want %d", i, show(keys[i]), others[i], want)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d keys fetched wrong", bad, n)
	}
	e.wantWindow(t, keys[n-1], total100k(n-1))
}

// total100k is the total of key i in the 100k batch: distinct, some
// negative, some fractional.
func total100k(i int) int64 {
	return int64(i%7-3)*1_000_000 + int64(i)*10 + 1
}

func testConcurrentPushes(t *testing.T, e *env) {
	const (
		incs       = 8
		goroutines = 4
		rounds     = 25
	)
	keys := []clustersync.WindowKey{e.key("k0"), e.key("k1"), e.key("k2"), e.key("k3")}
	type incState struct {
		name   string
		mu     sync.Mutex // held while counting and taking a version
		totals []int64
	}
	states := make([]*incState, incs)
	for i := range states {
		states[i] = &incState{name: e.inc(fmt.Sprintf("n%d", i)), totals: make([]int64, len(keys))}
	}
	c := ctx(t, 5*time.Minute)
	var wg sync.WaitGroup
	for i, st := range states {
		for g := range goroutines {
			wg.Go(func() {
				for r := range rounds {
					// Count and take the version under the incarnation's
					// lock, so a higher version always carries a higher
					// count; push outside it, so pushes race and arrive
					// out of order.
					st.mu.Lock()
					rows := make([]clustersync.Row, len(keys))
					version := e.next()
					for j, k := range keys {
						st.totals[j] += int64(1_000_000 + 1000*i + 10*g + r%3 - j)
						rows[j] = clustersync.Row{WindowKey: k, Total: st.totals[j], Version: version, ExpireAt: e.exp}
					}
					st.mu.Unlock()
					if err := e.s.Push(c, st.name, rows); err != nil {
						t.Errorf("incarnation %d goroutine %d: Push: %v", i, g, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	sums := make([]int64, len(keys))
	for _, st := range states {
		for j := range keys {
			sums[j] += st.totals[j]
		}
	}
	for j, k := range keys {
		e.wantWindow(t, k, sums[j])
	}
	for _, st := range states {
		want := make([]int64, len(keys))
		for j := range keys {
			want[j] = sums[j] - st.totals[j]
		}
		e.wantFetch(t, st.name, keys, want)
	}
}
