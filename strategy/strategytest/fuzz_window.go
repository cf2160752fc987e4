package strategytest

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/limiterd/limiterd/ratelimit"
	"github.com/limiterd/limiterd/strategy/memory"
	clustersync "github.com/limiterd/limiterd/sync"
)

// The window kinds. Three incarnations push rows of two keys in windows
// of three sizes; FuzzAllow adds AllowGroup calls, single Allows (groups
// of one) and groups, each incarnation sending its exact own totals as a
// node does. The reference
// is the memory store, sent the same calls, and for every decision the
// node's own formula (ratelimit.SlidingRate); after every call the sums of the
// windows it touched are read back from both stores.

// windowSizes are the sizes the sequences use; an Allow checks at most
// one limit per size.
var windowSizes = [...]time.Duration{time.Second, 250 * time.Millisecond, time.Minute}

// windowKeys are the keys: a plain one and one of the bytes stores must
// escape.
var windowKeys = [...]string{"k", "k|:é\x00 x"}

const windowIncs = 3

// Window op codes, each followed by its fields as the comments say.
const (
	wTick      = iota // time step
	wPush             // inc, rows (see rows)
	wPushFetch        // inc, rows
	wRetry            // the last push again, as sent
	wStale            // inc, a row of an older version
	wFetch            // inc, key, size
	wAllow            // inc, limits, cost: a group of one (FuzzAllow)
	wGroup            // inc, windows, entries (FuzzAllow)
	wOps
)

type ownRow struct{ total, version int64 }

type windowFuzz struct {
	*fuzzer
	s     clustersync.Store
	w     clustersync.Windower
	ga    clustersync.GroupAllower
	allow bool
	ref   *memory.Store
	incs  [windowIncs]string
	// own is each incarnation's rows as it last sent them.
	own  [windowIncs]map[clustersync.WindowKey]ownRow
	now  int64
	last struct {
		inc  int
		rows []clustersync.Row
		req  *OneAllow
	}
}

func fuzzWindows(s clustersync.Store, allow bool) func(*fuzzer) func() bool {
	return func(f *fuzzer) func() bool {
		w, ok := s.(clustersync.Windower)
		if !ok {
			return nil
		}
		x := &windowFuzz{fuzzer: f, s: s, w: w, allow: allow, ref: memory.New()}
		if allow {
			if x.ga, ok = s.(clustersync.GroupAllower); !ok {
				return nil
			}
		}
		for i := range x.incs {
			x.incs[i] = clustersync.NewIncarnation("fz")
			x.own[i] = map[clustersync.WindowKey]ownRow{}
		}
		x.now = f.base + f.src.in(0, int64(time.Minute))
		f.t.Cleanup(func() { _ = x.ref.Close() })
		return x.step
	}
}

func (x *windowFuzz) step() bool {
	ops := wOps
	if !x.allow {
		ops = wAllow
	}
	switch x.src.pick(ops) {
	case wTick:
		x.tick()
	case wPush:
		x.push(false)
	case wPushFetch:
		x.push(true)
	case wRetry:
		x.retry()
	case wStale:
		x.stale()
	case wFetch:
		x.fetch()
	case wAllow:
		x.allowOne()
	case wGroup:
		x.allowGroup()
	}
	return !x.t.Failed()
}

// tick moves the clock: forward by up to a minute and a half, back by up
// to a second, or to a window's edge.
func (x *windowFuzz) tick() {
	switch x.src.pick(4) {
	case 0:
		x.now += x.src.in(0, int64(1500*time.Millisecond))
	case 1:
		x.now += x.src.in(0, int64(90*time.Second))
	case 2:
		x.now -= x.src.in(0, int64(time.Second))
	case 3:
		size := windowSizes[x.src.pick(len(windowSizes))]
		x.now = ratelimit.WindowStart(x.now, size) + size.Nanoseconds() + x.src.in(-1, 1)
	}
	x.log("tick to %d", x.now-x.base)
}

// key is window size of key k holding t, or the window before it.
func (x *windowFuzz) key(k int, size time.Duration, prev bool) clustersync.WindowKey {
	start := ratelimit.WindowStart(x.now, size)
	if prev {
		start -= int64(size)
	}
	return clustersync.WindowKey{Namespace: x.ns, Size: size, Start: start, Key: windowKeys[k]}
}

// amount reads a count in micro-hits: whole or fractional hits, negative
// ones (a refund), or large totals: up to 2^53 for Increment, whose sums
// are exact int64, up to 2^40 for Allow, whose callers keep the sums
// within ±2^53, where float64 is exact.
func (x *windowFuzz) amount() int64 {
	shift := int64(22)
	if x.allow {
		shift = 9
	}
	switch x.src.pick(8) {
	case 0:
		return 0
	case 1:
		return -x.src.in(1, 5*hit)
	case 2:
		return x.src.in(1, 1<<31) << x.src.in(0, shift)
	case 3, 4:
		return x.src.in(1, 10) * hit
	default:
		return x.src.in(1, 3*hit)
	}
}

// rows reads 1 to 3 rows of inc: a window, an amount added to inc's own
// total of it, and sometimes a version older than the one sent last.
func (x *windowFuzz) rows(inc int) []clustersync.Row {
	n := 1 + x.src.pick(3)
	rows := make([]clustersync.Row, 0, n)
	for range n {
		k := x.key(x.src.pick(len(windowKeys)), windowSizes[x.src.pick(len(windowSizes))], x.src.chance(64))
		own := x.own[inc][k]
		own.total += x.amount()
		own.version = x.version()
		x.own[inc][k] = own
		rows = append(rows, clustersync.Row{WindowKey: k, Total: own.total, Version: own.version, ExpireAt: x.expire})
	}
	return rows
}

func (x *windowFuzz) push(fetch bool) {
	inc := x.src.pick(windowIncs)
	rows := x.rows(inc)
	x.last.inc, x.last.rows, x.last.req = inc, rows, nil
	x.send(inc, rows, fetch)
}

// send pushes rows by inc to both, with PushFetch when fetch, and
// compares what comes back.
func (x *windowFuzz) send(inc int, rows []clustersync.Row, fetch bool) {
	x.log("%s by inc %d: %s", map[bool]string{false: "push", true: "pushfetch"}[fetch], inc, showRows(x.base, rows))
	if !fetch {
		x.must("Push", x.s.Push(x.ctx, x.incs[inc], rows))
		x.must("reference Push", x.ref.Push(x.ctx, x.incs[inc], rows))
	} else {
		pf, ok := x.s.(clustersync.PushFetcher)
		if !ok {
			x.must("Push", x.s.Push(x.ctx, x.incs[inc], rows))
			x.must("reference Push", x.ref.Push(x.ctx, x.incs[inc], rows))
		} else {
			got, want := unsetN(len(rows)), unsetN(len(rows))
			x.must("PushFetch", pf.PushFetch(x.ctx, x.incs[inc], rows, got))
			x.must("reference PushFetch", x.ref.PushFetch(x.ctx, x.incs[inc], rows, want))
			if !slices.Equal(got, want) {
				x.fail("PushFetch others = %v, want %v", got, want)
			}
		}
	}
	for _, r := range rows {
		x.checkWindow(r.WindowKey)
	}
}

// retry sends the last push again, as sent: a retried push counts once.
func (x *windowFuzz) retry() {
	switch {
	case x.last.req != nil:
		// Its rows' versions are no longer new: only the decision is
		// made again.
		x.log("retry of the last allow")
		x.decide(x.last.req)
	case x.last.rows != nil:
		x.log("retry of the last push")
		x.send(x.last.inc, x.last.rows, x.src.chance(128))
	}
}

// stale sends a row of inc with a version older than the one it sent
// last and another total: the store must ignore it.
func (x *windowFuzz) stale() {
	inc := x.src.pick(windowIncs)
	k := x.key(x.src.pick(len(windowKeys)), windowSizes[x.src.pick(len(windowSizes))], x.src.chance(64))
	own, ok := x.own[inc][k]
	if !ok || own.version < 2 {
		return
	}
	// Strictly older: a node never sends one version with two totals
	// (Cassandra breaks a tie of timestamps by the cell's value).
	r := clustersync.Row{WindowKey: k, Total: own.total + x.amount() + 1, Version: own.version - x.src.in(1, own.version-1), ExpireAt: x.expire}
	x.send(inc, []clustersync.Row{r}, x.src.chance(128))
}

func (x *windowFuzz) fetch() {
	inc := x.src.pick(windowIncs)
	var keys []clustersync.WindowKey
	for range 1 + x.src.pick(3) {
		keys = append(keys, x.key(x.src.pick(len(windowKeys)), windowSizes[x.src.pick(len(windowSizes))], x.src.chance(64)))
	}
	x.log("fetch by inc %d of %d windows", inc, len(keys))
	got, want := unsetN(len(keys)), unsetN(len(keys))
	x.must("Fetch", x.s.Fetch(x.ctx, x.incs[inc], keys, got))
	x.must("reference Fetch", x.ref.Fetch(x.ctx, x.incs[inc], keys, want))
	if !slices.Equal(got, want) {
		x.fail("Fetch by inc %d = %v, want %v", inc, got, want)
	}
}

// checkWindow reads k's sum over every incarnation from both.
func (x *windowFuzz) checkWindow(k clustersync.WindowKey) {
	x.t.Helper()
	got, err := x.w.Window(x.ctx, k)
	x.must("Window", err)
	want, err := x.ref.Window(x.ctx, k)
	x.must("reference Window", err)
	if got != want {
		x.fail("Window(size %s, start %d, key %q) = %d, want %d", k.Size, k.Start-x.base, k.Key, got, want)
	}
}

// limit reads a limit for a check whose rate (the reference's) plus cost
// is r: around r, often exactly at it, so that ≤ and < part.
func (x *windowFuzz) limit(r float64) int64 {
	switch x.src.pick(4) {
	case 0:
		return x.src.in(0, 20*hit)
	case 1:
		return x.src.in(0, 1<<31) << x.src.in(0, 22)
	default:
		if math.IsNaN(r) || math.Abs(r) > 1<<60 {
			return 0
		}
		return int64(math.Floor(r)) + x.src.in(-1, 1)
	}
}

// rate is the reference's sliding rate of key k's window of size for inc
// at now, its own rows as sent now.
func (x *windowFuzz) rate(inc, k int, size time.Duration) float64 {
	cur, prev := x.key(k, size, false), x.key(k, size, true)
	others := make([]int64, 2)
	x.must("reference Fetch", x.ref.Fetch(x.ctx, x.incs[inc], []clustersync.WindowKey{cur, prev}, others))
	c := float64(x.own[inc][cur].total + others[0])
	p := float64(x.own[inc][prev].total + others[1])
	return c + p*float64(size-time.Duration(x.now-cur.Start))/float64(size)
}

// windowRows returns inc's Cur and Prev rows of key k for size at now,
// with new versions, and records those versions.
func (x *windowFuzz) windowRows(inc, k int, size time.Duration) (cur, prev clustersync.Row) {
	rs := [2]clustersync.Row{}
	for i, wk := range []clustersync.WindowKey{x.key(k, size, false), x.key(k, size, true)} {
		own := x.own[inc][wk]
		own.version = x.version()
		x.own[inc][wk] = own
		rs[i] = clustersync.Row{WindowKey: wk, Total: own.total, Version: own.version, ExpireAt: x.expire}
	}
	return rs[0], rs[1]
}

// cost reads an Allow's cost: 0, whole or fractional hits.
func (x *windowFuzz) cost() int64 {
	switch x.src.pick(4) {
	case 0:
		return 0
	case 1:
		return x.src.in(1, 5) * hit
	default:
		return x.src.in(1, 3*hit)
	}
}

func (x *windowFuzz) allowOne() {
	inc, k := x.src.pick(windowIncs), x.src.pick(len(windowKeys))
	cost := x.cost()
	req := &OneAllow{Inc: x.incs[inc], At: x.now, Cost: cost, CountRejected: x.src.chance(64)}
	for i, size := range windowSizes {
		if i > 0 && !x.src.chance(96) {
			continue
		}
		l := x.limit(x.rate(inc, k, size) + float64(cost))
		cur, prev := x.windowRows(inc, k, size)
		req.Limits = append(req.Limits, OneLimit{Size: size, Limit: l, Cur: cur, Prev: prev})
	}
	x.last.req, x.last.rows = req, nil
	if x.decide(req) {
		// The store wrote Cur with the cost.
		for _, l := range req.Limits {
			own := x.own[inc][l.Cur.WindowKey]
			own.total += cost
			x.own[inc][l.Cur.WindowKey] = own
		}
	}
}

// decide sends req to both as a group of one, compares the decisions,
// the others' totals and the windows' sums after, and reports whether the
// cost was counted.
func (x *windowFuzz) decide(req *OneAllow) bool {
	x.log("allow at %d cost %d countRejected %v limits %s", req.At-x.base, req.Cost, req.CountRejected, showLimits(x.base, req.Limits))
	got, err := AllowOne(x.ctx, x.ga, *req)
	x.must("Allow", err)
	want, err := AllowOne(x.ctx, x.ref, *req)
	x.must("reference Allow", err)
	if got.Allowed != want.Allowed || !slices.Equal(got.Others, want.Others) {
		x.fail("Allow = %v, others %v; want %v, others %v", got.Allowed, got.Others, want.Allowed, want.Others)
	}
	ok := true
	for i, l := range req.Limits {
		ok = ok && nodeAdmits(req.At, l.Size, l.Cur, l.Prev, l.Cur.Total, got.Others[i], req.Cost, l.Limit)
	}
	if got.Allowed != ok {
		x.fail("Allow = %v; ratelimit.SlidingRate decides %v", got.Allowed, ok)
	}
	for _, l := range req.Limits {
		x.checkWindow(l.Cur.WindowKey)
		x.checkWindow(l.Prev.WindowKey)
	}
	return want.Allowed || req.CountRejected
}

// allowGroup sends a group of 1 to 6 entries of one key, each checking
// some of the windows, to both.
func (x *windowFuzz) allowGroup() {
	inc, k := x.src.pick(windowIncs), x.src.pick(len(windowKeys))
	req := &clustersync.GroupAllowRequest{Inc: x.incs[inc], At: x.now}
	var rates []float64
	for i, size := range windowSizes {
		if i > 0 && !x.src.chance(96) {
			continue
		}
		rates = append(rates, x.rate(inc, k, size))
		cur, prev := x.windowRows(inc, k, size)
		req.Windows = append(req.Windows, clustersync.GroupWindow{Size: size, Cur: cur, Prev: prev})
	}
	for range 1 + x.src.pick(6) {
		e := clustersync.GroupEntry{Cost: x.cost(), CountRejected: x.src.chance(64)}
		for w := range req.Windows {
			if x.src.chance(200) {
				e.Limits = append(e.Limits, clustersync.GroupLimit{Window: w, Limit: x.limit(rates[w] + float64(e.Cost))})
			}
		}
		req.Entries = append(req.Entries, e)
	}
	x.last.req, x.last.rows = nil, nil
	x.log("group at %d of %d windows, entries %+v", x.now-x.base, len(req.Windows), req.Entries)
	got, want := make([]bool, len(req.Entries)), make([]bool, len(req.Entries))
	gotOthers, wantOthers := make([][2]int64, len(req.Windows)), make([][2]int64, len(req.Windows))
	x.must("AllowGroup", x.ga.AllowGroup(x.ctx, req, got, gotOthers))
	x.must("reference AllowGroup", x.ref.AllowGroup(x.ctx, req, want, wantOthers))
	if !slices.Equal(got, want) || !slices.Equal(gotOthers, wantOthers) {
		x.fail("AllowGroup = %v, others %v; want %v, others %v", got, gotOthers, want, wantOthers)
	}
	var counted int64
	for i, e := range req.Entries {
		ok := true
		for _, l := range e.Limits {
			w := &req.Windows[l.Window]
			ok = ok && nodeAdmits(req.At, w.Size, w.Cur, w.Prev, w.Cur.Total+counted, gotOthers[l.Window], e.Cost, l.Limit)
		}
		if got[i] != ok {
			x.fail("AllowGroup entry %d = %v; ratelimit.SlidingRate decides %v", i, got[i], ok)
		}
		if ok || e.CountRejected {
			counted += e.Cost
		}
	}
	for _, w := range req.Windows {
		own := x.own[inc][w.Cur.WindowKey]
		own.total += counted
		x.own[inc][w.Cur.WindowKey] = own
		x.checkWindow(w.Cur.WindowKey)
		x.checkWindow(w.Prev.WindowKey)
	}
}

// nodeAdmits is the node's decision of one limit (ratelimit.SlidingRate, as
// the node decides from fetched totals): own is this incarnation's total
// of cur, others the others' totals of cur and prev.
func nodeAdmits(at int64, size time.Duration, cur, prev clustersync.Row, own int64, others [2]int64, cost, limit int64) bool {
	r := ratelimit.SlidingRate(own+others[0], prev.Total+others[1], size, at-cur.Start)
	return r+float64(cost) <= float64(limit)
}

func unsetN(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = unset
	}
	return s
}

// showRows formats rows for the trail, times from base.
func showRows(base int64, rows []clustersync.Row) string {
	s := ""
	for _, r := range rows {
		s += fmt.Sprintf("[%q %s@%d total %d v%d]", r.Key, r.Size, r.Start-base, r.Total, r.Version)
	}
	return s
}

func showLimits(base int64, ls []OneLimit) string {
	s := ""
	for _, l := range ls {
		s += fmt.Sprintf("[%s limit %d cur %s prev %s]", l.Size, l.Limit,
			showRows(base, []clustersync.Row{l.Cur}), showRows(base, []clustersync.Row{l.Prev}))
	}
	return s
}

// windowSeeds are inputs for the window kinds: a push of 4 hits in the
// current minute, then (FuzzAllow) an Allow, then the generator.
func windowSeeds() [][]byte {
	var e encoder
	e.in(int64(45*time.Second), 0) // first time
	e.u8(wPush)
	e.u8(0)      // inc 0
	e.u8(0)      // one row
	e.u8(0)      // key 0
	e.u8(2)      // a minute
	e.u8(255)    // current window
	e.u8(3)      // whole hits
	e.in(4, 1)   // 4 hits
	e.u8(wAllow) // ignored by FuzzIncrement's op count
	return [][]byte{e}
}
