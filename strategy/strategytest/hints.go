package strategytest

import (
	"testing"
	"time"

	clustersync "github.com/limiterd/limiterd/sync"
)

// testAckedHints checks that a row's Acked hint never changes what is
// stored: right, stale, wrong or out-of-order hints, small and big
// totals, one window or both windows of a key in one push.
func testAckedHints(t *testing.T, e *env) {
	a, b := e.inc("a"), e.inc("b")
	hinted := func(r clustersync.Row, total, version int64) clustersync.Row {
		r.Acked = clustersync.Acked{Total: total, Version: version}
		return r
	}
	k := e.key("k")
	e.push(t, b, e.row(k, 1_000_000))

	r1 := e.row(k, 5_000_000)
	e.push(t, a, r1)
	r2 := hinted(e.row(k, 8_000_000), r1.Total, r1.Version) // the hint is right
	e.push(t, a, r2)
	e.wantWindow(t, k, 9_000_000)

	// A stale hint (the store holds r2, not r1): the newer row applies.
	e.push(t, a, hinted(e.row(k, 6_000_000), r1.Total, r1.Version))
	e.wantWindow(t, k, 7_000_000)

	// A hint with the stored version but another total: the row applies,
	// and the sum counts the stored total, not the hinted one.
	r4 := e.row(k, 12_000_000)
	e.push(t, a, r4)
	e.push(t, a, hinted(e.row(k, 15_000_000), 2_000_000, r4.Version))
	e.wantWindow(t, k, 16_000_000)
	e.wantFetch(t, b, []clustersync.WindowKey{k}, []int64{15_000_000})

	// A late row whose hint names the stored row exactly but a newer
	// version than the row's own: the row is older and changes nothing.
	late := e.row(k, 3_000_000)
	r6 := e.row(k, 20_000_000)
	e.push(t, a, r6)
	e.push(t, a, hinted(late, r6.Total, r6.Version))
	e.wantWindow(t, k, 21_000_000)

	// Totals at and past 10^15 and 2^53, hinted right: exact sums.
	big := e.key("big")
	e.push(t, b, e.row(big, 1<<55+3))
	prev := e.row(big, 999_999_999_999_999)
	e.push(t, a, prev)
	for _, total := range []int64{999_999_999_999_998, 1_000_000_000_000_001, 1<<53 + 1, -(1 << 54), 7, 8} {
		r := hinted(e.row(big, total), prev.Total, prev.Version)
		e.push(t, a, r)
		e.wantWindow(t, big, 1<<55+3+total)
		e.wantFetch(t, b, []clustersync.WindowKey{big}, []int64{total})
		prev = r
	}

	// Both windows of a key in one push, as a synchronous call sends them,
	// through PushFetch when the store has it.
	cur := clustersync.WindowKey{Namespace: e.ns, Size: time.Minute, Start: e.minute, Key: "two"}
	old := cur
	old.Start -= int64(time.Minute)
	rc, ro := e.row(cur, 2_000_000), e.row(old, 4_000_000)
	e.push(t, a, rc, ro)
	e.push(t, b, e.row(cur, 10_000_000), e.row(old, 20_000_000))
	rows := []clustersync.Row{hinted(e.row(cur, 3_000_000), rc.Total, rc.Version), ro}
	if pf, ok := e.s.(clustersync.PushFetcher); ok {
		others := []int64{unset, unset}
		if err := pf.PushFetch(ctx(t, callTimeout), a, rows, others); err != nil {
			t.Fatalf("PushFetch: %v", err)
		}
		if others[0] != 10_000_000 || others[1] != 20_000_000 {
			t.Errorf("PushFetch others = %v, want [10000000 20000000]", others)
		}
	} else {
		e.push(t, a, rows...)
	}
	e.wantWindow(t, cur, 13_000_000)
	e.wantWindow(t, old, 24_000_000)
}
